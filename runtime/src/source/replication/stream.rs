//! The streaming half: a driver task that owns the socket, and the handle the pipeline reads
//! frames from and confirms positions through.
//!
//! The driver answers the server on its own. A keepalive that asks for a reply is answered at
//! once, and a status update goes out every `status_interval` and right after the confirmed
//! position moves, whatever the consumer is doing. Backpressure works by not reading the socket
//! while the queue to the consumer is full; the timer and the confirm signal stay live meanwhile,
//! so a slow consumer never makes the server hit `wal_sender_timeout`.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use futures::FutureExt as _;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::XLogData;
use super::conn::{BoxTransport, log_notice};
use super::error::{ReplicationError, ServerError};
use super::frame::{
    Backend, ServerFrame, StatusUpdate, decode_server_frame, encode_status_update, parse_backend,
};
use super::pace::{Pace, set_low_water};
use crate::Lsn;

/// Reads are at least this large, so that a busy walsender can batch its sends.
const READ_CHUNK: usize = 256 * 1024;
/// Queued reads (each a batch of frames) before the driver stops reading the socket.
const QUEUE_BATCHES: usize = 16;
/// How long `shutdown` waits for the server to end the stream after the client's CopyDone.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

struct Shared {
    confirm: Arc<ConfirmCell>,
    server_wal_end: AtomicU64,
    /// The WAL position of the latest keepalive that came after every frame before it had been
    /// queued for the consumer: once the consumer has taken and handled every queued frame,
    /// the server has sent it everything before this position.
    keepalive_wal_end: AtomicU64,
    /// The WAL position of the latest keepalive that asked for a reply.
    reply_wanted: AtomicU64,
    /// Why the driver stopped, when it stopped on an error; read once by the consumer.
    failure: Mutex<Option<ReplicationError>>,
}

/// A running logical replication stream.
///
/// Frames arrive in WAL order through [`recv_many`](Self::recv_many). Call
/// [`confirm`](Self::confirm) when everything up to a position is durable downstream; the server
/// then may recycle WAL before it and a restart resumes after it. Nothing is reported as flushed
/// until the first `confirm`. End with [`shutdown`](Self::shutdown); dropping the stream closes
/// the socket without a goodbye, which is safe (unconfirmed changes are replayed) but abrupt.
pub struct ReplicationStream {
    frames: mpsc::Receiver<Vec<XLogData>>,
    leftover: std::vec::IntoIter<XLogData>,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    driver: Option<JoinHandle<()>>,
    ended: bool,
}

impl ReplicationStream {
    /// Hands `io` (already in CopyBoth mode) to a driver task. `buf` holds bytes read past the
    /// CopyBothResponse.
    /// `confirmer` carries the confirmed position over from an earlier stream of the same
    /// consumer (a new one starts at zero). `socket` is the TCP socket under `io` when its reads
    /// are to be paced.
    pub(crate) fn spawn(
        io: BoxTransport,
        buf: BytesMut,
        status_interval: Duration,
        confirmer: Confirmer,
        socket: Option<RawFd>,
    ) -> Self {
        let stopping = confirmer.cell.stopping.subscribe();
        let shared = Arc::new(Shared {
            confirm: confirmer.cell,
            server_wal_end: AtomicU64::new(0),
            keepalive_wal_end: AtomicU64::new(0),
            reply_wanted: AtomicU64::new(0),
            failure: Mutex::new(None),
        });
        let (frames_tx, frames) = mpsc::channel(QUEUE_BATCHES);
        let (stop, stop_rx) = oneshot::channel();
        let driver = Driver {
            io,
            buf,
            out: BytesMut::with_capacity(64),
            shared: shared.clone(),
            frames: frames_tx,
            // A zero period would spin; nothing useful is faster than a millisecond.
            status_interval: status_interval.max(Duration::from_millis(1)),
            last_reported: None,
            pace: socket.map(|fd| (fd, Pace::new(Instant::now()))),
            stopping,
        };
        let driver = tokio::spawn(driver.run(stop_rx));
        ReplicationStream {
            frames,
            leftover: Vec::new().into_iter(),
            shared,
            stop: Some(stop),
            driver: Some(driver),
            ended: false,
        }
    }

    /// Appends up to `limit` frames (at least one) to `out`, waiting for the first. Returns 0
    /// once the stream has ended cleanly (the server finished it); an error if the server sent an
    /// error or the socket failed. Frames that arrived before an error are delivered first.
    pub async fn recv_many(
        &mut self,
        out: &mut Vec<XLogData>,
        limit: usize,
    ) -> Result<usize, ReplicationError> {
        let limit = limit.max(1);
        let mut taken = self.take_leftover(out, limit);
        if taken == 0 {
            if self.ended {
                return Ok(0);
            }
            match self.frames.recv().await {
                Some(batch) => {
                    self.leftover = batch.into_iter();
                    taken = self.take_leftover(out, limit);
                }
                None => {
                    self.ended = true;
                    return match self.take_failure() {
                        Some(error) => Err(error),
                        None => Ok(0),
                    };
                }
            }
        }
        // Top up with whatever is already queued, without waiting.
        while taken < limit {
            match self.frames.try_recv() {
                Ok(batch) => {
                    self.leftover = batch.into_iter();
                    taken += self.take_leftover(out, limit - taken);
                }
                Err(_) => break,
            }
        }
        Ok(taken)
    }

    fn take_leftover(&mut self, out: &mut Vec<XLogData>, limit: usize) -> usize {
        let before = out.len();
        out.extend(self.leftover.by_ref().take(limit));
        out.len() - before
    }

    fn take_failure(&self) -> Option<ReplicationError> {
        self.shared
            .failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    /// Everything up to `lsn` is durable downstream: report it as written, flushed and applied.
    /// The position never moves backward: a smaller `lsn` than already confirmed is ignored.
    pub fn confirm(&self, lsn: Lsn) {
        self.shared.confirm.confirm(lsn);
    }

    /// A handle that confirms positions from another task while this one reads frames; it
    /// outlives the stream, and a stream reopened with it goes on from where it stood.
    pub fn confirmer(&self) -> Confirmer {
        Confirmer {
            cell: self.shared.confirm.clone(),
        }
    }

    /// The highest position passed to [`confirm`](Self::confirm).
    pub fn confirmed(&self) -> Lsn {
        self.shared.confirm.confirmed()
    }

    /// How far the server has sent WAL, as its latest keepalive or frame said (zero before the
    /// first). Monotonic; while idle it advances only with keepalives, so it may trail
    /// `pg_current_wal_lsn()` by up to half of `wal_sender_timeout`.
    pub fn server_wal_end(&self) -> Lsn {
        Lsn(self.shared.server_wal_end.load(Ordering::Acquire))
    }

    /// The server's position when the consumer has taken every frame: everything the server
    /// decoded before it has been received (`None` while frames wait). A consumer that has also
    /// handled and landed all of them may confirm it, so that a slot whose tables are idle does
    /// not hold WAL that other databases write.
    pub fn idle_position(&self) -> Option<Lsn> {
        // Read the position first: the frames queued before the keepalive that set it are then
        // visible in the queue.
        let position = Lsn(self.shared.keepalive_wal_end.load(Ordering::Acquire));
        (self.leftover.len() == 0 && self.frames.is_empty() && position > Lsn::ZERO)
            .then_some(position)
    }

    /// The WAL position of the latest keepalive that asked for a reply (zero before the first).
    /// The server asks when it has heard nothing for half of `wal_sender_timeout`, and, when it
    /// shuts down, again and again until the confirmed position reaches everything it sent: a
    /// logical walsender exits (and the shutdown finishes) only then.
    pub fn reply_wanted(&self) -> Lsn {
        Lsn(self.shared.reply_wanted.load(Ordering::Acquire))
    }

    /// Sends a last status update with the confirmed position, ends the stream with CopyDone,
    /// waits briefly for the server to finish, and closes the connection. Frames not yet
    /// received are discarded (they were not confirmed, so the server replays them next time).
    pub async fn shutdown(self) -> Result<(), ReplicationError> {
        let ReplicationStream {
            frames,
            shared,
            stop,
            driver,
            ..
        } = self;
        // A driver blocked on handing over a final batch must not wait for us.
        drop(frames);
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        if let Some(driver) = driver {
            driver.await.map_err(|e| {
                ReplicationError::Other(format!("replication driver task failed: {e}"))
            })?;
        }
        let failure = shared
            .failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        match failure {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// The confirmed position of one consumer, shared by its successive streams.
struct ConfirmCell {
    confirmed: AtomicU64,
    /// Wakes the driver of the current stream to report a new position.
    changed: Notify,
    /// When the current stream's driver began to hold a batch the consumer had no room for
    /// (and so stopped reading the socket), and when it last read on after that.
    pause: Mutex<Pause>,
    /// Raised by [`Confirmer::server_stopping`]: a driver started before the raise closes its
    /// connection.
    stopping: tokio::sync::watch::Sender<u64>,
}

impl Default for ConfirmCell {
    fn default() -> Self {
        ConfirmCell {
            confirmed: AtomicU64::new(0),
            changed: Notify::new(),
            pause: Mutex::new(Pause::default()),
            stopping: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl ConfirmCell {
    fn confirm(&self, lsn: Lsn) {
        let previous = self.confirmed.fetch_max(lsn.0, Ordering::AcqRel);
        if lsn.0 > previous {
            self.changed.notify_one();
        }
    }

    fn confirmed(&self) -> Lsn {
        Lsn(self.confirmed.load(Ordering::Acquire))
    }
}

/// When a stream stopped reading for want of room in the consumer, and when it read on.
#[derive(Default, Clone, Copy)]
struct Pause {
    since: Option<std::time::Instant>,
    ended: Option<std::time::Instant>,
}

/// Confirms positions of a [`ReplicationStream`] from another task (the stage that commits),
/// with the same rules as [`ReplicationStream::confirm`]. It is not tied to one connection:
/// after a reconnect, the new stream (started with this confirmer) reports what it holds.
#[derive(Clone, Default)]
pub struct Confirmer {
    cell: Arc<ConfirmCell>,
}

impl Confirmer {
    pub fn confirm(&self, lsn: Lsn) {
        self.cell.confirm(lsn);
    }

    pub fn confirmed(&self) -> Lsn {
        self.cell.confirmed()
    }

    /// How long the current stream has not read the socket because the consumer had no room
    /// for what it read; `None` while it reads.
    pub fn paused_for(&self) -> Option<Duration> {
        self.pause().since.map(|since| since.elapsed())
    }

    /// How long the stream has read since it was last paused: zero while it is, `None` when
    /// it never was. A consumer that is behind keeps the stream paused but for moments.
    pub fn reading_for(&self) -> Option<Duration> {
        let pause = self.pause();
        match (pause.since, pause.ended) {
            (Some(_), _) => Some(Duration::ZERO),
            (None, ended) => ended.map(|ended| ended.elapsed()),
        }
    }

    fn pause(&self) -> Pause {
        *self
            .cell
            .pause
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The server is shutting down: the current stream closes its connection at once and
    /// ends with [`ReplicationError::ServerStopping`], whatever it had not handed over is
    /// dropped (it was not confirmed, so the slot sends it again). A walsender sends all it
    /// has before it exits, and the server's stop waits for it; while the consumer is paused
    /// nothing is read, so only closing lets the server stop. Streams opened afterwards are
    /// not affected.
    pub fn server_stopping(&self) {
        self.cell.stopping.send_modify(|raised| *raised += 1);
    }
}

/// What parsing the buffered bytes found.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    More,
    ServerDone,
    ServerError(Box<ServerError>),
}

enum Event {
    Stop {
        requested: bool,
    },
    Confirmed,
    Tick,
    ConsumerGone,
    Read(std::io::Result<usize>),
    /// A busy stream did not fill a chunk in time.
    Slowed,
    /// [`Confirmer::server_stopping`] was called.
    ServerStopping,
}

struct Driver {
    io: BoxTransport,
    buf: BytesMut,
    out: BytesMut,
    shared: Arc<Shared>,
    frames: mpsc::Sender<Vec<XLogData>>,
    status_interval: Duration,
    last_reported: Option<Lsn>,
    /// The socket and its read pacing (TLS streams only, see `pace`).
    pace: Option<(RawFd, Pace)>,
    /// Changes when [`Confirmer::server_stopping`] is called.
    stopping: tokio::sync::watch::Receiver<u64>,
}

impl Driver {
    async fn run(mut self, stop: oneshot::Receiver<()>) {
        let ended = self.stream(stop).await;
        self.paused(false);
        if let Err(error) = ended {
            tracing::debug!(%error, "replication driver stopped");
            *self
                .shared
                .failure
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(error);
        }
        // Dropping `self` here closes the frame queue after the failure is recorded.
    }

    async fn stream(&mut self, mut stop: oneshot::Receiver<()>) -> Result<(), ReplicationError> {
        let mut ticker =
            tokio::time::interval_at(Instant::now() + self.status_interval, self.status_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut pending: Option<Vec<XLogData>> = None;
        let mut batch = Vec::new();
        let mut flow = self.parse_buffered(&mut batch).await?;

        loop {
            if !batch.is_empty() {
                match self.frames.try_send(std::mem::take(&mut batch)) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(full)) => {
                        pending = Some(full);
                        self.paused(true);
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return Ok(()),
                }
            }
            match std::mem::replace(&mut flow, Flow::More) {
                Flow::More => {}
                Flow::ServerDone => return self.server_done(pending.take()).await,
                Flow::ServerError(error) => {
                    // The frames before the error are still good: hand them over first.
                    if let Some(batch) = pending.take() {
                        let _ = self.frames.send(batch).await;
                    }
                    return Err(ReplicationError::Stream(error));
                }
            }
            self.reserve();
            let slowed_at = self.pace.as_ref().and_then(|(_, pace)| pace.deadline());
            let event = tokio::select! {
                biased;
                request = &mut stop => Event::Stop { requested: request.is_ok() },
                Ok(()) = self.stopping.changed() => Event::ServerStopping,
                () = self.shared.confirm.changed.notified() => Event::Confirmed,
                _ = ticker.tick() => Event::Tick,
                permit = self.frames.reserve(), if pending.is_some() => match permit {
                    Ok(permit) => {
                        permit.send(pending.take().unwrap_or_default());
                        self.paused(false);
                        // Time spent held back by the consumer is not the stream slowing.
                        if let Some((_, pace)) = &mut self.pace {
                            pace.resumed(Instant::now());
                        }
                        continue;
                    }
                    Err(_) => Event::ConsumerGone,
                },
                read = self.io.read_buf(&mut self.buf), if pending.is_none() => Event::Read(read),
                () = tokio::time::sleep_until(slowed_at.unwrap_or_else(Instant::now)),
                    if pending.is_none() && slowed_at.is_some() => Event::Slowed,
            };
            match event {
                // A dropped handle means nobody is listening: just close.
                Event::Stop { requested: true } => return self.finish().await,
                Event::Stop { requested: false } | Event::ConsumerGone => return Ok(()),
                // Dropping the socket (with `self`) lets the walsender exit.
                Event::ServerStopping => return Err(ReplicationError::ServerStopping),
                Event::Confirmed => self.report(false).await?,
                Event::Tick => self.report(true).await?,
                Event::Read(read) => {
                    let read = read?;
                    if read == 0 {
                        return Err(ReplicationError::Closed {
                            during: "streaming",
                        });
                    }
                    let read = read + self.read_ready()?;
                    self.paced(|pace, now| pace.read(read, now));
                    flow = self.parse_buffered(&mut batch).await?;
                }
                Event::Slowed => self.paced(|pace, now| Some(pace.expired(now))),
            }
        }
    }

    /// Records whether the driver holds a batch the consumer has no room for.
    fn paused(&self, paused: bool) {
        let mut pause = self
            .shared
            .confirm
            .pause
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match (paused, pause.since) {
            (true, None) => pause.since = Some(std::time::Instant::now()),
            (false, Some(_)) => {
                pause.since = None;
                pause.ended = Some(std::time::Instant::now());
            }
            _ => {}
        }
    }

    fn reserve(&mut self) {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
    }

    /// Reads on while bytes are ready without waiting, so that one wake-up makes one batch for
    /// the consumer (a TLS stream yields a record or two per read). An end of stream shows on
    /// the next read.
    fn read_ready(&mut self) -> std::io::Result<usize> {
        let mut total = 0;
        while self.buf.len() < READ_CHUNK {
            self.reserve();
            match self.io.read_buf(&mut self.buf).now_or_never() {
                None | Some(Ok(0)) => break,
                Some(Ok(read)) => total += read,
                Some(Err(error)) => return Err(error),
            }
        }
        Ok(total)
    }

    /// Moves the pacing on and sets the socket's low-water mark when it changes. A socket that
    /// refuses the mark is read unpaced from then on, which is only slower.
    fn paced(&mut self, step: impl FnOnce(&mut Pace, Instant) -> Option<usize>) {
        let Some((fd, pace)) = &mut self.pace else {
            return;
        };
        let Some(mark) = step(pace, Instant::now()) else {
            return;
        };
        tracing::debug!(
            "the stream is {}: the socket wakes the reader at {mark} bytes",
            if mark > 1 { "busy" } else { "slow" }
        );
        if let Err(error) = set_low_water(*fd, mark) {
            tracing::debug!(%error, "the socket refused a receive low-water mark; reading unpaced");
            if mark > 1 {
                let _ = set_low_water(*fd, 1);
            }
            self.pace = None;
        }
    }

    /// Parses every complete message in the buffer: frames go to `batch`, keepalives that ask
    /// for it are answered before anything else is read.
    async fn parse_buffered(
        &mut self,
        batch: &mut Vec<XLogData>,
    ) -> Result<Flow, ReplicationError> {
        loop {
            let Some(message) = parse_backend(&mut self.buf)? else {
                return Ok(Flow::More);
            };
            match message {
                Backend::Message(Message::CopyData(body)) => {
                    match decode_server_frame(body.into_bytes())? {
                        ServerFrame::XLogData(frame) => {
                            self.shared
                                .server_wal_end
                                .fetch_max(frame.wal_end.0, Ordering::AcqRel);
                            batch.push(frame)
                        }
                        ServerFrame::Keepalive(keepalive) => {
                            self.shared
                                .server_wal_end
                                .fetch_max(keepalive.wal_end.0, Ordering::AcqRel);
                            // Only once every frame before it is queued (parsing is only
                            // entered with nothing pending).
                            if batch.is_empty() {
                                self.shared
                                    .keepalive_wal_end
                                    .fetch_max(keepalive.wal_end.0, Ordering::AcqRel);
                            }
                            if keepalive.reply_requested {
                                self.shared
                                    .reply_wanted
                                    .fetch_max(keepalive.wal_end.0, Ordering::AcqRel);
                                self.answer(keepalive.wal_end).await?;
                            }
                        }
                    }
                }
                Backend::Message(Message::CopyDone) => return Ok(Flow::ServerDone),
                // A server shutting down (`pg_ctl stop -m fast`) ends the command without
                // ending the copy first.
                Backend::Message(Message::CommandComplete(_)) => {
                    return Err(ReplicationError::ServerEnded);
                }
                Backend::Message(Message::ErrorResponse(body)) => {
                    return Ok(Flow::ServerError(ServerError::from_error_body(&body)));
                }
                Backend::Message(Message::NoticeResponse(body)) => log_notice(&body),
                Backend::Message(Message::ParameterStatus(_)) => {}
                other => {
                    return Err(ReplicationError::Protocol(format!(
                        "unexpected {} message while streaming",
                        other.name()
                    )));
                }
            }
        }
    }

    /// Answers a keepalive that asked for a reply, which follows every frame up to `wal_end`.
    /// When the confirmed position has reached it, that is the answer. Behind it, the answer
    /// is what was received: written up to `wal_end`, flushed and applied not said (the
    /// invalid position, which moves no slot). A walsender that is shutting down asks again
    /// and again and exits only when its client has everything it sent, judged by the flush
    /// position or, when the client gives none, by the written one; with the confirmed
    /// position, a fast stop of the server would wait until the pipeline had landed every
    /// change it was behind by. What is not landed stays in the slot and comes again.
    async fn answer(&mut self, wal_end: Lsn) -> Result<(), ReplicationError> {
        let confirmed = self.shared.confirm.confirmed();
        if confirmed >= wal_end {
            return self.report(true).await;
        }
        self.send_status(wal_end, Lsn::ZERO).await?;
        tracing::trace!(%wal_end, %confirmed, "answered a keepalive with what was received");
        Ok(())
    }

    /// Sends a standby status update: write = flush = apply = the confirmed position.
    async fn report(&mut self, always: bool) -> Result<(), ReplicationError> {
        let confirmed = self.shared.confirm.confirmed();
        if !always && self.last_reported == Some(confirmed) {
            return Ok(());
        }
        self.send_status(confirmed, confirmed).await?;
        self.last_reported = Some(confirmed);
        tracing::trace!(%confirmed, "sent standby status update");
        Ok(())
    }

    /// Sends a standby status update: `write`, and `flush` = apply.
    async fn send_status(&mut self, write: Lsn, flush: Lsn) -> Result<(), ReplicationError> {
        let update = StatusUpdate {
            write,
            flush,
            apply: flush,
            client_time: super::frame::pg_timestamp(SystemTime::now()),
            reply_requested: false,
        };
        self.out.clear();
        encode_status_update(&update, &mut self.out);
        self.io.write_all(&self.out).await?;
        self.io.flush().await?;
        Ok(())
    }

    /// The server ended the stream: answer its CopyDone, let it finish the command, then hand
    /// the consumer what is left before it sees the end.
    async fn server_done(
        &mut self,
        pending: Option<Vec<XLogData>>,
    ) -> Result<(), ReplicationError> {
        self.out.clear();
        frontend::copy_done(&mut self.out);
        self.io.write_all(&self.out).await?;
        self.io.flush().await?;
        self.wait_until_ready(true).await?;
        self.terminate().await;
        if let Some(batch) = pending {
            // The receiver may be gone (shutdown in progress); then there is nobody to tell.
            let _ = self.frames.send(batch).await;
        }
        Ok(())
    }

    /// The consumer asked to stop: last status update, CopyDone, wait for the server to finish.
    async fn finish(&mut self) -> Result<(), ReplicationError> {
        self.report(true).await?;
        self.out.clear();
        frontend::copy_done(&mut self.out);
        self.io.write_all(&self.out).await?;
        self.io.flush().await?;
        let waited = tokio::time::timeout(SHUTDOWN_WAIT, self.wait_until_ready(false)).await;
        self.terminate().await;
        match waited {
            Ok(result) => result,
            Err(_) => Err(ReplicationError::ShutdownTimedOut {
                waited: SHUTDOWN_WAIT,
            }),
        }
    }

    /// Reads until ReadyForQuery, discarding stream data still in flight. `server_sent_copy_done`
    /// says whether the server's CopyDone has been seen already.
    async fn wait_until_ready(
        &mut self,
        mut server_sent_copy_done: bool,
    ) -> Result<(), ReplicationError> {
        // The last messages are small: a raised mark would leave them unread.
        if let Some((fd, _)) = self.pace.take() {
            let _ = set_low_water(fd, 1);
        }
        loop {
            while let Some(message) = parse_backend(&mut self.buf)? {
                match message {
                    Backend::Message(Message::ReadyForQuery(_)) => return Ok(()),
                    Backend::Message(Message::CopyDone) => server_sent_copy_done = true,
                    Backend::Message(Message::ErrorResponse(body)) => {
                        return Err(ReplicationError::Stream(ServerError::from_error_body(
                            &body,
                        )));
                    }
                    Backend::Message(Message::NoticeResponse(body)) => log_notice(&body),
                    Backend::Message(
                        Message::CopyData(_)
                        | Message::CommandComplete(_)
                        | Message::ParameterStatus(_),
                    ) => {}
                    Backend::Message(_) | Backend::CopyBothResponse => {
                        return Err(ReplicationError::Protocol(
                            "unexpected message while ending the stream".into(),
                        ));
                    }
                }
            }
            self.reserve();
            if self.io.read_buf(&mut self.buf).await? == 0 {
                // Closing after both sides sent CopyDone is an ending, if not a polite one.
                return if server_sent_copy_done {
                    Ok(())
                } else {
                    Err(ReplicationError::Closed {
                        during: "ending the stream",
                    })
                };
            }
        }
    }

    async fn terminate(&mut self) {
        self.out.clear();
        frontend::terminate(&mut self.out);
        // The conversation is over either way; a failed goodbye changes nothing.
        let _ = self.io.write_all(&self.out).await;
        let _ = self.io.shutdown().await;
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
