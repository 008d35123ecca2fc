//! The HTTP front of `metrics.listen`: `GET /metrics` (see [`super::metrics`]) beside the
//! probes an orchestrator asks, `GET /healthz` (alive) and `GET /readyz` (ready), each
//! answering 200 or 503 with one line that says why (see [`super::health`]).
//!
//! Served by hyper, HTTP/1.1 without keep-alive (a scrape or a probe is one request), one task
//! per connection: an idle or slow client delays no other request. A client gets
//! [`HEADER_TIMEOUT`] to send its request and [`CONNECTION_TIMEOUT`] for the whole exchange,
//! then it is dropped; at most [`MAX_CONNECTIONS`] are open at once, so a flood of clients
//! cannot take the process's file descriptors. The answers are made from the latest progress,
//! copied out of the watch before anything is written, so no client holds the pipeline up.
//!
//! [`serve`] runs until its stop signal turns true: then it stops accepting, answers the
//! requests it has begun within [`STOP_GRACE`], drops the clients that have said nothing, and
//! returns.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::health;
use super::metrics::{self, Endpoint, Now};
use crate::pipeline::Progress;

/// The longest a client may take to send its request line and headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest one connection may stay open, request and answer together.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait in the listener's backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// After the stop, how long requests already begun have to be answered.
pub const STOP_GRACE: Duration = Duration::from_secs(1);
/// How long the server waits before accepting again after `accept` failed (out of file
/// descriptors, say), rather than spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How often a failing `accept` is said again in the log.
const TELL_ACCEPT_EVERY: Duration = Duration::from_secs(60);

/// The content type of the probes' and the errors' one line.
const TEXT: &str = "text/plain; charset=utf-8";

/// Answer scrapes and probes on `listener` from the latest `progress` until `stop` turns true
/// (or its sender is dropped); see the module docs.
pub async fn serve(
    listener: TcpListener,
    progress: watch::Receiver<Progress>,
    endpoint: Endpoint,
    mut stop: watch::Receiver<bool>,
) {
    let endpoint = Arc::new(endpoint);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    let mut told = None;
    let mut http = http1::Builder::new();
    http.keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            accepted = accept(&listener, &permits, &mut told) => accepted,
        };
        let Some((stream, permit)) = accepted else {
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            continue;
        };
        let (progress, endpoint) = (progress.clone(), Arc::clone(&endpoint));
        let service = service_fn(move |request: Request<Incoming>| {
            let response = answer(&request, &progress, &endpoint);
            async move { Ok::<_, Infallible>(response) }
        });
        let connection = http.serve_connection(TokioIo::new(stream), service);
        connections.spawn(async move {
            // An error is the client's doing (it went away, sent garbage, took too long): the
            // connection is closed and nothing else is affected.
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            drop(permit);
        });
    }
    // No new connections from here. A request begun is answered (each connection serves one);
    // a client still silent after the grace is dropped with the tasks.
    drop(listener);
    let _ = tokio::time::timeout(STOP_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.shutdown().await;
}

/// The next connection, once one may be served; `None` when `accept` failed (said in the log
/// at most once every [`TELL_ACCEPT_EVERY`], the first time at once).
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    told: &mut Option<Instant>,
) -> Option<(tokio::net::TcpStream, tokio::sync::OwnedSemaphorePermit)> {
    // The semaphore is never closed.
    let permit = Arc::clone(permits).acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => Some((stream, permit)),
        Err(e) => {
            if told.is_none_or(|t| t.elapsed() >= TELL_ACCEPT_EVERY) {
                *told = Some(Instant::now());
                tracing::warn!(
                    "the metrics endpoint could not accept a connection: {e}; scrapes and probes \
                     may go unanswered until it can (out of file descriptors? raise the limit)"
                );
            }
            None
        }
    }
}

/// The HTTP response to `request`, made from a copy of the latest progress.
fn answer(
    request: &Request<Incoming>,
    progress: &watch::Receiver<Progress>,
    endpoint: &Endpoint,
) -> hyper::Response<Full<Bytes>> {
    let snapshot = progress.borrow().clone();
    let reply = respond(
        request.method(),
        request.uri().path(),
        &snapshot,
        endpoint,
        Now::read(),
    );
    let mut response = hyper::Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if reply.status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    response
}

/// A response: status, content type and body.
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: String,
}

/// The response to `method` `path`, from `progress` at `now`.
fn respond(
    method: &Method,
    path: &str,
    progress: &Progress,
    endpoint: &Endpoint,
    now: Now,
) -> Reply {
    let text = |status, body: String| Reply {
        status,
        content_type: TEXT,
        body,
    };
    let probe = |verdict: health::Verdict| {
        let status = match verdict.ok {
            true => StatusCode::OK,
            false => StatusCode::SERVICE_UNAVAILABLE,
        };
        text(status, format!("{}\n", verdict.reason))
    };
    if method != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is answered\n".to_owned(),
        );
    }
    match path {
        "/metrics" => match metrics::render(progress, endpoint, now) {
            Ok(body) => Reply {
                status: StatusCode::OK,
                content_type: metrics::CONTENT_TYPE,
                body,
            },
            Err(_) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the metrics could not be written: the Prometheus client refused a figure; \
                 the probes still answer, and a report of this is welcome\n"
                    .to_owned(),
            ),
        },
        "/healthz" => probe(health::liveness(progress)),
        "/readyz" => probe(health::readiness(
            progress,
            now.instant,
            endpoint.ready_after_failing,
        )),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics, the probes at /healthz and /readyz\n"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::pipeline::metrics::tests::endpoint;

    #[test]
    fn probes_answer_200_or_503_with_one_line() {
        let at = Now::read();
        let get =
            |path, progress: &Progress| respond(&Method::GET, path, progress, &endpoint(), at);
        let starting = Progress::default();
        assert_eq!(
            get("/readyz", &starting),
            Reply {
                status: StatusCode::SERVICE_UNAVAILABLE,
                content_type: TEXT,
                body: "not ready: starting (the slot is not being read yet)\n".into()
            }
        );
        let alive = get("/healthz", &starting);
        assert_eq!(
            (alive.status, alive.body.as_str()),
            (StatusCode::OK, "alive: starting\n")
        );
        let streaming = Progress {
            streaming: true,
            ..Progress::default()
        };
        let ready = get("/readyz", &streaming);
        assert_eq!(
            (ready.status, ready.body.as_str()),
            (StatusCode::OK, "ready: streaming\n")
        );
        let ended = Progress {
            ended: Some("the sink refused".into()),
            ..streaming
        };
        let alive = get("/healthz", &ended);
        assert_eq!(alive.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(alive.body.lines().count(), 1);
        assert_eq!(get("/health", &ended).status, StatusCode::NOT_FOUND);
        assert_eq!(
            respond(&Method::POST, "/readyz", &ended, &endpoint(), at).status,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }

    /// A server on a free loopback port; its address, the progress it reads and its stop.
    async fn start() -> (
        std::net::SocketAddr,
        watch::Sender<Progress>,
        watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (sender, receiver) = watch::channel(Progress::default());
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(serve(listener, receiver, endpoint(), stopped));
        (address, sender, stop, server)
    }

    /// The whole response to one raw request.
    async fn exchange(address: std::net::SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    async fn get(address: std::net::SocketAddr, path: &str) -> String {
        exchange(address, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).await
    }

    #[tokio::test]
    async fn a_scrape_gets_the_latest_progress_and_other_paths_a_404() {
        let (address, sender, _stop, _server) = start().await;
        sender.send_modify(|p| p.changes = 7);
        let metrics = get(address, "/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
        assert!(
            metrics.contains(&format!("content-type: {}\r\n", metrics::CONTENT_TYPE)),
            "{metrics}"
        );
        assert!(metrics.contains("connection: close\r\n"), "{metrics}");
        assert!(
            metrics.contains("\ntributary_changes_total 7\n"),
            "{metrics}"
        );
        let other = get(address, "/").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = exchange(
            address,
            "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(post.contains("allow: GET\r\n"), "{post}");
        sender.send_modify(|p| p.streaming = true);
        let ready = get(address, "/readyz?verbose").await;
        assert!(
            ready.starts_with("HTTP/1.1 200 OK\r\n")
                && ready.ends_with("\r\n\r\nready: streaming\n"),
            "{ready}"
        );
        // HTTP/1.0, as the simplest probes speak it.
        let old = exchange(address, "GET /healthz HTTP/1.0\r\n\r\n").await;
        assert!(old.ends_with("\r\n\r\nalive: streaming\n"), "{old}");
    }

    #[tokio::test]
    async fn idle_and_stalled_clients_delay_no_probe_and_are_dropped() {
        let (address, _sender, _stop, _server) = start().await;
        let mut idle = Vec::new();
        for _ in 0..20 {
            idle.push(TcpStream::connect(address).await.unwrap());
        }
        let mut stalled = TcpStream::connect(address).await.unwrap();
        stalled.write_all(b"GET /heal").await.unwrap();
        let asked = Instant::now();
        let alive = get(address, "/healthz").await;
        assert!(alive.ends_with("alive: starting\n"), "{alive}");
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{:?}",
            asked.elapsed()
        );
        // The stalled request's time is up after HEADER_TIMEOUT: the server hangs up.
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            HEADER_TIMEOUT + Duration::from_secs(3),
            stalled.read_to_end(&mut rest),
        )
        .await;
        assert!(read.is_ok(), "the stalled client was not dropped");
        assert!(asked.elapsed() >= HEADER_TIMEOUT - Duration::from_millis(500));
    }

    #[tokio::test]
    async fn a_stop_finishes_the_request_begun_and_closes_the_port() {
        let (address, _sender, stop, server) = start().await;
        let mut begun = TcpStream::connect(address).await.unwrap();
        begun.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        // Let the server take the connection before the stop.
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(true).unwrap();
        begun.write_all(b"Host: x\r\n\r\n").await.unwrap();
        let mut response = String::new();
        begun.read_to_string(&mut response).await.unwrap();
        assert!(
            response.ends_with("\r\n\r\nalive: starting\n"),
            "{response}"
        );
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server ended after its stop")
            .unwrap();
        assert!(TcpStream::connect(address).await.is_err());
    }
}
