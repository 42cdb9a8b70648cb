//! Errors: the server's RFC 9457 problems and the client's own failures.

use crate::types::{ProblemCode, ProblemViolation, Receipt};
use serde::Deserialize;
use std::fmt;

/// An error answer of the server: an RFC 9457 problem (`application/problem+json`). It mirrors
/// `spec/schemas/Problem.json` plus the raw body and headers. An error answer that is not a
/// problem document still gives a `Problem`, with `code` `None` and the status.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The HTTP status of the answer (the status line wins over the body's `status`).
    pub status: u16,
    /// The stable machine code (`ProblemCode::NotFound`, …); `None` when the answer was not a
    /// problem document.
    pub code: Option<ProblemCode>,
    /// A short human-readable summary of the problem type (the HTTP reason when absent).
    pub title: String,
    /// What happened in this occurrence.
    pub detail: String,
    /// The problem type URI (`urn:bap:problem:<code>`).
    pub problem_type: String,
    /// This occurrence, when the server names one.
    pub instance: Option<String>,
    /// Refines `code` where the spec names reasons (`stale_node_handle`: `epoch_superseded` or
    /// `session_lost`).
    pub reason: Option<String>,
    /// Validation details (`invalid_request`): JSON pointers to the culprits.
    pub errors: Vec<ProblemViolation>,
    /// The receipt of a command refused by policy (outcome `rejected`).
    pub receipt: Option<Receipt>,
    /// The raw answer body.
    pub body: Vec<u8>,
    /// The answer's headers (`Retry-After`, `WWW-Authenticate`, …), names in lower case.
    pub headers: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct ProblemDoc {
    #[serde(default, rename = "type")]
    problem_type: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    code: Option<ProblemCode>,
    #[serde(default)]
    instance: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    errors: Option<Vec<ProblemViolation>>,
    #[serde(default)]
    receipt: Option<Receipt>,
}

impl Problem {
    /// Builds the problem of an error answer.
    pub(crate) fn from_answer(status: u16, headers: Vec<(String, String)>, body: Vec<u8>) -> Problem {
        let mut p = Problem {
            status,
            code: None,
            title: String::new(),
            detail: String::new(),
            problem_type: String::new(),
            instance: None,
            reason: None,
            errors: Vec::new(),
            receipt: None,
            body,
            headers,
        };
        let media = p
            .header("content-type")
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if media == "application/problem+json" || media == "application/json" {
            if let Ok(doc) = serde_json::from_slice::<ProblemDoc>(&p.body) {
                p.code = doc.code;
                p.title = doc.title.unwrap_or_default();
                p.detail = doc.detail.unwrap_or_default();
                p.problem_type = doc.problem_type.unwrap_or_default();
                p.instance = doc.instance;
                p.reason = doc.reason;
                p.errors = doc.errors.unwrap_or_default();
                p.receipt = doc.receipt;
            }
        }
        if p.title.is_empty() {
            p.title = status_text(status).to_owned();
        }
        p
    }

    /// The first value of a header of the answer (the name is case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The problem document as JSON, when the body is a JSON object.
    pub fn document(&self) -> Option<serde_json::Value> {
        match serde_json::from_slice(&self.body) {
            Ok(v @ serde_json::Value::Object(_)) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Problem {
    /// `bap: 404 not_found: No task tsk_….`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bap: {}", self.status)?;
        match &self.code {
            Some(c) => write!(f, " {}", c)?,
            None if !status_text(self.status).is_empty() => write!(f, " {}", status_text(self.status))?,
            None => {}
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        } else if self.code.is_some() && !self.title.is_empty() {
            write!(f, ": {}", self.title)?;
        }
        Ok(())
    }
}

impl std::error::Error for Problem {}

/// Every failure of a call.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with an error status (after the client's own retries).
    Problem(Box<Problem>),
    /// The request could not be sent or its answer not read (after the client's own retries).
    Transport {
        /// The operation (`create_task`, …).
        op: String,
        /// What went wrong.
        message: String,
    },
    /// A 2xx answer did not decode into the operation's type.
    Decode {
        /// The operation.
        op: String,
        /// The answer's status.
        status: u16,
        /// The decoder's message.
        message: String,
    },
    /// The request body could not be encoded as JSON.
    Encode {
        /// The operation.
        op: String,
        /// The encoder's message.
        message: String,
    },
    /// No bearer token could be obtained (the token endpoint refused or was unreachable).
    Token(String),
    /// The bytes of an artifact do not match the `Repr-Digest` the server sent.
    DigestMismatch {
        /// The operation.
        op: String,
    },
}

impl Error {
    /// The server's problem, when the error is one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::Problem(p) => Some(p),
            _ => None,
        }
    }

    /// Whether the error is a problem with the given code.
    pub fn is_problem(&self, code: &ProblemCode) -> bool {
        matches!(self, Error::Problem(p) if p.code.as_ref() == Some(code))
    }

    /// The HTTP status of a problem.
    pub fn status(&self) -> Option<u16> {
        self.problem().map(|p| p.status)
    }

    pub(crate) fn decode(op: &str, status: u16, e: serde_json::Error) -> Error {
        Error::Decode {
            op: op.to_owned(),
            status,
            message: e.to_string(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Problem(p) => p.fmt(f),
            Error::Transport { op, message } => write!(f, "bap: {}: {}", op, message),
            Error::Decode { op, status, message } => {
                write!(f, "bap: {}: decoding the {} answer: {}", op, status, message)
            }
            Error::Encode { op, message } => write!(f, "bap: {}: encoding the request: {}", op, message),
            Error::Token(message) => write!(f, "bap: token: {}", message),
            Error::DigestMismatch { op } => write!(f, "bap: {}: artifact bytes do not match Repr-Digest", op),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Problem(p) => Some(p.as_ref()),
            _ => None,
        }
    }
}

impl From<Problem> for Error {
    fn from(p: Problem) -> Error {
        Error::Problem(Box::new(p))
    }
}

pub(crate) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}
