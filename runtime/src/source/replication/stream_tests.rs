//! The driver against a simulated walsender on an in-memory pipe: what it sends, when, and what
//! the consumer sees.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::time::timeout;

use super::*;
use crate::source::replication::frame::{
    Keepalive, StatusUpdate, decode_status_update, encode_keepalive, encode_xlog_data,
};

const HOUR: Duration = Duration::from_secs(3600);
const PATIENCE: Duration = Duration::from_secs(5);

struct Server {
    rx: ServerReader,
    writer: WriteHalf<DuplexStream>,
}

/// The server's reading side, separate so a test can flood from the writing side meanwhile.
struct ServerReader(ReadHalf<DuplexStream>);

fn start(status_interval: Duration) -> (ReplicationStream, Server) {
    start_with(status_interval, super::Confirmer::default())
}

/// [`start`] for a consumer that confirms through `confirmer`.
fn start_with(
    status_interval: Duration,
    confirmer: super::Confirmer,
) -> (ReplicationStream, Server) {
    let (client, server) = tokio::io::duplex(16 * 1024);
    let stream = ReplicationStream::spawn(
        Box::new(client),
        BytesMut::new(),
        status_interval,
        confirmer,
        None,
    );
    let (reader, writer) = tokio::io::split(server);
    (
        stream,
        Server {
            rx: ServerReader(reader),
            writer,
        },
    )
}

fn xlog(start: u64, data: &'static [u8]) -> Bytes {
    let mut out = BytesMut::new();
    let frame = XLogData {
        wal_start: Lsn(start),
        wal_end: Lsn(start),
        send_time: 0,
        data: Bytes::from_static(data),
    };
    encode_xlog_data(&frame, &mut out);
    out.freeze()
}

fn keepalive(wal_end: u64, reply_requested: bool) -> Bytes {
    let mut out = BytesMut::new();
    encode_keepalive(
        &Keepalive {
            wal_end: Lsn(wal_end),
            send_time: 0,
            reply_requested,
        },
        &mut out,
    );
    out.freeze()
}

fn message(tag: u8, body: &[u8]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(tag);
    out.put_i32(4 + body.len() as i32);
    out.put_slice(body);
    out.freeze()
}

fn error_response(code: &str, text: &str) -> Bytes {
    let body = format!("SERROR\0VERROR\0C{code}\0M{text}\0\0");
    message(b'E', body.as_bytes())
}

fn end_of_command() -> Bytes {
    let mut out = BytesMut::new();
    out.extend_from_slice(&message(b'C', b"START_REPLICATION\0"));
    out.extend_from_slice(&message(b'Z', b"I"));
    out.freeze()
}

impl Server {
    async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    async fn read(&mut self) -> (u8, Vec<u8>) {
        self.rx.read().await
    }

    async fn read_status(&mut self) -> StatusUpdate {
        self.rx.read_status().await
    }

    async fn expect_silence(&mut self) {
        self.rx.expect_silence().await
    }
}

impl ServerReader {
    /// The next frontend message: tag and body.
    async fn read(&mut self) -> (u8, Vec<u8>) {
        let mut header = [0u8; 5];
        timeout(PATIENCE, self.0.read_exact(&mut header))
            .await
            .expect("client sent nothing")
            .unwrap();
        let len = i32::from_be_bytes(header[1..5].try_into().unwrap()) as usize - 4;
        let mut body = vec![0; len];
        self.0.read_exact(&mut body).await.unwrap();
        (header[0], body)
    }

    async fn read_status(&mut self) -> StatusUpdate {
        let (tag, body) = self.read().await;
        assert_eq!(tag, b'd', "expected CopyData");
        decode_status_update(&body).unwrap()
    }

    /// Asserts the client sends nothing for a while.
    async fn expect_silence(&mut self) {
        let mut byte = [0u8; 1];
        let read = timeout(Duration::from_millis(150), self.0.read(&mut byte)).await;
        assert!(read.is_err(), "client sent something unexpected: {byte:?}");
    }
}

async fn recv_all(stream: &mut ReplicationStream, want: usize) -> Vec<XLogData> {
    let mut out = Vec::new();
    while out.len() < want {
        let n = timeout(PATIENCE, stream.recv_many(&mut out, 1000))
            .await
            .expect("no frames")
            .unwrap();
        assert!(n > 0, "stream ended after {} of {want} frames", out.len());
    }
    out
}

#[tokio::test]
async fn frames_arrive_in_order_and_copy_done_ends_the_stream() {
    let (mut stream, mut server) = start(HOUR);
    let mut wire = BytesMut::new();
    for (i, data) in [b"B".as_slice(), b"I", b"C"].iter().enumerate() {
        let mut frame = BytesMut::new();
        let x = XLogData {
            wal_start: Lsn(10 + i as u64),
            wal_end: Lsn(10 + i as u64),
            send_time: 5,
            data: Bytes::copy_from_slice(data),
        };
        encode_xlog_data(&x, &mut frame);
        wire.extend_from_slice(&frame);
    }
    wire.extend_from_slice(&message(b'c', b""));
    server.send(&wire).await;

    let frames = recv_all(&mut stream, 3).await;
    let tags: Vec<u8> = frames.iter().map(|f| f.data[0]).collect();
    assert_eq!(tags, b"BIC");
    assert_eq!(frames[2].wal_start, Lsn(12));
    assert_eq!(frames[0].send_time, 5);

    assert_eq!(
        server.read().await,
        (b'c', vec![]),
        "the server's CopyDone is answered"
    );
    server.send(&end_of_command()).await;
    assert_eq!(
        server.read().await.0,
        b'X',
        "then the session is terminated"
    );

    let mut out = Vec::new();
    assert_eq!(stream.recv_many(&mut out, 10).await.unwrap(), 0);
    assert_eq!(
        stream.recv_many(&mut out, 10).await.unwrap(),
        0,
        "the end stays the end"
    );
}

#[tokio::test]
async fn recv_many_respects_the_limit() {
    let (mut stream, mut server) = start(HOUR);
    for i in 0..5 {
        server.send(&xlog(i, b"I")).await;
    }
    let mut out = Vec::new();
    let mut counts = Vec::new();
    while out.len() < 5 {
        counts.push(stream.recv_many(&mut out, 2).await.unwrap());
    }
    assert!(counts.iter().all(|&n| (1..=2).contains(&n)), "{counts:?}");
    let starts: Vec<u64> = out.iter().map(|f| f.wal_start.0).collect();
    assert_eq!(starts, [0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn keepalive_asking_for_a_reply_is_answered_at_once() {
    let (stream, mut server) = start(HOUR);
    stream.confirm(Lsn(100));
    assert_eq!(server.read_status().await.flush, Lsn(100));

    server.send(&keepalive(100, true)).await;
    let reply = server.read_status().await;
    assert_eq!(
        (reply.write, reply.flush, reply.apply),
        (Lsn(100), Lsn(100), Lsn(100)),
        "caught up: the confirmed position"
    );
    assert!(!reply.reply_requested);

    // Behind: what was received is written, nothing said flushed (a walsender shutting down
    // then need not wait for the landing), and no slot moves.
    server.send(&keepalive(500, true)).await;
    let reply = server.read_status().await;
    assert_eq!(
        (reply.write, reply.flush, reply.apply),
        (Lsn(500), Lsn::ZERO, Lsn::ZERO)
    );
    assert_eq!(stream.server_wal_end(), Lsn(500));
    assert_eq!(stream.confirmed(), Lsn(100));

    server.send(&keepalive(600, false)).await;
    server.expect_silence().await;
    assert_eq!(
        stream.server_wal_end(),
        Lsn(600),
        "a keepalive without a request still moves the server's end"
    );
}

#[tokio::test]
async fn confirmed_position_never_moves_backward() {
    let (stream, mut server) = start(HOUR);
    stream.confirm(Lsn(200));
    assert_eq!(server.read_status().await.flush, Lsn(200));
    stream.confirm(Lsn(150));
    server.expect_silence().await;
    assert_eq!(stream.confirmed(), Lsn(200));
    stream.confirm(Lsn(300));
    assert_eq!(server.read_status().await.flush, Lsn(300));
    server.send(&keepalive(300, true)).await;
    assert_eq!(server.read_status().await.flush, Lsn(300));
}

#[tokio::test]
async fn status_updates_keep_flowing_while_the_consumer_is_stalled() {
    const FRAMES: u64 = 4000;
    let (mut stream, server) = start(Duration::from_millis(40));
    let Server {
        rx: mut server_reader,
        mut writer,
    } = server;
    // Far more than the queue and the pipe hold, so the server's writes must stall.
    let flood = tokio::spawn(async move {
        for i in 0..FRAMES {
            writer.write_all(&xlog(i, &[b'I'; 1000])).await.unwrap();
        }
        writer
    });

    let started = tokio::time::Instant::now();
    for _ in 0..3 {
        let update = server_reader.read_status().await;
        assert_eq!(update.flush, Lsn::ZERO, "nothing confirmed yet");
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    stream.confirm(Lsn(42));
    let mut update = server_reader.read_status().await;
    while update.flush != Lsn(42) {
        update = server_reader.read_status().await;
    }
    assert!(
        !flood.is_finished(),
        "the driver kept reading although nobody consumed"
    );

    let frames = recv_all(&mut stream, FRAMES as usize).await;
    assert!(
        frames
            .iter()
            .enumerate()
            .all(|(i, f)| f.wal_start == Lsn(i as u64)),
        "frames out of order"
    );
    timeout(PATIENCE, flood)
        .await
        .expect("server still blocked")
        .unwrap();
}

#[tokio::test]
async fn a_paused_stream_closes_when_the_server_stops_and_a_later_one_does_not() {
    let confirmer = super::Confirmer::default();
    let (mut stream, server) = start_with(HOUR, confirmer.clone());
    let Server {
        rx: ServerReader(mut server_reader),
        mut writer,
    } = server;
    // Far more than the queue and the pipe hold: the driver stops reading.
    let flood = tokio::spawn(async move {
        for i in 0..4000 {
            if writer.write_all(&xlog(i, &[b'I'; 1000])).await.is_err() {
                return i;
            }
        }
        4000
    });
    let started = tokio::time::Instant::now();
    while confirmer.paused_for().is_none() {
        assert!(started.elapsed() < PATIENCE, "the stream never paused");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!flood.is_finished());

    confirmer.server_stopping();
    // The connection is closed: the server's writes fail, it reads the end.
    let written = timeout(PATIENCE, flood)
        .await
        .expect("server still blocked")
        .unwrap();
    assert!(written < 4000, "every frame was written");
    let mut rest = Vec::new();
    assert_eq!(
        timeout(PATIENCE, server_reader.read_to_end(&mut rest))
            .await
            .unwrap()
            .unwrap(),
        0
    );
    // What was queued comes first, in order, then the end: no frame after a gap.
    let mut frames = Vec::new();
    let error = loop {
        match stream.recv_many(&mut frames, 1000).await {
            Ok(0) => panic!("a clean end"),
            Ok(_) => {}
            Err(error) => break error,
        }
    };
    assert!(matches!(error, ReplicationError::ServerStopping), "{error}");
    assert!(error.is_transient());
    assert!(!frames.is_empty() && (frames.len() as u64) < written);
    assert!(
        frames
            .iter()
            .enumerate()
            .all(|(i, f)| f.wal_start == Lsn(i as u64))
    );
    assert_eq!(confirmer.paused_for(), None);

    // A stream opened afterwards with the same confirmer reads on.
    let (mut stream, mut server) = start_with(HOUR, confirmer);
    server.send(&xlog(7, b"A")).await;
    let mut out = Vec::new();
    assert_eq!(stream.recv_many(&mut out, 10).await.unwrap(), 1);
    assert_eq!(out[0].wal_start, Lsn(7));
}

#[tokio::test]
async fn server_error_follows_the_frames_before_it() {
    let (mut stream, mut server) = start(HOUR);
    let mut wire = BytesMut::from(&xlog(1, b"B")[..]);
    wire.extend_from_slice(&error_response(
        "55000",
        "replication slot \"s\" was dropped",
    ));
    server.send(&wire).await;

    let mut out = Vec::new();
    assert_eq!(stream.recv_many(&mut out, 10).await.unwrap(), 1);
    let error = stream.recv_many(&mut out, 10).await.unwrap_err();
    assert_eq!(error.code(), Some("55000"));
    assert_eq!(
        error.to_string(),
        "server ended the replication stream with an error: replication slot \"s\" was dropped (SQLSTATE 55000)"
    );
}

#[tokio::test]
async fn a_closed_socket_is_an_error_not_an_end() {
    let (mut stream, server) = start(HOUR);
    drop(server);
    let error = stream.recv_many(&mut Vec::new(), 10).await.unwrap_err();
    assert!(matches!(error, ReplicationError::Closed { .. }), "{error}");
    assert!(error.is_transient());
}

#[tokio::test]
async fn garbage_from_the_server_is_a_typed_error() {
    let (mut stream, mut server) = start(HOUR);
    server.send(&message(b'd', b"zzz")).await;
    let error = stream.recv_many(&mut Vec::new(), 10).await.unwrap_err();
    assert!(matches!(error, ReplicationError::Frame(_)), "{error}");
}

#[tokio::test]
async fn shutdown_reports_then_says_goodbye() {
    let (stream, mut server) = start(HOUR);
    stream.confirm(Lsn(77));
    assert_eq!(server.read_status().await.flush, Lsn(77));
    // Data in flight when the client stops is discarded.
    server.send(&xlog(80, b"I")).await;

    let shutdown = tokio::spawn(stream.shutdown());
    assert_eq!(
        server.read_status().await.flush,
        Lsn(77),
        "final status update"
    );
    assert_eq!(server.read().await, (b'c', vec![]));
    let mut wire = BytesMut::from(&xlog(81, b"I")[..]);
    wire.extend_from_slice(&message(b'c', b""));
    wire.extend_from_slice(&end_of_command());
    server.send(&wire).await;
    assert_eq!(server.read().await.0, b'X');
    timeout(PATIENCE, shutdown).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_surfaces_a_server_error() {
    let (stream, mut server) = start(HOUR);
    let shutdown = tokio::spawn(stream.shutdown());
    server.read_status().await;
    assert_eq!(server.read().await.0, b'c');
    server
        .send(&error_response(
            "57P01",
            "terminating connection due to administrator command",
        ))
        .await;
    let error = timeout(PATIENCE, shutdown)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), Some("57P01"));
}
