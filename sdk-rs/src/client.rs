//! The client: configuration, and the transport every generated method goes through (retries,
//! idempotency keys, bearer tokens, problems).

use crate::auth::{ClientCredentials, StaticToken, TokenSource};
use crate::problem::{header, Error, Problem};
use crate::transport::{backoff, form_escape, hex, new_idempotency_key, repr_sha256, retry_after, sha256};
use crate::types::ProblemCode;
use serde::Serialize;
use std::fmt;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A client of one BAP server, blocking (over `ureq`). Cheap to clone; clones share the
/// connection pool and the token source. Build one with [`Client::new`] or [`Client::builder`].
#[derive(Clone)]
pub struct Client {
    pub(crate) base_url: String,
    pub(crate) agent: ureq::Agent,
    pub(crate) token: Option<Arc<dyn TokenSource>>,
    pub(crate) max_attempts: u32,
    pub(crate) timeout: Option<Duration>,
    /// The first wait between attempts without Retry-After (doubling, capped at 5 s).
    pub(crate) backoff_base: Duration,
    /// The longest wait between attempts; a longer Retry-After ends the retries.
    pub(crate) max_wait: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

/// Configures a [`Client`]: bearer token, timeouts, retries.
pub struct ClientBuilder {
    base_url: String,
    token: Option<Arc<dyn TokenSource>>,
    credentials: Option<ClientCredentials>,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    stream_read_timeout: Duration,
    max_attempts: u32,
    user_agent: String,
}

impl Client {
    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:7777`; a path prefix is
    /// kept) with the defaults of [`Client::builder`].
    pub fn new(base_url: impl Into<String>) -> Client {
        Client::builder(base_url).build()
    }

    /// A builder for a client of the server at `base_url`.
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.into(),
            token: None,
            credentials: None,
            timeout: Some(Duration::from_secs(60)),
            connect_timeout: Duration::from_secs(10),
            stream_read_timeout: Duration::from_secs(60),
            max_attempts: 3,
            user_agent: "bap-sdk-rs".into(),
        }
    }

    /// The base URL (without a trailing slash).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl ClientBuilder {
    /// Sends `Authorization: Bearer <token>` on every request (remote profile).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Arc::new(StaticToken(token.into())));
        self.credentials = None;
        self
    }

    /// Asks `source` for the bearer token before every attempt.
    pub fn token_source(mut self, source: Arc<dyn TokenSource>) -> Self {
        self.token = Some(source);
        self.credentials = None;
        self
    }

    /// Obtains bearer tokens with the OAuth client-credentials grant, by default from
    /// `<base URL>/oauth2/token` for the resource `<base URL>`, cached until shortly before
    /// they expire.
    pub fn client_credentials(mut self, credentials: ClientCredentials) -> Self {
        self.credentials = Some(credentials);
        self.token = None;
        self
    }

    /// The deadline of one attempt of a call: connecting, sending and reading the whole answer
    /// (default 60 s; `None`: no deadline). [`CallOptions::timeout`] overrides it per call, e.g.
    /// for a command with a long `timeout_ms`.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout of establishing a connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long an event stream may stay silent before the subscription reconnects (default
    /// 60 s; the server sends a keep-alive every 15 s).
    pub fn stream_read_timeout(mut self, timeout: Duration) -> Self {
        self.stream_read_timeout = timeout;
        self
    }

    /// How many times a call is attempted in all (default 3; 1 disables retries). Network
    /// errors and `409 idempotency_in_flight`, 429 and 503 answers are retried, honouring
    /// `Retry-After`; mutating calls reuse the same `Idempotency-Key` on every attempt.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The `User-Agent` header (default `bap-sdk-rs`).
    pub fn user_agent(mut self, ua: impl Into<String>) -> Self {
        self.user_agent = ua.into();
        self
    }

    /// The client.
    pub fn build(self) -> Client {
        let base_url = self.base_url.trim_end_matches('/').to_owned();
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(self.connect_timeout)
            .timeout_read(self.stream_read_timeout)
            .user_agent(&self.user_agent)
            .build();
        let token = match self.credentials {
            Some(c) => Some(Arc::new(c.bind(&base_url, &agent)) as Arc<dyn TokenSource>),
            None => self.token,
        };
        Client {
            base_url,
            agent,
            token,
            max_attempts: self.max_attempts,
            timeout: self.timeout,
            backoff_base: Duration::from_millis(250),
            max_wait: Duration::from_secs(30),
        }
    }
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// Options of one call: the `Idempotency-Key` of a mutating call, a timeout, extra headers.
///
/// ```
/// use std::time::Duration;
/// let opts = bap::CallOptions::new().idempotency_key("order-42").timeout(Duration::from_secs(90));
/// ```
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub(crate) idempotency_key: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) headers: Vec<(String, String)>,
}

impl CallOptions {
    /// No options: a generated idempotency key, the client's timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `Idempotency-Key` of a mutating call instead of a generated one; sending the same
    /// key again (after a crash, say) replays the first answer. Read-only calls ignore it.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The deadline of each attempt of this call (overrides [`ClientBuilder::timeout`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Adds a request header to this call.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// The answer of `get_artifact`: the bytes with their media type and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// The bytes.
    pub body: Vec<u8>,
    /// The `Content-Type` of the answer.
    pub media_type: String,
    /// The SHA-256 of `body` (64 lowercase hex characters), checked against `Repr-Digest`.
    pub sha256: String,
    /// The `Repr-Digest` header as sent (`sha-256=:<base64>:`), if any.
    pub repr_digest: Option<String>,
}

/// One operation call, filled in by the generated methods.
pub(crate) struct Call {
    pub op: &'static str,
    pub method: &'static str,
    pub path: String,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<Vec<u8>>,
    pub mutating: bool,
}

impl Call {
    pub(crate) fn new(op: &'static str, method: &'static str, path: String) -> Call {
        Call {
            op,
            method,
            path,
            query: Vec::new(),
            body: None,
            mutating: false,
        }
    }
}

pub(crate) struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Client {
    /// Encodes a request body (sent unchanged: the server validates it).
    pub(crate) fn encode<T: Serialize>(&self, op: &str, body: &T) -> Result<Vec<u8>, Error> {
        serde_json::to_vec(body).map_err(|e| Error::Encode {
            op: op.to_owned(),
            message: e.to_string(),
        })
    }

    /// Performs a call answering JSON; returns the 2xx status and body.
    pub(crate) fn call(&self, call: &Call, opts: &CallOptions) -> Result<(u16, Vec<u8>), Error> {
        let a = self.send(call, opts, "application/json")?;
        Ok((a.status, a.body))
    }

    /// Performs a call answering bytes.
    pub(crate) fn call_blob(&self, call: &Call, opts: &CallOptions) -> Result<Blob, Error> {
        let a = self.send(call, opts, "*/*")?;
        let sum = sha256(&a.body);
        let repr = header(&a.headers, "repr-digest").map(str::to_owned);
        if let Some(want) = repr.as_deref().and_then(repr_sha256) {
            if want != sum {
                return Err(Error::DigestMismatch { op: call.op.to_owned() });
            }
        }
        Ok(Blob {
            media_type: header(&a.headers, "content-type")
                .unwrap_or("application/octet-stream")
                .to_owned(),
            sha256: hex(&sum),
            repr_digest: repr,
            body: a.body,
        })
    }

    pub(crate) fn url(&self, path: &str, query: &[(&str, String)]) -> String {
        let mut u = format!("{}{}", self.base_url, path);
        for (i, (k, v)) in query.iter().enumerate() {
            u.push(if i == 0 { '?' } else { '&' });
            u.push_str(&form_escape(k));
            u.push('=');
            u.push_str(&form_escape(v));
        }
        u
    }

    pub(crate) fn bearer(&self, op: &str) -> Result<Option<String>, Error> {
        match &self.token {
            None => Ok(None),
            Some(t) => t.token().map_err(|e| match e {
                Error::Token(m) => Error::Token(format!("{}: {}", op, m)),
                other => other,
            }),
        }
    }

    /// Sends a call, retrying as configured, and returns its 2xx answer.
    fn send(&self, call: &Call, opts: &CallOptions, accept: &str) -> Result<Answer, Error> {
        let key = if call.mutating {
            Some(opts.idempotency_key.clone().unwrap_or_else(new_idempotency_key))
        } else {
            None
        };
        let url = self.url(&call.path, &call.query);
        let timeout = opts.timeout.or(self.timeout);
        let mut reauthorized = false;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut req = self.agent.request(call.method, &url).set("Accept", accept);
            for (k, v) in &opts.headers {
                req = req.set(k, v);
            }
            if call.body.is_some() {
                req = req.set("Content-Type", "application/json");
            }
            if let Some(k) = &key {
                req = req.set("Idempotency-Key", k);
            }
            if let Some(tok) = self.bearer(call.op)? {
                req = req.set("Authorization", &format!("Bearer {}", tok));
            }
            if let Some(t) = timeout {
                req = req.timeout(t);
            }
            let result = match &call.body {
                Some(b) => req.send_bytes(b),
                None => req.call(),
            };
            let failure = match result {
                Ok(resp) => match read_answer(resp) {
                    Ok(a) if (200..300).contains(&a.status) => return Ok(a),
                    Ok(a) => Err(Problem::from_answer(a.status, a.headers, a.body)),
                    Err(e) => Ok(e),
                },
                Err(ureq::Error::Status(_, resp)) => match read_answer(resp) {
                    Ok(a) => Err(Problem::from_answer(a.status, a.headers, a.body)),
                    Err(e) => Ok(e),
                },
                Err(ureq::Error::Transport(t)) => Ok(t.to_string()),
            };
            match failure {
                // A network failure: retry after a backoff.
                Ok(message) => {
                    if attempt >= self.max_attempts {
                        return Err(Error::Transport {
                            op: call.op.to_owned(),
                            message,
                        });
                    }
                    std::thread::sleep(backoff(self.backoff_base, attempt));
                }
                Err(p) => {
                    if p.status == 401 && !reauthorized {
                        if let Some(t) = &self.token {
                            if t.invalidate() {
                                // The token expired or was revoked early: fetch another, once.
                                reauthorized = true;
                                attempt -= 1;
                                continue;
                            }
                        }
                    }
                    if attempt >= self.max_attempts || !retryable(&p) {
                        return Err(p.into());
                    }
                    let wait = p
                        .header("retry-after")
                        .and_then(|h| retry_after(h, SystemTime::now()))
                        .unwrap_or_else(|| backoff(self.backoff_base, attempt));
                    if wait > self.max_wait {
                        return Err(p.into());
                    }
                    std::thread::sleep(wait);
                }
            }
        }
    }
}

/// Reads a whole answer; an error reading it is a network failure (its message).
pub(crate) fn read_answer(resp: ureq::Response) -> Result<Answer, String> {
    let status = resp.status();
    let headers = headers_of(&resp);
    let mut body = Vec::new();
    resp.into_reader()
        .read_to_end(&mut body)
        .map_err(|e| format!("reading the {} answer: {}", status, e))?;
    Ok(Answer { status, headers, body })
}

pub(crate) fn headers_of(resp: &ureq::Response) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut names = resp.headers_names();
    names.iter_mut().for_each(|n| n.make_ascii_lowercase());
    names.sort();
    names.dedup();
    for name in names {
        for v in resp.all(&name) {
            out.push((name.clone(), v.to_owned()));
        }
    }
    out
}

pub(crate) fn retryable(p: &Problem) -> bool {
    match p.status {
        429 | 503 => true,
        409 => p.code == Some(ProblemCode::IdempotencyInFlight),
        _ => false,
    }
}
