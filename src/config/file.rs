//! The configuration file (`--config hopper.toml`): tokens, functions,
//! queues and their consumers, with wrangler.toml's field names.
//!
//! Values are checked while the file is parsed, so an error names the line,
//! the column and the field. Secrets never live in the file: tokens and
//! function secrets name environment variables.

use std::marker::PhantomData;
use std::path::Path;

use serde::de::{Deserializer, Error as _};
use serde::Deserialize;

use crate::broker::model::{valid_account_id, valid_queue_name};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Invalid { path: String, message: String },
    #[error("config file {path}: environment variables not set: {}", .missing.join(", "))]
    MissingEnv { path: String, missing: Vec<String> },
}

/// A whole number within MIN..=MAX, refused at parse time otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranged<const MIN: u64, const MAX: u64>(pub u64);

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for Ranged<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u64::deserialize(d)?;
        if !(MIN..=MAX).contains(&v) {
            return Err(D::Error::custom(format!(
                "{v} is out of range: expected {MIN} to {MAX}"
            )));
        }
        Ok(Ranged(v))
    }
}

/// A string checked by a rule at parse time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked<R>(pub String, PhantomData<R>);

pub trait Rule {
    const WHAT: &'static str;
    fn ok(s: &str) -> bool;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueNameRule;
impl Rule for QueueNameRule {
    const WHAT: &'static str = "a queue name (lowercase letters, digits and dashes, 1-63)";
    fn ok(s: &str) -> bool {
        valid_queue_name(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRule;
impl Rule for AccountRule {
    const WHAT: &'static str = "an account id (1-64 letters, digits, '_' or '-')";
    fn ok(s: &str) -> bool {
        valid_account_id(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionNameRule;
impl Rule for FunctionNameRule {
    const WHAT: &'static str = "a function name (1-63 letters, digits, '-' or '_')";
    fn ok(s: &str) -> bool {
        (1..=63).contains(&s.len())
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlRule;
impl Rule for UrlRule {
    const WHAT: &'static str = "an http:// or https:// URL";
    fn ok(s: &str) -> bool {
        s.starts_with("http://") || s.starts_with("https://")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRule;
impl Rule for ScopeRule {
    const WHAT: &'static str = "a scope: queues_read or queues_write";
    fn ok(s: &str) -> bool {
        s == "queues_read" || s == "queues_write"
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerTypeRule;
impl Rule for ConsumerTypeRule {
    const WHAT: &'static str = "a consumer type: worker or http_pull";
    fn ok(s: &str) -> bool {
        s == "worker" || s == "http_pull"
    }
}

impl<'de, R: Rule> Deserialize<'de> for Checked<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if !R::ok(&s) {
            return Err(D::Error::custom(format!("{s:?} is not {}", R::WHAT)));
        }
        Ok(Checked(s, PhantomData))
    }
}

impl<R> Checked<R> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub tokens: Vec<TokenDecl>,
    #[serde(default)]
    pub functions: Vec<FunctionDecl>,
    #[serde(default)]
    pub queues: Vec<toml::Spanned<QueueDecl>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenDecl {
    pub name: String,
    pub token_env: String,
    pub scopes: Vec<Checked<ScopeRule>>,
    pub accounts: Option<Vec<Checked<AccountRule>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionDecl {
    pub account: Checked<AccountRule>,
    pub name: Checked<FunctionNameRule>,
    pub url: Checked<UrlRule>,
    pub timeout_ms: Option<Ranged<1, 900_000>>,
    pub secret_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueDecl {
    pub account: Checked<AccountRule>,
    pub name: Checked<QueueNameRule>,
    pub delivery_delay: Option<Ranged<0, 86_400>>,
    pub message_retention_period: Option<Ranged<60, 1_209_600>>,
    pub delivery_paused: Option<bool>,
    #[serde(default)]
    pub consumers: Vec<toml::Spanned<ConsumerDecl>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerDecl {
    #[serde(rename = "type")]
    pub kind: Checked<ConsumerTypeRule>,
    pub script_name: Option<Checked<FunctionNameRule>>,
    pub max_batch_size: Option<Ranged<1, 100>>,
    /// Seconds, as in wrangler.toml.
    pub max_batch_timeout: Option<Ranged<0, 60>>,
    pub max_retries: Option<Ranged<0, 100>>,
    pub dead_letter_queue: Option<Checked<QueueNameRule>>,
    /// Seconds.
    pub retry_delay: Option<Ranged<0, 86_400>>,
    pub max_concurrency: Option<Ranged<1, 250>>,
    pub visibility_timeout_ms: Option<Ranged<1, 43_200_000>>,
}

/// A parsed file whose secrets have been read from the environment.
#[derive(Debug)]
pub struct LoadedConfig {
    /// The file as given (to name lines in later errors).
    pub text: String,
    pub path: String,
    pub file: FileConfig,
    /// Token values, in the order of `file.tokens`.
    pub token_values: Vec<String>,
    /// Function secrets, in the order of `file.functions`.
    pub function_secrets: Vec<Option<String>>,
}

/// The 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

pub fn parse(text: &str, path: &str) -> Result<FileConfig, ConfigError> {
    let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Invalid {
        path: path.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_owned(),
        message,
    };
    for q in &file.queues {
        let line = line_of(text, q.span().start);
        let q = q.get_ref();
        if q.consumers.len() > 1 {
            return Err(invalid(format!(
                "line {line}: queue {:?} declares {} consumers; a queue has at most one",
                q.name.as_str(),
                q.consumers.len()
            )));
        }
        for c in &q.consumers {
            let line = line_of(text, c.span().start);
            let c = c.get_ref();
            let at = format!("line {line}: queue {:?}'s consumer", q.name.as_str());
            if c.kind.as_str() == "worker" {
                if c.script_name.is_none() {
                    return Err(invalid(format!("{at}: a worker consumer needs script_name")));
                }
                if c.visibility_timeout_ms.is_some() {
                    return Err(invalid(format!(
                        "{at}: visibility_timeout_ms applies to http_pull consumers, not worker"
                    )));
                }
            } else {
                for (field, set) in [
                    ("script_name", c.script_name.is_some()),
                    ("max_batch_timeout", c.max_batch_timeout.is_some()),
                    ("max_concurrency", c.max_concurrency.is_some()),
                ] {
                    if set {
                        return Err(invalid(format!(
                            "{at}: {field} applies to worker consumers, not http_pull"
                        )));
                    }
                }
            }
            if c.dead_letter_queue.as_ref().map(Checked::as_str) == Some(q.name.as_str()) {
                return Err(invalid(format!(
                    "{at}: a queue cannot be its own dead_letter_queue"
                )));
            }
        }
    }
    for t in &file.tokens {
        if t.scopes.is_empty() {
            return Err(invalid(format!(
                "token {:?}: scopes must name at least one scope",
                t.name
            )));
        }
    }
    Ok(file)
}

/// Reads, parses and resolves a config file against `env`.
pub fn load(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<LoadedConfig, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    let file = parse(&text, &shown)?;
    let mut missing = Vec::new();
    let mut lookup = |var: &str| {
        let value = env(var).filter(|v| !v.is_empty());
        if value.is_none() && !missing.iter().any(|m| m == var) {
            missing.push(var.to_owned());
        }
        value
    };
    let token_values: Vec<Option<String>> = file.tokens.iter().map(|t| lookup(&t.token_env)).collect();
    let function_secrets: Vec<Option<String>> = file
        .functions
        .iter()
        .map(|f| f.secret_env.as_deref().and_then(&mut lookup))
        .collect();
    if !missing.is_empty() {
        return Err(ConfigError::MissingEnv { path: shown, missing });
    }
    let token_values = token_values.into_iter().flatten().collect();
    Ok(LoadedConfig {
        text,
        path: shown,
        file,
        token_values,
        function_secrets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[[tokens]]
name = "worker-pool"
token_env = "HOPPER_POOL_TOKEN"
scopes = ["queues_read", "queues_write"]
accounts = ["acme"]

[[functions]]
account = "acme"
name = "thumbnailer"
url = "http://127.0.0.1:9000/queue"
secret_env = "THUMB_SECRET"

[[queues]]
account = "acme"
name = "images"
delivery_delay = 0

[[queues.consumers]]
type = "worker"
script_name = "thumbnailer"
max_batch_size = 20
max_batch_timeout = 2
max_retries = 5
dead_letter_queue = "images-dlq"
"#;

    proptest::proptest! {
        /// Arbitrary text: a config or an error, never a panic.
        #[test]
        fn parsing_arbitrary_text_never_panics(text in "[\\[\\]a-z_=\"0-9. \n#-]{0,300}") {
            let _ = parse(&text, "fuzz.toml");
        }
    }

    #[test]
    fn the_spec_example_parses() {
        let f = parse(EXAMPLE, "x.toml").unwrap();
        assert_eq!(
            f.queues[0].get_ref().consumers[0].get_ref().max_batch_size,
            Some(Ranged(20))
        );
        assert_eq!(f.tokens[0].accounts.as_ref().unwrap()[0].as_str(), "acme");
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let bad = EXAMPLE.replace("max_batch_size = 20", "max_batch_size = 500");
        let e = parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(e.contains("line 22"), "{e}");
        assert!(e.contains("max_batch_size") && e.contains("1 to 100"), "{e}");
        let bad = EXAMPLE.replace("name = \"images\"", "name = \"Images!\"");
        let e = parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(e.contains("line 16") && e.contains("queue name"), "{e}");
        let bad = EXAMPLE.replace("delivery_delay = 0", "delivery_dely = 0");
        let e = parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(e.contains("delivery_dely"), "{e}");
    }

    #[test]
    fn fields_of_the_other_consumer_type_are_refused() {
        let bad = EXAMPLE.replace("type = \"worker\"", "type = \"http_pull\"");
        let e = parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(
            e.contains("line 19") && e.contains("script_name applies to worker"),
            "{e}"
        );
        let bad = EXAMPLE.replace("max_retries = 5", "max_retries = 5\nvisibility_timeout_ms = 10");
        let e = parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(e.contains("visibility_timeout_ms applies to http_pull"), "{e}");
    }

    #[test]
    fn missing_environment_variables_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.toml");
        std::fs::write(&path, EXAMPLE).unwrap();
        let e = load(&path, |_| None).unwrap_err().to_string();
        assert!(e.contains("HOPPER_POOL_TOKEN"), "{e}");
        let e = load(&path, |k| (k == "HOPPER_POOL_TOKEN").then(|| "t".to_owned()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("THUMB_SECRET"), "{e}");
        let ok = load(&path, |_| Some("v".into())).unwrap();
        assert_eq!(ok.token_values, vec!["v"]);
    }
}
