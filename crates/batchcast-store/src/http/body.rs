//! A request body read within bounds: its declared length, at most a
//! caller's limit, within a caller's time.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::http::Request;
use futures_util::StreamExt;

/// Bytes of a body over the limit read (and dropped) before it is refused,
/// so that a client, which sends its body before it reads, sees the answer.
pub const DRAIN: u64 = 16 << 20;

/// Why a body was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Sent without a `Content-Length` (chunked): its size is unknown
    /// until it has been read.
    Unmeasured,
    /// Its `Content-Length` is over the limit.
    TooLarge,
    /// It did not come whole in time (or the client went away).
    Late,
}

impl BodyError {
    /// The HTTP status that answers it.
    pub fn status(self) -> u16 {
        match self {
            BodyError::Unmeasured => 411,
            BodyError::TooLarge => 413,
            BodyError::Late => 408,
        }
    }
}

/// The body of `request`: as many bytes as its `Content-Length` says (none
/// sent: empty), at most `max`, read within `time`.
pub async fn read_body(
    request: Request<Body>,
    max: u64,
    time: Duration,
) -> Result<Bytes, BodyError> {
    let headers = request.headers();
    if headers.contains_key(TRANSFER_ENCODING) {
        return Err(BodyError::Unmeasured);
    }
    // hyper has refused a Content-Length that is not one number.
    let len = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let mut stream = request.into_body().into_data_stream();
    if len > max {
        let drain = async {
            let mut left = len.min(DRAIN);
            while let Some(Ok(chunk)) = stream.next().await {
                left = left.saturating_sub(chunk.len() as u64);
                if left == 0 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(time, drain).await;
        return Err(BodyError::TooLarge);
    }
    let read = async {
        // Bounded by `max`: hyper yields no more than the Content-Length.
        let mut body = Vec::with_capacity(len as usize);
        while let Some(chunk) = stream.next().await {
            body.extend_from_slice(&chunk.map_err(|_| BodyError::Late)?);
        }
        if (body.len() as u64) < len {
            return Err(BodyError::Late);
        }
        Ok(Bytes::from(body))
    };
    tokio::time::timeout(time, read)
        .await
        .unwrap_or(Err(BodyError::Late))
}
