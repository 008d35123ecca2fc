//! A TCP proxy on loopback that a test switches between behaviours, as a network or a load
//! balancer in front of a server misbehaves:
//!
//! - [`Mode::Forward`]: bytes go both ways.
//! - [`Mode::Stall`]: nothing is forwarded in either direction and nothing is closed; new
//!   connections are accepted and hear nothing. This is a partition as both ends see it. Open
//!   connections resume when the stall ends (what they sent meanwhile is delivered then); the
//!   ones accepted during the stall are closed.
//! - [`Mode::Status`]: every new connection gets its request read and answered with that HTTP
//!   status (an S3 error body) and is closed; open connections are closed at once, so that a
//!   client's pooled connections fail over to the error too.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Forward,
    Stall,
    /// Answer every request with this HTTP status (500, 503, ...).
    Status(u16),
}

pub struct Proxy {
    port: u16,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Forward connections on a new loopback port to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mode, watching) = watch::channel(Mode::Forward);
        let target = target.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = watching.clone();
                match *mode.borrow() {
                    Mode::Forward => {
                        tokio::spawn(forward(client, target.clone(), mode.clone()));
                    }
                    Mode::Stall => {
                        tokio::spawn(stall(client, mode.clone()));
                    }
                    Mode::Status(status) => {
                        tokio::spawn(answer(client, status));
                    }
                }
            }
        });
        Proxy { port, mode, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stop forwarding; connections stay open (a [`Mode::Stall`] with no end).
    pub fn freeze(&self) {
        self.set_mode(Mode::Stall);
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(client: TcpStream, target: String, mode: watch::Receiver<Mode>) {
    // A target that refuses (a stopped server) is passed on as a closed connection.
    let Ok(server) = TcpStream::connect(&target).await else {
        return;
    };
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::spawn(pipe(cr, sw, mode.clone()));
    tokio::spawn(pipe(sr, cw, mode));
}

/// Hold a connection accepted during a stall, silent, until the stall ends; then close it.
async fn stall(client: TcpStream, mut mode: watch::Receiver<Mode>) {
    let _ = mode.wait_for(|m| *m != Mode::Stall).await;
    drop(client);
}

/// Read one request and answer it with `status`, then close.
async fn answer(mut client: TcpStream, status: u16) {
    // Reading the request first lets the client see the answer: closing a socket with unread
    // bytes resets the connection.
    let _ = tokio::time::timeout(Duration::from_secs(5), read_request(&mut client)).await;
    let (reason, code) = match status {
        500 => ("Internal Server Error", "InternalError"),
        503 => ("Service Unavailable", "SlowDown"),
        _ => ("Error", "InternalError"),
    };
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{reason} (test proxy)</Message></Error>"
    );
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Read an HTTP request's head and as much body as its `Content-Length` announces.
async fn read_request(client: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match client.read(&mut chunk).await? {
            0 => return Ok(()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut unread = length.saturating_sub(buf.len() - head_end);
    while unread > 0 {
        match client.read(&mut chunk).await? {
            0 => break,
            n => unread = unread.saturating_sub(n),
        }
    }
    Ok(())
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    while forwarding(&mut mode).await {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            // Look at the new mode before reading on.
            _ = mode.changed() => continue,
        };
        // What was read as a stall began is held, not delivered.
        if !forwarding(&mut mode).await || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Wait out a stall; `false` when the connection is to close (an error mode, or the proxy is
/// gone).
async fn forwarding(mode: &mut watch::Receiver<Mode>) -> bool {
    match mode.wait_for(|m| *m != Mode::Stall).await {
        Ok(m) => *m == Mode::Forward,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target that echoes what it reads.
    async fn echo_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        if socket.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn exchange(stream: &mut TcpStream, text: &[u8]) -> Option<Vec<u8>> {
        stream.write_all(text).await.ok()?;
        let mut buf = vec![0u8; text.len()];
        let read = tokio::time::timeout(Duration::from_millis(300), stream.read_exact(&mut buf));
        read.await.ok()?.ok()?;
        Some(buf)
    }

    #[tokio::test]
    async fn the_proxy_forwards_stalls_and_answers_errors_on_demand() {
        let proxy = Proxy::start(&echo_server().await).await;
        let address = format!("127.0.0.1:{}", proxy.port());
        let mut open = TcpStream::connect(&address).await.unwrap();
        assert_eq!(
            exchange(&mut open, b"one").await.as_deref(),
            Some(&b"one"[..])
        );

        proxy.set_mode(Mode::Stall);
        assert_eq!(
            exchange(&mut open, b"two").await,
            None,
            "a stall says nothing"
        );
        let mut during = TcpStream::connect(&address).await.unwrap();
        assert_eq!(exchange(&mut during, b"x").await, None);
        proxy.set_mode(Mode::Forward);
        // The open connection delivers what it held; the one accepted during the stall closes.
        let mut held = [0u8; 3];
        open.read_exact(&mut held).await.unwrap();
        assert_eq!(&held, b"two");
        // Closed with "x" unread: a reset, or an end of stream.
        assert!(matches!(during.read(&mut [0u8; 8]).await, Ok(0) | Err(_)));

        proxy.set_mode(Mode::Status(503));
        assert_eq!(open.read(&mut [0u8; 8]).await.unwrap_or(0), 0, "closed");
        let mut asking = TcpStream::connect(&address).await.unwrap();
        asking
            .write_all(b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
            .await
            .unwrap();
        let mut answer = String::new();
        asking.read_to_string(&mut answer).await.unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n")
                && answer.contains("<Code>SlowDown</Code>"),
            "{answer}"
        );
    }
}
