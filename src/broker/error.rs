use crate::store::StoreError;

/// Errors of the broker layer: the domain's refusals plus storage failures.
/// `api::error` maps each to an HTTP status and a Cloudflare error code.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("queue {0} not found in this account")]
    QueueNotFound(String),
    #[error("queue name {0:?} is not valid: use 1-63 lowercase letters, digits and dashes, starting and ending with a letter or digit")]
    InvalidQueueName(String),
    #[error("a queue named {0:?} already exists in this account")]
    QueueNameTaken(String),
    #[error("invalid queue settings: {0}")]
    InvalidQueueSettings(String),
    #[error("invalid consumer settings: {0}")]
    InvalidConsumerSettings(String),
    #[error("queue {0:?} already has a consumer; remove it before adding another")]
    ConsumerExists(String),
    #[error("consumer {0} not found on this queue")]
    ConsumerNotFound(String),
    #[error("function {name:?} does not exist in account {account}; register it first with PUT /client/v4/accounts/{account}/functions/{name} {{\"url\": \"http://...\"}}")]
    FunctionMissing { account: String, name: String },
    #[error("function {0:?} not found")]
    FunctionNotFound(String),
    #[error("token {0} not found")]
    TokenNotFound(String),
    #[error("queue_delivery_paused: delivery is paused on queue {0:?}; resume it to pull messages")]
    DeliveryPaused(String),
    #[error("queue {0:?} has no http_pull consumer; add one with POST .../queues/{{queue_id}}/consumers {{\"type\": \"http_pull\"}} (wrangler: queues consumer http add)")]
    NoPullConsumer(String),
    #[error("invalid delay: {0}")]
    InvalidDelay(String),
    #[error("invalid message: {0}")]
    InvalidMessage(String),
    #[error("message body is {size} bytes; the limit is {limit} bytes")]
    MessageTooLarge { size: usize, limit: usize },
    #[error("batch is {size} bytes in total; the limit is {limit} bytes")]
    BatchTooLarge { size: usize, limit: usize },
    #[error("batch holds {count} messages; the limit is {limit}")]
    TooManyMessages { count: usize, limit: usize },
    #[error("{0}")]
    InvalidRequest(String),
    #[error("queue {0:?} is overloaded; retry shortly")]
    Overloaded(String),
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("queue actor for {0} is unavailable")]
    ActorUnavailable(String),
    #[error("storage failure: {0}")]
    Store(#[from] StoreError),
    /// A commit failed; every request in it gets this. Nothing it carried
    /// was confirmed, and the queue reloads its state from disk.
    #[error("storage failure on queue {queue}: {message}; nothing from this request was stored")]
    StorageFailure {
        queue: String,
        message: String,
        disk_full: bool,
    },
}
