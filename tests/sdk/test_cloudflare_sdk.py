"""Conformance tests: the official, unmodified Cloudflare Python SDK against Hopper.

Run against a live server:

    python3 -m venv .venv
    .venv/bin/pip install -r tests/sdk/requirements.txt
    HOPPER_URL=http://127.0.0.1:8787 HOPPER_TOKEN=<root token> \
        .venv/bin/pytest -q tests/sdk

`scripts/test.sh` does all of this itself.

Every test creates its own queues (unique names, in a per-run account) and
deletes them afterwards. The module is skipped when HOPPER_URL or
HOPPER_TOKEN is not set.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import time
import uuid

import httpx
import pytest

import cloudflare
from cloudflare import Cloudflare

HOPPER_URL = os.environ.get("HOPPER_URL", "").rstrip("/")
HOPPER_TOKEN = os.environ.get("HOPPER_TOKEN", "")

pytestmark = pytest.mark.skipif(
    not HOPPER_URL or not HOPPER_TOKEN,
    reason="set HOPPER_URL and HOPPER_TOKEN to run the SDK conformance tests",
)

HEX32 = re.compile(r"^[0-9a-f]{32}$")
FAR = 3600  # a delay long enough that the message never becomes ready during a test
LEASE = 60_000  # a visibility timeout long enough that leases never expire during a test

# Variables the SDK reads from the environment that would change its auth/base URL.
_SDK_ENV = (
    "CLOUDFLARE_API_KEY",
    "CLOUDFLARE_EMAIL",
    "CLOUDFLARE_API_USER_SERVICE_KEY",
    "CLOUDFLARE_BASE_URL",
    "CLOUDFLARE_CUSTOM_HEADERS",
    "CLOUDFLARE_API_TOKEN",
)


# --------------------------------------------------------------------------- helpers


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_client(token: str) -> Cloudflare:
    return Cloudflare(api_token=token, base_url=f"{HOPPER_URL}/client/v4", max_retries=0)


def b64d(s: str) -> bytes:
    return base64.b64decode(s, validate=True)


def b64e(b: bytes) -> str:
    return base64.b64encode(b).decode()


def err_code(exc: cloudflare.APIStatusError) -> int:
    """The first v4-envelope error code of a failed call (and check the envelope)."""
    body = exc.body
    assert isinstance(body, dict), f"error body is not a JSON envelope: {body!r}"
    assert body.get("success") is False, body
    errors = body.get("errors")
    assert isinstance(errors, list) and errors, body
    assert isinstance(errors[0].get("message"), str) and errors[0]["message"], body
    return errors[0]["code"]


def err_message(exc: cloudflare.APIStatusError) -> str:
    return exc.body["errors"][0]["message"]  # type: ignore[index]


def now_ms() -> float:
    return time.time() * 1000


def ctype(msg) -> str:
    return msg.metadata["CF-Content-Type"]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def cf() -> Cloudflare:
    for var in _SDK_ENV:
        os.environ.pop(var, None)
    client = make_client(HOPPER_TOKEN)
    yield client
    client.close()


@pytest.fixture(scope="session")
def acct() -> str:
    return f"sdk-test-acct-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def raw() -> httpx.Client:
    """Plain HTTP client, only for non-queue routes the SDK does not know (functions)."""
    client = httpx.Client(
        base_url=f"{HOPPER_URL}/client/v4",
        headers={"Authorization": f"Bearer {HOPPER_TOKEN}"},
        timeout=30,
    )
    yield client
    client.close()


@pytest.fixture
def queues(cf: Cloudflare, acct: str):
    """Factory creating queues through the SDK; deletes them (and named extras) at teardown."""
    created_ids: list[str] = []
    extra_names: list[str] = []

    def make(prefix: str = "sdkq", account: str | None = None):
        account = account or acct
        q = cf.queues.create(account_id=account, queue_name=unique(prefix))
        assert q is not None and q.queue_id
        created_ids.append((account, q.queue_id))
        return q

    make.also_delete_by_name = extra_names.append  # type: ignore[attr-defined]
    make.track = lambda account, qid: created_ids.append((account, qid))  # type: ignore[attr-defined]
    yield make

    for name in extra_names:
        for q in cf.queues.list(account_id=acct, extra_query={"name": name}):
            created_ids.append((acct, q.queue_id))
    for account, qid in created_ids:
        try:
            cf.queues.delete(qid, account_id=account)
        except cloudflare.NotFoundError:
            pass


@pytest.fixture
def function(raw: httpx.Client, acct: str):
    """A registered function (push target) for worker consumers."""
    name = unique("sdkfn")
    r = raw.put(f"/accounts/{acct}/functions/{name}", json={"url": "http://127.0.0.1:9/x"})
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True
    yield name
    raw.delete(f"/accounts/{acct}/functions/{name}")


def pull_queue(cf: Cloudflare, acct: str, queues, **consumer_settings):
    """A fresh queue with an http_pull consumer."""
    q = queues()
    kwargs = {"settings": consumer_settings} if consumer_settings else {}
    c = cf.queues.consumers.create(q.queue_id, account_id=acct, type="http_pull", **kwargs)
    assert c is not None and c.type == "http_pull"
    return q


# --------------------------------------------------------------------------- queues


def test_queue_create_get_defaults(cf, acct, queues):
    before = now_ms()
    q = queues()
    assert HEX32.match(q.queue_id), q.queue_id
    assert q.queue_name.startswith("sdkq-")
    assert q.settings is not None
    assert q.settings.delivery_delay == 0
    assert q.settings.delivery_paused is False
    assert q.settings.message_retention_period == 345600
    assert q.consumers == []
    assert q.consumers_total_count == 0
    assert q.producers == []
    assert q.producers_total_count == 0
    created = dt.datetime.fromisoformat(q.created_on.replace("Z", "+00:00"))
    assert abs(created.timestamp() * 1000 - before) < 60_000
    assert q.modified_on

    got = cf.queues.get(q.queue_id, account_id=acct)
    assert got is not None
    assert got.queue_id == q.queue_id
    assert got.queue_name == q.queue_name
    assert got.settings == q.settings
    assert got.created_on == q.created_on


def test_queue_list(cf, acct, queues):
    q1 = queues()
    q2 = queues()
    page = cf.queues.list(account_id=acct)
    by_id = {q.queue_id: q for q in page}
    assert q1.queue_id in by_id and q2.queue_id in by_id
    assert by_id[q1.queue_id].queue_name == q1.queue_name
    assert by_id[q1.queue_id].consumers_total_count == 0

    # The SDK reads only `result`; the envelope still carries result_info.
    env = cf.queues.with_raw_response.list(account_id=acct).json()
    assert env["success"] is True
    info = env["result_info"]
    for key in ("page", "per_page", "count", "total_count", "total_pages"):
        assert isinstance(info[key], int), info
    assert info["page"] == 1
    assert info["count"] == len(env["result"])
    assert info["total_count"] >= 2

    # name filter and page size ride along as extra query params
    only = list(cf.queues.list(account_id=acct, extra_query={"name": q2.queue_name}))
    assert [q.queue_id for q in only] == [q2.queue_id]
    one = list(cf.queues.list(account_id=acct, extra_query={"per_page": 1, "page": 1}))
    assert len(one) == 1


def test_queue_accounts_are_isolated(cf, acct, queues):
    q = queues()
    other = f"sdk-test-other-{uuid.uuid4().hex[:8]}"
    assert q.queue_id not in {x.queue_id for x in cf.queues.list(account_id=other)}
    with pytest.raises(cloudflare.NotFoundError) as ei:
        cf.queues.get(q.queue_id, account_id=other)
    assert err_code(ei.value) == 11000


def test_queue_update_put_and_edit_patch(cf, acct, queues):
    q = queues()
    new_name = unique("sdkq-renamed")
    upd = cf.queues.update(
        q.queue_id,
        account_id=acct,
        queue_name=new_name,
        settings={"delivery_delay": 5, "delivery_paused": False, "message_retention_period": 600},
    )
    assert upd is not None
    assert upd.queue_id == q.queue_id
    assert upd.queue_name == new_name
    assert upd.settings.delivery_delay == 5
    assert upd.settings.delivery_paused is False
    assert upd.settings.message_retention_period == 600

    got = cf.queues.get(q.queue_id, account_id=acct)
    assert got.queue_name == new_name
    assert got.settings.delivery_delay == 5
    assert got.settings.message_retention_period == 600

    # PATCH is partial: only delivery_paused changes
    ed = cf.queues.edit(q.queue_id, account_id=acct, settings={"delivery_paused": True})
    assert ed.queue_name == new_name
    assert ed.settings.delivery_paused is True
    assert ed.settings.delivery_delay == 5
    assert ed.settings.message_retention_period == 600

    # an unchanged queue_name is fine on PATCH (wrangler sends it)
    ed2 = cf.queues.edit(
        q.queue_id, account_id=acct, queue_name=new_name, settings={"delivery_paused": False}
    )
    assert ed2.queue_name == new_name
    assert ed2.settings.delivery_paused is False
    assert ed2.settings.delivery_delay == 5

    # out-of-range settings
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.edit(q.queue_id, account_id=acct, settings={"message_retention_period": 10})
    assert err_code(ei.value) == 100128
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.edit(q.queue_id, account_id=acct, settings={"delivery_delay": 86401})
    assert err_code(ei.value) == 100128
    assert cf.queues.get(q.queue_id, account_id=acct).settings.delivery_delay == 5


def test_queue_name_rules_and_conflicts(cf, acct, queues):
    q1 = queues()
    q2 = queues()
    with pytest.raises(cloudflare.ConflictError) as ei:
        cf.queues.create(account_id=acct, queue_name=q1.queue_name)
    assert err_code(ei.value) == 11009
    # renaming onto a taken name
    with pytest.raises(cloudflare.ConflictError) as ei:
        cf.queues.update(q2.queue_id, account_id=acct, queue_name=q1.queue_name)
    assert err_code(ei.value) == 11009
    for bad in ("Bad_Name", "-leading-dash", "trailing-dash-", "x" * 64):
        with pytest.raises(cloudflare.BadRequestError) as ei:
            cf.queues.create(account_id=acct, queue_name=bad)
        assert err_code(ei.value) == 11003, bad


def test_queue_delete(cf, acct, queues):
    q = queues()
    res = cf.queues.delete(q.queue_id, account_id=acct)
    assert res.success is True
    assert res.errors == []
    with pytest.raises(cloudflare.NotFoundError) as ei:
        cf.queues.get(q.queue_id, account_id=acct)
    assert err_code(ei.value) == 11000
    assert q.queue_id not in {x.queue_id for x in cf.queues.list(account_id=acct)}
    with pytest.raises(cloudflare.NotFoundError):
        cf.queues.delete(q.queue_id, account_id=acct)
    # the name is free again
    again = cf.queues.create(account_id=acct, queue_name=q.queue_name)
    queues.track(acct, again.queue_id)
    assert again.queue_id != q.queue_id


def test_queue_metrics(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    m = cf.queues.get_metrics(q.queue_id, account_id=acct)
    assert m is not None
    assert m.backlog_count == 0
    assert m.backlog_bytes == 0
    assert m.oldest_message_timestamp_ms in (0, None)

    cf.queues.messages.push(q.queue_id, account_id=acct, body="abcd", content_type="text")
    cf.queues.messages.push(q.queue_id, account_id=acct, body={"k": "v"}, content_type="json")
    m = cf.queues.get_metrics(q.queue_id, account_id=acct)
    assert m.backlog_count == 2
    assert m.backlog_bytes >= 4 + len('{"k":"v"}')
    peeked = cf.queues.messages.peek(q.queue_id, account_id=acct, batch_size=10).messages
    assert len(peeked) == 2
    assert m.oldest_message_timestamp_ms == min(p.timestamp_ms for p in peeked)

    # in-flight messages still count as backlog until acked
    pulled = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10, visibility_timeout_ms=LEASE)
    assert len(pulled.messages) == 2
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 2
    cf.queues.messages.ack(q.queue_id, account_id=acct, acks=[{"lease_id": pulled.messages[0].lease_id}])
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 1


# --------------------------------------------------------------------------- consumers


def test_http_pull_consumer_crud(cf, acct, queues):
    q = queues()
    c = cf.queues.consumers.create(
        q.queue_id,
        account_id=acct,
        type="http_pull",
        settings={"batch_size": 7, "max_retries": 2, "retry_delay": 1, "visibility_timeout_ms": 45000},
    )
    assert c is not None
    assert c.type == "http_pull"
    assert c.consumer_id
    assert c.queue_name == q.queue_name
    assert c.dead_letter_queue == ""
    assert isinstance(c.created_on, dt.datetime), c.created_on
    assert c.settings.batch_size == 7
    assert c.settings.max_retries == 2
    assert c.settings.retry_delay == 1
    assert c.settings.visibility_timeout_ms == 45000
    env = cf.queues.consumers.with_raw_response.get(c.consumer_id, account_id=acct, queue_id=q.queue_id).json()
    assert env["result"]["queue_id"] == q.queue_id
    assert "service" not in env["result"]

    listed = list(cf.queues.consumers.list(q.queue_id, account_id=acct))
    assert [x.consumer_id for x in listed] == [c.consumer_id]
    assert listed[0].type == "http_pull"

    got = cf.queues.consumers.get(c.consumer_id, account_id=acct, queue_id=q.queue_id)
    assert got.consumer_id == c.consumer_id
    assert got.settings.batch_size == 7

    qq = cf.queues.get(q.queue_id, account_id=acct)
    assert qq.consumers_total_count == 1
    assert [x.consumer_id for x in qq.consumers] == [c.consumer_id]
    assert qq.consumers[0].type == "http_pull"

    with pytest.raises(cloudflare.ConflictError) as ei:
        cf.queues.consumers.create(q.queue_id, account_id=acct, type="http_pull")
    assert err_code(ei.value) == 11004

    upd = cf.queues.consumers.update(
        c.consumer_id,
        account_id=acct,
        queue_id=q.queue_id,
        type="http_pull",
        settings={"batch_size": 20, "max_retries": 4, "retry_delay": 0, "visibility_timeout_ms": 60000},
    )
    assert upd.consumer_id == c.consumer_id
    assert upd.settings.batch_size == 20
    assert upd.settings.max_retries == 4
    got = cf.queues.consumers.get(c.consumer_id, account_id=acct, queue_id=q.queue_id)
    assert got.settings.batch_size == 20
    assert got.settings.visibility_timeout_ms == 60000

    # pull without batch_size uses the consumer's batch_size
    cf.queues.messages.bulk_push(
        q.queue_id, account_id=acct, messages=[{"body": f"m{i}", "content_type": "text"} for i in range(25)]
    )
    pulled = cf.queues.messages.pull(q.queue_id, account_id=acct)
    assert len(pulled.messages) == 20

    res = cf.queues.consumers.delete(c.consumer_id, account_id=acct, queue_id=q.queue_id)
    assert res.success is True
    assert list(cf.queues.consumers.list(q.queue_id, account_id=acct)) == []
    with pytest.raises(cloudflare.NotFoundError) as ei:
        cf.queues.consumers.get(c.consumer_id, account_id=acct, queue_id=q.queue_id)
    assert err_code(ei.value) == 11002
    assert cf.queues.get(q.queue_id, account_id=acct).consumers_total_count == 0


def test_http_pull_consumer_defaults_and_dead_letter_queue(cf, acct, queues):
    q = queues()
    dlq = unique("sdkq-dlq")
    queues.also_delete_by_name(dlq)
    c = cf.queues.consumers.create(q.queue_id, account_id=acct, type="http_pull", dead_letter_queue=dlq)
    assert c.settings.batch_size == 5
    assert c.settings.max_retries == 3
    assert c.settings.retry_delay == 0
    assert c.settings.visibility_timeout_ms == 30000
    assert c.dead_letter_queue == dlq
    # a missing dead-letter queue is created with the consumer
    found = list(cf.queues.list(account_id=acct, extra_query={"name": dlq}))
    assert [x.queue_name for x in found] == [dlq]

    # pull without batch_size uses the default of 5
    cf.queues.messages.bulk_push(
        q.queue_id, account_id=acct, messages=[{"body": f"m{i}", "content_type": "text"} for i in range(8)]
    )
    assert len(cf.queues.messages.pull(q.queue_id, account_id=acct).messages) == 5


def test_consumer_invalid_settings(cf, acct, queues):
    q = queues()
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.consumers.create(q.queue_id, account_id=acct, type="http_pull", settings={"batch_size": 101})
    assert err_code(ei.value) == 100127
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.consumers.create(
            q.queue_id, account_id=acct, type="http_pull", dead_letter_queue=q.queue_name
        )
    assert err_code(ei.value) == 100127
    assert list(cf.queues.consumers.list(q.queue_id, account_id=acct)) == []
    with pytest.raises(cloudflare.NotFoundError) as ei:
        cf.queues.consumers.get(uuid.uuid4().hex, account_id=acct, queue_id=q.queue_id)
    assert err_code(ei.value) == 11002


def test_worker_consumer_crud(cf, acct, queues, function):
    q = queues()
    c = cf.queues.consumers.create(
        q.queue_id,
        account_id=acct,
        type="worker",
        script_name=function,
        settings={"batch_size": 4, "max_retries": 1, "max_wait_time_ms": 1000, "max_concurrency": 2, "retry_delay": 3},
    )
    assert c is not None
    assert c.type == "worker"
    assert c.consumer_id
    assert c.script_name == function
    assert c.queue_name == q.queue_name
    assert c.dead_letter_queue == ""
    assert isinstance(c.created_on, dt.datetime), c.created_on
    assert c.settings.batch_size == 4
    assert c.settings.max_retries == 1
    assert c.settings.max_wait_time_ms == 1000
    assert c.settings.max_concurrency == 2
    assert c.settings.retry_delay == 3

    env = cf.queues.consumers.with_raw_response.get(c.consumer_id, account_id=acct, queue_id=q.queue_id).json()
    assert env["result"]["script_name"] == function
    assert env["result"]["script"] == function  # wrangler looks consumers up by `script`
    assert "service" not in env["result"]

    listed = list(cf.queues.consumers.list(q.queue_id, account_id=acct))
    assert [(x.consumer_id, x.type) for x in listed] == [(c.consumer_id, "worker")]
    qq = cf.queues.get(q.queue_id, account_id=acct)
    assert qq.consumers_total_count == 1
    assert qq.consumers[0].script_name == function

    upd = cf.queues.consumers.update(
        c.consumer_id,
        account_id=acct,
        queue_id=q.queue_id,
        type="worker",
        script_name=function,
        settings={"batch_size": 8, "max_retries": 2, "max_wait_time_ms": 2000, "retry_delay": 0},
    )
    assert upd.consumer_id == c.consumer_id
    assert upd.settings.batch_size == 8
    assert upd.settings.max_wait_time_ms == 2000
    got = cf.queues.consumers.get(c.consumer_id, account_id=acct, queue_id=q.queue_id)
    assert got.type == "worker"
    assert got.settings.batch_size == 8
    assert got.settings.max_retries == 2

    assert cf.queues.consumers.delete(c.consumer_id, account_id=acct, queue_id=q.queue_id).success is True
    assert list(cf.queues.consumers.list(q.queue_id, account_id=acct)) == []

    # defaults
    d = cf.queues.consumers.create(q.queue_id, account_id=acct, type="worker", script_name=function)
    assert d.settings.batch_size == 10
    assert d.settings.max_retries == 3
    assert d.settings.max_wait_time_ms == 5000
    assert d.settings.max_concurrency is None
    assert d.settings.retry_delay == 0
    assert cf.queues.consumers.delete(d.consumer_id, account_id=acct, queue_id=q.queue_id).success is True


def test_worker_consumer_requires_function(cf, acct, queues):
    q = queues()
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.consumers.create(q.queue_id, account_id=acct, type="worker", script_name=unique("no-such-fn"))
    assert err_code(ei.value) == 11001
    assert list(cf.queues.consumers.list(q.queue_id, account_id=acct)) == []


# --------------------------------------------------------------------------- messages


def test_push_and_pull_content_types(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    t0 = now_ms()
    obj = {"a": 1, "b": [True, None, "x"], "c": {"d": 2.5}}
    text = "héllo wörld ✓"
    raw_bytes = bytes([0, 1, 2, 255, 254]) + b"binary"

    r = cf.queues.messages.push(q.queue_id, account_id=acct, body=obj, content_type="json")
    assert r is not None and r.metadata is not None and r.metadata.metrics is not None
    assert r.metadata.metrics.backlog_count >= 1
    cf.queues.messages.push(q.queue_id, account_id=acct, body=text, content_type="text")
    cf.queues.messages.push(q.queue_id, account_id=acct, body=b64e(raw_bytes), content_type="bytes")
    cf.queues.messages.push(q.queue_id, account_id=acct, body="a json string", content_type="json")
    cf.queues.messages.push(q.queue_id, account_id=acct, body={"default": "json"})  # no content_type
    cf.queues.messages.push(q.queue_id, account_id=acct, body="later", content_type="text", delay_seconds=FAR)
    t1 = now_ms()

    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 6

    pulled = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10, visibility_timeout_ms=LEASE)
    assert pulled is not None
    assert isinstance(pulled.message_backlog_count, (int, float))
    msgs = pulled.messages
    assert len(msgs) == 5, [m.body for m in msgs]  # the delayed one is not ready

    ids = set()
    for m in msgs:
        assert HEX32.match(m.id), m.id
        ids.add(m.id)
        assert m.attempts == 1
        assert isinstance(m.lease_id, str) and m.lease_id
        assert t0 - 2000 <= m.timestamp_ms <= t1 + 2000
        assert m.metadata["CF-sourceMessageSource"] == "api"
    assert len(ids) == 5
    assert len({m.lease_id for m in msgs}) == 5

    by_type: dict[str, list] = {}
    for m in msgs:
        by_type.setdefault(ctype(m), []).append(m)
    assert sorted(by_type) == ["bytes", "json", "text"]
    assert len(by_type["json"]) == 3 and len(by_type["text"]) == 1 and len(by_type["bytes"]) == 1

    assert by_type["text"][0].body == text  # text comes back plain
    assert b64d(by_type["bytes"][0].body) == raw_bytes  # bytes come back base64
    json_bodies = [json.loads(b64d(m.body)) for m in by_type["json"]]  # json comes back base64
    assert obj in json_bodies
    assert "a json string" in json_bodies
    assert {"default": "json"} in json_bodies

    # order: best effort by arrival
    assert [ctype(m) for m in msgs][:3] == ["json", "text", "bytes"]

    # leased messages are not handed out again
    again = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10)
    assert again.messages == []


def test_ack_and_retry(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    for i in range(3):
        cf.queues.messages.push(q.queue_id, account_id=acct, body=f"m{i}", content_type="text")
    msgs = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10, visibility_timeout_ms=LEASE).messages
    by_body = {m.body: m for m in msgs}
    assert sorted(by_body) == ["m0", "m1", "m2"]

    res = cf.queues.messages.ack(
        q.queue_id,
        account_id=acct,
        acks=[{"lease_id": by_body["m0"].lease_id}],
        retries=[{"lease_id": by_body["m1"].lease_id, "delay_seconds": 0}],
    )
    assert res is not None
    assert res.ack_count == 1
    assert res.retry_count == 1
    assert not res.warnings

    # m1 is visible again at once (delay 0), m2 is still leased, m0 is gone
    again = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10, visibility_timeout_ms=LEASE).messages
    assert [(m.body, m.id, m.attempts) for m in again] == [("m1", by_body["m1"].id, 2)]
    assert again[0].lease_id != by_body["m1"].lease_id

    bogus = "not-a-real-lease"
    res = cf.queues.messages.ack(
        q.queue_id,
        account_id=acct,
        acks=[{"lease_id": again[0].lease_id}, {"lease_id": by_body["m2"].lease_id}, {"lease_id": bogus}],
    )
    assert res.ack_count == 2
    assert res.retry_count == 0
    assert bogus in res.warnings and res.warnings[bogus]

    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 0
    assert cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10).messages == []


def test_retry_with_delay(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    cf.queues.messages.push(q.queue_id, account_id=acct, body="later", content_type="text")
    (m,) = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=1, visibility_timeout_ms=LEASE).messages
    res = cf.queues.messages.ack(q.queue_id, account_id=acct, retries=[{"lease_id": m.lease_id, "delay_seconds": 2}])
    assert res.retry_count == 1
    assert cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=1).messages == []
    time.sleep(3)
    (m2,) = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=1, visibility_timeout_ms=LEASE).messages
    assert m2.id == m.id and m2.attempts == 2


def test_lease_expiry_redelivers_and_late_ack(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    cf.queues.messages.push(q.queue_id, account_id=acct, body={"n": 1}, content_type="json")
    (first,) = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=5, visibility_timeout_ms=1000).messages
    assert first.attempts == 1
    time.sleep(1.6)
    (second,) = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=5, visibility_timeout_ms=LEASE).messages
    assert second.id == first.id
    assert second.attempts == 2
    assert second.lease_id != first.lease_id
    assert json.loads(b64d(second.body)) == {"n": 1}

    # a retry with a superseded lease is only a warning
    res = cf.queues.messages.ack(q.queue_id, account_id=acct, retries=[{"lease_id": first.lease_id}])
    assert res.retry_count == 0
    assert first.lease_id in res.warnings
    assert cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=5).messages == []

    # a late ack is honoured
    res = cf.queues.messages.ack(q.queue_id, account_id=acct, acks=[{"lease_id": first.lease_id}])
    assert res.ack_count == 1
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 0


def test_bulk_push_and_delay_precedence(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    raw_bytes = b"\x10\x20bulk"
    r = cf.queues.messages.bulk_push(
        q.queue_id,
        account_id=acct,
        messages=[
            {"body": "t1", "content_type": "text"},
            {"body": {"n": 2}, "content_type": "json"},
            {"body": b64e(raw_bytes), "content_type": "bytes"},
            {"body": "per-message-delay", "content_type": "text", "delay_seconds": FAR},
        ],
    )
    assert r is not None and r.metadata is not None and r.metadata.metrics is not None
    assert r.metadata.metrics.backlog_count >= 4

    # batch-level delay applies to messages without their own; delay_seconds 0 overrides it
    cf.queues.messages.bulk_push(
        q.queue_id,
        account_id=acct,
        delay_seconds=FAR,
        messages=[
            {"body": "batch-delayed", "content_type": "text"},
            {"body": "now", "content_type": "text", "delay_seconds": 0},
        ],
    )
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 6

    msgs = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=100, visibility_timeout_ms=LEASE).messages
    assert len(msgs) == 4
    decoded = []
    for m in msgs:
        assert m.attempts == 1
        t = ctype(m)
        decoded.append(m.body if t == "text" else json.loads(b64d(m.body)) if t == "json" else b64d(m.body))
    assert decoded == ["t1", {"n": 2}, raw_bytes, "now"]


def test_queue_delivery_delay_default_and_override(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    cf.queues.edit(q.queue_id, account_id=acct, settings={"delivery_delay": FAR})
    cf.queues.messages.push(q.queue_id, account_id=acct, body="queue-delayed", content_type="text")
    cf.queues.messages.bulk_push(q.queue_id, account_id=acct, messages=[{"body": "bulk-queue-delayed", "content_type": "text"}])
    cf.queues.messages.push(q.queue_id, account_id=acct, body="zero", content_type="text", delay_seconds=0)
    msgs = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10).messages
    assert [m.body for m in msgs] == ["zero"]
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 3


def test_peek_and_purge_by_ref(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    raw_bytes = b"\xffpeek"
    cf.queues.messages.bulk_push(
        q.queue_id,
        account_id=acct,
        messages=[
            {"body": "a", "content_type": "text"},
            {"body": {"b": True}, "content_type": "json"},
            {"body": b64e(raw_bytes), "content_type": "bytes"},
            {"body": "delayed", "content_type": "text", "delay_seconds": FAR},
        ],
    )
    peek = cf.queues.messages.peek(q.queue_id, account_id=acct, batch_size=10)
    assert peek is not None
    msgs = peek.messages
    assert [ctype(m) for m in msgs] == ["text", "json", "bytes"]  # ready only, delivery order
    assert msgs[0].body == "a"
    assert json.loads(b64d(msgs[1].body)) == {"b": True}
    assert b64d(msgs[2].body) == raw_bytes
    for m in msgs:
        assert HEX32.match(m.id)
        assert isinstance(m.ref, str) and m.ref
        assert m.attempts == 0
        assert m.timestamp_ms > 0
        assert m.metadata["CF-sourceMessageSource"] == "api"

    # peek does not lease
    assert [m.id for m in cf.queues.messages.peek(q.queue_id, account_id=acct, batch_size=10).messages] == [
        m.id for m in msgs
    ]
    assert len(cf.queues.messages.peek(q.queue_id, account_id=acct, batch_size=2).messages) == 2

    res = cf.queues.messages.purge(q.queue_id, account_id=acct, refs=[{"ref": msgs[1].ref}])
    assert res is not None
    assert not res.errors
    assert not res.warnings
    left = cf.queues.messages.peek(q.queue_id, account_id=acct, batch_size=10).messages
    assert [m.id for m in left] == [msgs[0].id, msgs[2].id]
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 3

    pulled = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10, visibility_timeout_ms=LEASE).messages
    assert sorted(m.id for m in pulled) == sorted([msgs[0].id, msgs[2].id])
    assert all(m.attempts == 1 for m in pulled)  # peeking is not a delivery
    assert cf.queues.messages.peek(q.queue_id, account_id=acct, batch_size=10).messages == []  # leased now


def test_purge_start_and_status(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    cf.queues.messages.bulk_push(
        q.queue_id,
        account_id=acct,
        messages=[
            {"body": "r1", "content_type": "text"},
            {"body": "r2", "content_type": "text"},
            {"body": "d", "content_type": "text", "delay_seconds": FAR},
        ],
    )
    inflight = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=1, visibility_timeout_ms=LEASE).messages
    assert len(inflight) == 1
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 3

    # the confirmation flag is required
    with pytest.raises(cloudflare.BadRequestError):
        cf.queues.purge.start(q.queue_id, account_id=acct)
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 3

    started = cf.queues.purge.start(q.queue_id, account_id=acct, delete_messages_permanently=True)
    assert started is not None
    assert started.queue_id == q.queue_id
    assert started.queue_name == q.queue_name

    deadline = time.time() + 10
    while True:
        st = cf.queues.purge.status(q.queue_id, account_id=acct)
        assert st is not None
        assert st.completed in ("true", "false")
        if st.completed == "true" or time.time() > deadline:
            break
        time.sleep(0.2)
    assert st.completed == "true"
    assert st.started_at is not None
    dt.datetime.fromisoformat(st.started_at.replace("Z", "+00:00"))
    env = cf.queues.purge.with_raw_response.status(q.queue_id, account_id=acct).json()
    assert env["result"]["complete"] is True

    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 0
    assert cf.queues.messages.peek(q.queue_id, account_id=acct, batch_size=10).messages == []
    assert cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10).messages == []
    # the queue itself survives and keeps working
    cf.queues.messages.push(q.queue_id, account_id=acct, body="after", content_type="text")
    (m,) = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10).messages
    assert m.body == "after"


def test_paused_delivery(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    cf.queues.edit(q.queue_id, account_id=acct, settings={"delivery_paused": True})
    cf.queues.messages.push(q.queue_id, account_id=acct, body="held", content_type="text")  # sends still accepted
    with pytest.raises(cloudflare.ConflictError) as ei:
        cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10)
    assert err_code(ei.value) == 11005
    assert err_message(ei.value).startswith("queue_delivery_paused")
    cf.queues.edit(q.queue_id, account_id=acct, settings={"delivery_paused": False})
    (m,) = cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=10).messages
    assert m.body == "held"


# --------------------------------------------------------------------------- errors


def test_error_unknown_queue(cf, acct):
    missing = uuid.uuid4().hex
    with pytest.raises(cloudflare.NotFoundError) as ei:
        cf.queues.get(missing, account_id=acct)
    assert ei.value.status_code == 404
    assert err_code(ei.value) == 11000
    with pytest.raises(cloudflare.NotFoundError) as ei:
        cf.queues.messages.push(missing, account_id=acct, body="x", content_type="text")
    assert err_code(ei.value) == 11000
    with pytest.raises(cloudflare.NotFoundError):
        cf.queues.get_metrics(missing, account_id=acct)


def test_error_malformed_queue_id(cf, acct):
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.get("not-a-queue-id", account_id=acct)
    assert err_code(ei.value) == 10107


def test_error_pull_without_http_pull_consumer(cf, acct, queues):
    q = queues()
    cf.queues.messages.push(q.queue_id, account_id=acct, body="x", content_type="text")
    with pytest.raises(cloudflare.APIStatusError) as ei:
        cf.queues.messages.pull(q.queue_id, account_id=acct)
    assert ei.value.status_code == 405
    assert err_code(ei.value) == 11006


def test_error_message_too_large(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    cf.queues.messages.push(q.queue_id, account_id=acct, body="x" * 128000, content_type="text")  # at the limit
    with pytest.raises(cloudflare.APIStatusError) as ei:
        cf.queues.messages.push(q.queue_id, account_id=acct, body="x" * 128001, content_type="text")
    assert ei.value.status_code == 413
    assert err_code(ei.value) == 10204
    with pytest.raises(cloudflare.APIStatusError) as ei:
        cf.queues.messages.push(q.queue_id, account_id=acct, body=b64e(b"\0" * 128001), content_type="bytes")
    assert ei.value.status_code == 413
    assert err_code(ei.value) == 10204
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 1


def test_error_batch_limits(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    with pytest.raises(cloudflare.APIStatusError) as ei:
        cf.queues.messages.bulk_push(
            q.queue_id, account_id=acct, messages=[{"body": "x", "content_type": "text"}] * 101
        )
    assert ei.value.status_code == 413
    assert err_code(ei.value) == 10206
    with pytest.raises(cloudflare.APIStatusError) as ei:
        cf.queues.messages.bulk_push(
            q.queue_id, account_id=acct, messages=[{"body": "y" * 100000, "content_type": "text"}] * 3
        )
    assert ei.value.status_code == 413
    assert err_code(ei.value) == 10205
    # a rejected batch stores nothing
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 0
    cf.queues.messages.bulk_push(q.queue_id, account_id=acct, messages=[{"body": "x", "content_type": "text"}] * 100)
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 100


def test_error_invalid_delay_and_content_type(cf, acct, queues):
    q = pull_queue(cf, acct, queues)
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.messages.push(q.queue_id, account_id=acct, body="x", content_type="text", delay_seconds=86401)
    assert err_code(ei.value) == 10202
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.messages.push(q.queue_id, account_id=acct, body="x", content_type="v8")
    assert err_code(ei.value) == 10203
    with pytest.raises(cloudflare.BadRequestError) as ei:
        cf.queues.messages.pull(q.queue_id, account_id=acct, batch_size=101)
    assert err_code(ei.value) == 10207
    assert cf.queues.get_metrics(q.queue_id, account_id=acct).backlog_count == 0


def test_error_bad_token(cf, acct):
    bad = make_client("definitely-not-a-valid-token")
    try:
        with pytest.raises(cloudflare.AuthenticationError) as ei:
            bad.queues.list(account_id=acct)
        assert ei.value.status_code == 401
        assert err_code(ei.value) == 10106
    finally:
        bad.close()
