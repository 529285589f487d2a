//! The MLflow endpoint's HTTP/1.1, read within bounds: a request's head
//! (its request line and headers) of at most [`MAX_HEAD`] bytes, sent
//! within [`HEAD_TIMEOUT`], and a body of at most the endpoint's limit,
//! within [`BODY_TIMEOUT`]; one request per connection, answered with
//! `Connection: close`. A client that sends a 64 MB request line, or never
//! finishes its headers, costs 16 KiB and 10 s, and is answered 431 or
//! dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Bytes of a request's line and headers, at most.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Time a client has to send its request line and headers.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to send its body.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of a body over the limit read (and dropped) before it is refused.
const DRAIN: u64 = 16 << 20;

/// A request whose head has been read.
pub(crate) struct Request {
    stream: TcpStream,
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    /// Body bytes read with the head.
    early: Vec<u8>,
}

/// Why no request could be read: an answer to send, or none (the client
/// went away or stalled).
pub(crate) enum Unread {
    Answer(TcpStream, u16, &'static str),
    Gone,
}

/// Reads the head of a request from `stream`.
pub(crate) fn read_head(mut stream: TcpStream) -> Result<Request, Unread> {
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(Unread::Answer(
                stream,
                431,
                "the request line and headers are over 16 KiB",
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(Unread::Gone);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(Unread::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let Ok(head) = std::str::from_utf8(&buf[..end]) else {
        return Err(Unread::Answer(stream, 400, "the request head is not text"));
    };
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(url), Some(version)) = (first.next(), first.next(), first.next())
    else {
        return Err(Unread::Answer(stream, 400, "malformed request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Unread::Answer(stream, 400, "not an HTTP/1 request"));
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            return Err(Unread::Answer(stream, 400, "malformed header line"));
        };
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let (method, url) = (method.to_string(), url.to_string());
    let early = buf[end + 4..].to_vec();
    Ok(Request {
        stream,
        method,
        url,
        headers,
        early,
    })
}

impl Request {
    pub(crate) fn method(&self) -> &str {
        &self.method
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The value of header `name`, if sent.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body, of at most `max` bytes (as its Content-Length says; none
    /// sent: empty), read within [`BODY_TIMEOUT`]; `Err` with the status
    /// to answer when it is too long, unmeasured or not sent in time.
    pub(crate) fn body(&mut self, max: u64) -> Result<Vec<u8>, (u16, &'static str)> {
        if self.header("Transfer-Encoding").is_some() {
            return Err((411, "send the body with a Content-Length"));
        }
        let len = match self.header("Content-Length") {
            None => 0,
            Some(v) => v
                .parse::<u64>()
                .map_err(|_| (400, "the Content-Length is not a number"))?,
        };
        let deadline = Instant::now() + BODY_TIMEOUT;
        let mut chunk = [0u8; 16 * 1024];
        if len > max {
            // Read and drop a body up to [`DRAIN`] first, so that the client,
            // which sends it before it reads, sees the answer.
            let mut left = len.min(DRAIN).saturating_sub(self.early.len() as u64);
            while left > 0 {
                let wait = deadline.saturating_duration_since(Instant::now());
                if wait.is_zero() || self.stream.set_read_timeout(Some(wait)).is_err() {
                    break;
                }
                match self.stream.read(&mut chunk[..left.min(16 * 1024) as usize]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left -= n as u64,
                }
            }
            return Err((413, "request body over 4 MiB"));
        }
        let len = len as usize;
        let mut body = std::mem::take(&mut self.early);
        body.truncate(len);
        while body.len() < len {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stream.set_read_timeout(Some(left)).is_err() {
                return Err((408, "the body did not come in time"));
            }
            let want = (len - body.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) | Err(_) => return Err((408, "the body did not come in time")),
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        Ok(body)
    }

    /// Answers with `status` and the JSON `body`, and closes.
    pub(crate) fn respond(self, status: u16, body: &str) {
        respond(self.stream, status, body);
    }
}

/// Answers on `stream` with `status` and the JSON `body`, and closes.
pub(crate) fn respond(mut stream: TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.set_write_timeout(Some(BODY_TIMEOUT));
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()));
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Read what is left of the request (briefly): closing with it unread
    // would reset the connection before the client reads the answer.
    let until = Instant::now() + Duration::from_millis(200);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
}

/// The JSON error body MLflow clients read.
pub(crate) fn error_body(status: u16, message: &str) -> String {
    let code = match status {
        503 => "TEMPORARILY_UNAVAILABLE",
        _ => "INVALID_PARAMETER_VALUE",
    };
    serde_json::json!({"error_code": code, "message": message}).to_string()
}

/// Answers a refused head.
pub(crate) fn answer(unread: Unread) {
    if let Unread::Answer(stream, status, message) = unread {
        respond(stream, status, &error_body(status, message));
    }
}
