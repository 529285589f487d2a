//! Accepting connections, each served by hyper within [`Limits`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What one server lets a client cost it.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Time a client has to send a request's line and headers.
    pub header_timeout: Duration,
    /// Bytes of a request's line and headers, at most (hyper's smallest
    /// buffer is 8 KiB).
    pub max_head: usize,
    /// Connections served at once.
    pub max_connections: usize,
    /// Whether a connection may carry more than one request; without, each
    /// answer says `Connection: close` and the connection is closed.
    pub keep_alive: bool,
}

/// The answer to a connection past [`Limits::max_connections`].
#[derive(Clone, Debug)]
pub struct Busy {
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its body.
    pub body: String,
}

/// Serves `app` on `listener` within `limits` until `stop` completes (or
/// for ever). Connections being served when it returns are dropped with
/// the runtime that runs them.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: Limits,
    busy: Busy,
    stop: impl Future<Output = ()>,
) {
    let busy = Arc::new(busy);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors, say: wait for some to close.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, Arc::clone(&busy)));
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(limits.max_head)
            .keep_alive(limits.keep_alive)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(slot);
        });
    }
}

/// Answers a connection past the limit: 503, then closed.
async fn refuse(mut stream: tokio::net::TcpStream, busy: Arc<Busy>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: {}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        busy.content_type,
        busy.body.len()
    );
    let answer = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(busy.body.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent (a little, briefly): closing with its
        // request unread would reset the connection before it reads the
        // answer.
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            if stream.read(&mut sink).await? == 0 {
                break;
            }
        }
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), answer).await;
}
