//! The one HTTP stack of batchcast's local servers (the `http` feature):
//! the dashboard (`batchcast-ui`) and the MLflow endpoint
//! (`batchcast-runs`) both serve an axum [`Router`](axum::Router) over
//! hyper's HTTP/1 through [`serve`], and read request bodies through
//! [`read_body`]. Who may ask (loopback `Host`/`Origin`, secrets) is
//! [`crate::access`], which both apply. It lives beside the store so that
//! both servers share it while the dashboard depends on the store alone.
//!
//! Invariants (what a client can cost a server):
//! - at most [`Limits::max_connections`] connections are served at once;
//!   one past it is answered 503 with the server's own message and closed
//!   at once, without waiting for a slot;
//! - a request's head is at most [`Limits::max_head`] bytes (more is
//!   answered 431 or cut off) and must arrive within
//!   [`Limits::header_timeout`], or the connection is closed;
//! - a body is read only to its declared length, at most the caller's
//!   bound, within the caller's time; one over the bound is read and
//!   dropped up to [`DRAIN`] so that its client sees the answer.

mod body;
mod serve;

pub use body::{read_body, BodyError, DRAIN};
pub use serve::{serve, Busy, Limits};
