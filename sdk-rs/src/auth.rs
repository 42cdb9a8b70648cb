//! Bearer tokens for the remote profile: a fixed token, or the OAuth client-credentials grant.

use crate::problem::Error;
use crate::transport::{base64_encode, form_escape};
use serde::Deserialize;
use std::fmt;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Gives the bearer token of each request. The client asks before every attempt, so a source
/// may refresh expired tokens.
pub trait TokenSource: Send + Sync {
    /// The token to send; `None` sends no `Authorization` header. An error fails the call.
    fn token(&self) -> Result<Option<String>, Error>;

    /// Called when the server answered 401 to the token last given: drop it if cached. Returns
    /// whether the next [`TokenSource::token`] may give another one (the client then retries the
    /// call once).
    fn invalidate(&self) -> bool {
        false
    }
}

/// A fixed bearer token.
#[derive(Clone)]
pub struct StaticToken(pub String);

impl TokenSource for StaticToken {
    fn token(&self) -> Result<Option<String>, Error> {
        Ok(if self.0.is_empty() { None } else { Some(self.0.clone()) })
    }
}

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticToken(…)")
    }
}

/// The OAuth 2.0 client-credentials grant (RFC 6749 §4.4) for a client registered with
/// `bap client create`: it asks the token endpoint for an access token bound to the server's
/// resource URL (RFC 8707 `resource`) and caches it until shortly before it expires (a quarter of
/// its lifetime, at most 30 s, early; a token without `expires_in` counts as valid for 60 s), or
/// until the server refuses it.
///
/// ```no_run
/// use bap::{Client, ClientCredentials};
///
/// let client = Client::builder("http://127.0.0.1:7777")
///     .client_credentials(ClientCredentials::new("cli_…", "bap_cs_…").scope("bap:tasks.read bap:tasks.write"))
///     .build();
/// ```
pub struct ClientCredentials {
    client_id: String,
    client_secret: String,
    token_url: Option<String>,
    resource: Option<String>,
    scope: Option<String>,
    timeout: Duration,
    agent: Option<ureq::Agent>,
    cache: Mutex<Option<Cached>>,
}

struct Cached {
    token: String,
    refresh_at: Option<Instant>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    access_token: String,
    #[serde(default)]
    token_type: String,
    #[serde(default)]
    expires_in: Option<f64>,
}

#[derive(Deserialize)]
struct OAuthError {
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_description: String,
}

impl ClientCredentials {
    /// A client id and secret (from `bap client create`). The token endpoint defaults to
    /// `<base URL>/oauth2/token` and the resource to the base URL of the client it is given to.
    pub fn new(client_id: impl Into<String>, client_secret: impl Into<String>) -> Self {
        ClientCredentials {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            token_url: None,
            resource: None,
            scope: None,
            timeout: Duration::from_secs(30),
            agent: None,
            cache: Mutex::new(None),
        }
    }

    /// The token endpoint (default `<base URL>/oauth2/token`).
    pub fn token_url(mut self, url: impl Into<String>) -> Self {
        self.token_url = Some(url.into());
        self
    }

    /// The RFC 8707 resource the token is for: the server's URL (default: the client's base
    /// URL).
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Space-separated scopes to ask for (default: every scope the client was registered with).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The timeout of one token request (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Fills in the defaults that come from the client's base URL.
    pub(crate) fn bind(mut self, base_url: &str, agent: &ureq::Agent) -> Self {
        if self.token_url.is_none() {
            self.token_url = Some(format!("{}/oauth2/token", base_url));
        }
        if self.resource.is_none() {
            self.resource = Some(base_url.to_owned());
        }
        if self.agent.is_none() {
            self.agent = Some(agent.clone());
        }
        self
    }

    /// Asks the token endpoint for a new access token, bypassing the cache; returns it with its
    /// lifetime when the endpoint gives one.
    pub fn fetch(&self) -> Result<(String, Option<Duration>), Error> {
        let url = self.token_url.as_deref().ok_or_else(|| {
            Error::Token("no token endpoint (use ClientCredentials::token_url, or give it to a ClientBuilder)".into())
        })?;
        let mut form = String::from("grant_type=client_credentials");
        if let Some(r) = &self.resource {
            form.push_str("&resource=");
            form.push_str(&form_escape(r));
        }
        if let Some(s) = &self.scope {
            form.push_str("&scope=");
            form.push_str(&form_escape(s));
        }
        // RFC 6749 §2.3.1: id and secret are form-encoded before HTTP Basic.
        let basic =
            base64_encode(format!("{}:{}", form_escape(&self.client_id), form_escape(&self.client_secret)).as_bytes());
        let agent = self.agent.clone().unwrap_or_else(|| ureq::AgentBuilder::new().build());
        let answer = agent
            .post(url)
            .timeout(self.timeout)
            .set("Authorization", &format!("Basic {}", basic))
            .set("Content-Type", "application/x-www-form-urlencoded")
            .set("Accept", "application/json")
            .send_bytes(form.as_bytes());
        let resp = match answer {
            Ok(r) => r,
            Err(ureq::Error::Status(status, r)) => {
                let mut body = Vec::new();
                let _ = r.into_reader().take(64 << 10).read_to_end(&mut body);
                let msg = match serde_json::from_slice::<OAuthError>(&body) {
                    Ok(e) if !e.error.is_empty() => format!("{} {}: {}", status, e.error, e.error_description),
                    _ => format!("the token endpoint answered {}", status),
                };
                return Err(Error::Token(msg));
            }
            Err(e) => return Err(Error::Token(e.to_string())),
        };
        let mut body = Vec::new();
        resp.into_reader()
            .take(1 << 20)
            .read_to_end(&mut body)
            .map_err(|e| Error::Token(e.to_string()))?;
        let t: TokenAnswer =
            serde_json::from_slice(&body).map_err(|e| Error::Token(format!("decoding the token answer: {}", e)))?;
        if t.access_token.is_empty() || !(t.token_type.is_empty() || t.token_type.eq_ignore_ascii_case("bearer")) {
            return Err(Error::Token("the answer holds no bearer access_token".into()));
        }
        let lifetime = t
            .expires_in
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| Duration::from_secs_f64(s.min(31_536_000.0)));
        Ok((t.access_token, lifetime))
    }
}

impl TokenSource for ClientCredentials {
    fn token(&self) -> Result<Option<String>, Error> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.as_ref() {
            if c.refresh_at.map_or(true, |at| Instant::now() < at) {
                return Ok(Some(c.token.clone()));
            }
        }
        let (token, lifetime) = self.fetch()?;
        // RFC 6749 §5.1: expires_in is RECOMMENDED; without it, assume a short life.
        let l = lifetime.unwrap_or(Duration::from_secs(60));
        let early = (l / 4).min(Duration::from_secs(30));
        let refresh_at = Some(Instant::now() + (l - early));
        *cache = Some(Cached {
            token: token.clone(),
            refresh_at,
        });
        Ok(Some(token))
    }

    fn invalidate(&self) -> bool {
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = None;
        true
    }
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("token_url", &self.token_url)
            .field("resource", &self.resource)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}
