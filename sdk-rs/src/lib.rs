//! Rust SDK of BAP, the Browser Agent Protocol: a blocking [`Client`] with one method per
//! operation, the wire types and the event types, all generated from `spec/` (files
//! `*.gen.rs`, written by `make generate`). Path parameters come first, then the request body,
//! then options; every method has a `_with` twin taking [`CallOptions`]:
//!
//! ```no_run
//! use bap::{Client, CallOptions, CreateTaskRequest, Policy, ProblemCode};
//!
//! # fn main() -> Result<(), bap::Error> {
//! let client = Client::new("http://127.0.0.1:7777");
//! let req = CreateTaskRequest {
//!     goal: "Order the cart".into(),
//!     policy: Policy {
//!         allowed_origins: vec!["https://shop.example.com".into()],
//!         ..Default::default()
//!     },
//!     ..Default::default()
//! };
//! let created = client
//!     .create_task_with(&req, &CallOptions::new().idempotency_key("order-42"))?
//!     .primary()
//!     .expect("a new task");
//! let task_id = created.task.task_id;
//! match client.get_task("tsk_doesnotexist") {
//!     Err(e) if e.is_problem(&ProblemCode::NotFound) => println!("no such task"),
//!     other => println!("{:?}", other?),
//! }
//! for event in client.subscribe(&task_id, 0).take(3) {
//!     let event = event?;
//!     println!("{} {}", event.seq, event.r#type);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Mutating calls send an `Idempotency-Key` (the one of [`CallOptions::idempotency_key`], else a
//! new UUID v7) and reuse it on the client's own retries (network errors, `409
//! idempotency_in_flight`, 429, 503, honouring `Retry-After`), so a retried call has its side
//! effect once. The SDK sends the body it is given unchanged: validation is the server's, and
//! its problems come back as [`Error::Problem`] holding a [`Problem`].
//!
//! In the remote profile, [`ClientBuilder::token`] sends a fixed bearer token and
//! [`ClientBuilder::client_credentials`] obtains one with the OAuth client-credentials grant
//! (bound to the server with RFC 8707 `resource`), cached until shortly before it expires.
//!
//! The crate speaks plain HTTP (it is built without a TLS stack): use it against the local
//! profile or a server reached over a trusted network.

#![forbid(unsafe_code)]
// Every public item is documented, the generated wire types included: their docs are the
// spec's descriptions, which `make generate` requires (codegen/apimodel).
#![deny(missing_docs)]

mod auth;
mod client;
mod problem;
mod subscribe;
mod transport;

/// The wire types (generated from `spec/`; also re-exported at the crate root).
#[rustfmt::skip]
#[path = "types.gen.rs"]
pub mod types;

#[rustfmt::skip]
#[path = "client.gen.rs"]
mod operations;

#[cfg(test)]
mod tests;

/// The examples of README.md, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use auth::{ClientCredentials, StaticToken, TokenSource};
pub use client::{Blob, CallOptions, Client, ClientBuilder};
pub use problem::{Error, Problem};
pub use subscribe::Subscription;
pub use transport::new_idempotency_key;
pub use types::*;
