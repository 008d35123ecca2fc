//! The trigger capture's frames: the journal read tick by tick ([`poll`](super::poll)), each
//! batch's transactions at the positions that follow the last, as pgoutput frames
//! ([`journal`](super::journal)); and, as the lake confirms positions, the journal rows of the
//! ticks that landed whole deleted ([`ticks`](super::ticks) decides which).

use std::collections::HashMap;

use tokio_postgres::Client;

use futures::TryStreamExt;
use tokio::sync::mpsc;

use super::journal::{self, Layout, Synthesizer};
use super::poll::{self, Tick};
use super::query;
use super::ticks::{self, TickRecord};
use crate::Lsn;
use crate::source::provision::ProvisionError;
use crate::source::quote::quote_ident;
use crate::stream::read::Frame;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01), which pgoutput counts from.
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// Take the lock that one reader of `schema`'s journal holds for as long as its session lasts
/// (a slot's one consumer, for the journal); `false` when another session holds it.
pub async fn hold(client: &Client, schema: &str) -> Result<bool, ProvisionError> {
    Ok(client
        .query_one(
            "SELECT pg_try_advisory_lock(hashtext('tributary.reader'), hashtext($1))",
            &[&schema],
        )
        .await
        .map_err(query(format!(
            "locking the journal of schema {schema:?} for this reader"
        )))?
        .get(0))
}

/// The session that holds `schema`'s reader lock (see [`hold`]), if one does.
pub async fn reader(
    client: &Client,
    schema: &str,
) -> Result<Option<crate::source::provision::SlotHolder>, ProvisionError> {
    let row = client
        .query_opt(
            "SELECT a.pid, a.application_name, host(a.client_addr) || ':' || a.client_port,
                    a.client_addr IS NULL
               FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                AND l.classid = (hashtext('tributary.reader')::bigint & 4294967295)::oid
                AND l.objid = (hashtext($1)::bigint & 4294967295)::oid
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[&schema],
        )
        .await
        .map_err(query(format!(
            "looking up the reader of the journal in schema {schema:?}"
        )))?;
    Ok(row.map(|r| crate::source::provision::SlotHolder {
        pid: r.get(0),
        application_name: r.get::<_, Option<String>>(1).filter(|n| !n.is_empty()),
        client: r.get(2),
        local: r.get(3),
    }))
}

/// The journal's rows and its size on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JournalSize {
    /// Rows not yet landed, or landed and not yet deleted: counted up to [`COUNTED_ROWS`],
    /// estimated beyond.
    pub rows: i64,
    /// Indexes and TOAST included.
    pub bytes: i64,
}

/// Up to this many rows the journal's rows are counted; beyond, their number is the
/// statistics' estimate of live rows (at least this many). A count reads every row, and it is
/// sampled every status interval: over a backlog of millions it would cost the source a
/// second a sample. The estimate trails the writers by up to the statistics' flush interval
/// (about ten seconds for a writer gone idle).
pub const COUNTED_ROWS: i64 = 10_000;

/// The size of `schema`'s journal, `None` when there is none.
pub async fn size(client: &Client, schema: &str) -> Result<Option<JournalSize>, ProvisionError> {
    let table = format!("{}.journal", quote_ident(schema));
    let row = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL, pg_total_relation_size(to_regclass($1)),
                    pg_stat_get_live_tuples(to_regclass($1))",
            &[&table],
        )
        .await
        .map_err(query(format!("looking up the journal {table}")))?;
    if !row.get::<_, bool>(0) {
        return Ok(None);
    }
    let counted: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT FROM {table} LIMIT {}) j",
                COUNTED_ROWS + 1
            ),
            &[],
        )
        .await
        .map_err(query(format!("counting the rows of the journal {table}")))?
        .get(0);
    let estimated = row.get::<_, Option<i64>>(2).unwrap_or(0);
    Ok(Some(JournalSize {
        rows: match counted > COUNTED_ROWS {
            true => counted.max(estimated),
            false => counted,
        },
        bytes: row.get::<_, Option<i64>>(1).unwrap_or(0),
    }))
}

/// The server's system identifier and timeline, as a role without `REPLICATION` can read them.
pub async fn identify(client: &Client) -> Result<(String, u32), ProvisionError> {
    let row = client
        .query_one(
            "SELECT s.system_identifier::text, c.timeline_id::bigint
               FROM pg_control_system() s, pg_control_checkpoint() c",
            &[],
        )
        .await
        .map_err(query("reading the server's system identifier and timeline"))?;
    Ok((row.get(0), row.get::<_, i64>(1) as u32))
}

/// The ticks recorded in `schema`, in order.
async fn recorded(client: &Client, schema: &str) -> Result<Vec<TickRecord>, ProvisionError> {
    let rows = client
        .query(
            &format!(
                "SELECT id, snapshot::text, (extract(epoch FROM taken) * 1000000)::bigint, first_position,
                        end_position, load
                   FROM {}.ticks ORDER BY id",
                quote_ident(schema)
            ),
            &[],
        )
        .await
        .map_err(query(format!("reading the ticks of schema {schema:?}")))?;
    Ok(rows
        .iter()
        .map(|r| TickRecord {
            id: r.get(0),
            snapshot: r.get(1),
            taken_us: r.get(2),
            first_position: r.get::<_, i64>(3) as u64,
            end_position: r.get::<_, Option<i64>>(4).map(|p| p as u64),
            load: r.get(5),
        })
        .collect())
}

/// The position a full load starting now takes when positions through `landed` are in the
/// lake (see [`ticks::load_position`]).
pub async fn load_position(
    client: &Client,
    schema: &str,
    landed: u64,
) -> Result<u64, ProvisionError> {
    Ok(ticks::load_position(
        &recorded(client, schema).await?,
        landed,
    ))
}

/// Ask for a load of every table at the next start (trigger capture loads only at a start:
/// the journal is read from one snapshot). `false`: one was asked for already, and a start
/// has not taken it yet.
pub async fn ask_load(client: &Client, schema: &str) -> Result<bool, ProvisionError> {
    let asked = client
        .execute(
            &format!(
                "UPDATE {}.identity SET load_due = true WHERE NOT load_due",
                quote_ident(schema)
            ),
            &[],
        )
        .await
        .map_err(query("asking for a load of every table at the next start"))?;
    Ok(asked > 0)
}

/// Whether a load of every table is due ([`ask_load`]).
pub async fn load_due(client: &Client, schema: &str) -> Result<bool, ProvisionError> {
    Ok(client
        .query_one(
            &format!("SELECT load_due FROM {}.identity", quote_ident(schema)),
            &[],
        )
        .await
        .map_err(query("reading whether a load of every table is due"))?
        .get(0))
}

/// Record `tick`, a full load's snapshot, as the tick the journal is read from, at the load's
/// `position`, replacing every tick recorded before (those of a load a crash cut short, and of
/// what was read after it): the load takes them in.
pub async fn record_load(
    client: &mut Client,
    schema: &str,
    tick: &Tick,
    position: u64,
) -> Result<(), ProvisionError> {
    let s = quote_ident(schema);
    let txn = client
        .transaction()
        .await
        .map_err(query("recording the full load's tick"))?;
    txn.execute(&format!("DELETE FROM {s}.ticks"), &[])
        .await
        .map_err(query("deleting the ticks a full load takes in"))?;
    txn.execute(
        &format!(
            "INSERT INTO {s}.ticks (snapshot, first_position, end_position, taken, load)
             VALUES ($1::text::pg_snapshot, $2, $3, to_timestamp($4::double precision / 1000000), true)"
        ),
        &[
            &tick.snapshot,
            &(position as i64),
            &(position as i64 + 1),
            &(tick.taken_us as f64),
        ],
    )
    .await
    .map_err(query("recording the full load's tick"))?;
    txn.execute(&format!("UPDATE {s}.identity SET load_due = false"), &[])
        .await
        .map_err(query("recording the full load's tick"))?;
    txn.commit()
        .await
        .map_err(query("recording the full load's tick"))
}

/// Frames handed on at once, at most, and their bytes: what a batch holds in memory here.
pub const HAND_FRAMES: usize = 4096;
pub const HAND_BYTES: usize = 4 << 20;

/// What a [`TriggerCapture::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// No transaction ended since the last tick.
    Nothing,
    /// A batch of this many transactions was handed on.
    Read { transactions: u64 },
    /// The receiver is gone; the batch was not handed on whole.
    Gone,
}

/// Frames gathered to be handed on.
#[derive(Default)]
struct Part {
    frames: Vec<Frame>,
    bytes: usize,
}

impl Part {
    fn push(&mut self, frame: Frame) {
        self.bytes += frame.data.len();
        self.frames.push(frame);
    }

    /// Count the bytes of the frames pushed since `before` frames.
    fn counted(&mut self, before: usize) {
        self.bytes += self.frames[before..]
            .iter()
            .map(|f| f.data.len())
            .sum::<usize>();
    }

    fn full(&self) -> bool {
        self.frames.len() >= HAND_FRAMES || self.bytes >= HAND_BYTES
    }

    fn take(&mut self) -> Vec<Frame> {
        self.bytes = 0;
        std::mem::take(&mut self.frames)
    }
}

/// Reads the journal of `schema` as frames, and deletes what landed.
pub struct TriggerCapture {
    client: Client,
    schema: String,
    synth: Synthesizer,
    layouts: HashMap<i32, Layout>,
    /// The recorded ticks not known to have landed whole, after the latest that did.
    ticks: Vec<TickRecord>,
    /// Recorded ticks to read again (after a start), in order.
    again: std::collections::VecDeque<TickRecord>,
    /// The lower bound of the next batch: the last tick read.
    previous: Option<Tick>,
    next_position: u64,
    /// The tick whose rows were deleted last.
    cleared: Option<i64>,
}

impl TriggerCapture {
    /// Resume reading `schema`'s journal when positions through `landed` (0: none) are in the
    /// lake: the rows of the ticks that landed whole are deleted first, and the ticks after
    /// them are read again.
    pub async fn open(
        client: Client,
        schema: &str,
        landed: u64,
    ) -> Result<TriggerCapture, ProvisionError> {
        let recorded = recorded(&client, schema).await?;
        let resume =
            ticks::resume(&recorded, landed).map_err(|e| ProvisionError::Journal(e.to_string()))?;
        let mut capture = TriggerCapture {
            client,
            schema: schema.to_owned(),
            synth: Synthesizer::default(),
            layouts: HashMap::new(),
            ticks: Vec::new(),
            again: resume.again.iter().cloned().collect(),
            previous: None,
            next_position: resume.next_position,
            cleared: None,
        };
        if let Some(landed) = resume.landed {
            capture.delete_through(&landed).await?;
            capture.cleared = Some(landed.id);
            capture.previous = Some(Tick {
                snapshot: landed.snapshot.clone(),
                taken_us: landed.taken_us,
            });
            capture.ticks.push(landed);
        }
        capture.ticks.extend(resume.again);
        Ok(capture)
    }

    /// Read the next batch: a tick recorded before (after a start), or a new one, recorded
    /// before its rows are read (an empty one is not recorded). Its frames go to `out` as the
    /// rows stream in, wrapped by `wrap`, in parts of at most [`HAND_FRAMES`] frames or
    /// [`HAND_BYTES`] bytes, so a batch of any size takes bounded memory; the position after
    /// its last transaction is recorded once every part was handed on.
    pub async fn poll<T>(
        &mut self,
        out: &mpsc::Sender<T>,
        wrap: impl Fn(Vec<Frame>) -> T,
    ) -> Result<Polled, ProvisionError> {
        let (tick, first_position, id) = match self.again.pop_front() {
            Some(t) => (
                Tick {
                    snapshot: t.snapshot,
                    taken_us: t.taken_us,
                },
                t.first_position,
                t.id,
            ),
            None => {
                let tick = poll::take_tick(&self.client).await?;
                if !poll::any_between(&self.client, &self.schema, self.previous.as_ref(), &tick)
                    .await?
                {
                    // Nothing became visible: the next batch may start here without a record,
                    // since no transaction lies between.
                    self.previous = Some(tick);
                    return Ok(Polled::Nothing);
                }
                let first_position = self.next_position;
                let id = self.record(&tick, first_position).await?;
                crate::failpoint::reached("journal.after-tick").await;
                (tick, first_position, id)
            }
        };
        let known: Vec<i32> = self.layouts.keys().copied().collect();
        let found = poll::read_layouts_except(&self.client, &self.schema, &known).await?;
        self.layouts.extend(found);

        let pg_time = tick.taken_us - PG_EPOCH_US;
        let rows =
            poll::batch_rows(&self.client, &self.schema, self.previous.as_ref(), &tick).await?;
        futures::pin_mut!(rows);
        let mut part = Part::default();
        let mut position = first_position;
        let mut current = None;
        while let Some(row) = rows
            .try_next()
            .await
            .map_err(query("reading the journal's batch"))?
        {
            let (xid, row) = poll::journal_row(&row)?;
            if current != Some(xid) {
                if current.is_some() {
                    part.push(journal::commit(Lsn(position), pg_time));
                    position += 1;
                }
                current = Some(xid);
                part.push(journal::begin(xid, Lsn(position), pg_time));
            }
            let before = part.frames.len();
            self.synth
                .row(&row, Lsn(position), &self.layouts, &mut part.frames)
                .map_err(|e| ProvisionError::Journal(e.to_string()))?;
            part.counted(before);
            if part.full() && out.send(wrap(part.take())).await.is_err() {
                return Ok(Polled::Gone);
            }
        }
        if current.is_some() {
            part.push(journal::commit(Lsn(position), pg_time));
            position += 1;
        }
        if !part.frames.is_empty() && out.send(wrap(part.take())).await.is_err() {
            return Ok(Polled::Gone);
        }
        let end_position = position;
        if let Some(read) = self.ticks.iter_mut().find(|t| t.id == id)
            && read.end_position.is_none()
        {
            self.client
                .execute(
                    &format!(
                        "UPDATE {}.ticks SET end_position = $2 WHERE id = $1",
                        quote_ident(&self.schema)
                    ),
                    &[&id, &(end_position as i64)],
                )
                .await
                .map_err(query("recording where a tick ends"))?;
            read.end_position = Some(end_position);
        }
        self.next_position = self.next_position.max(end_position);
        self.previous = Some(tick);
        Ok(Polled::Read {
            transactions: end_position - first_position,
        })
    }

    /// Record `tick`, whose first transaction takes `first_position`; returns its id.
    async fn record(&mut self, tick: &Tick, first_position: u64) -> Result<i64, ProvisionError> {
        let id: i64 = self
            .client
            .query_one(
                &format!(
                    "INSERT INTO {}.ticks (snapshot, first_position, taken)
                     VALUES ($1::text::pg_snapshot, $2, to_timestamp($3::double precision / 1000000))
                     RETURNING id",
                    quote_ident(&self.schema)
                ),
                &[
                    &tick.snapshot,
                    &(first_position as i64),
                    &(tick.taken_us as f64),
                ],
            )
            .await
            .map_err(query("recording a tick"))?
            .get(0);
        self.ticks.push(TickRecord {
            id,
            snapshot: tick.snapshot.clone(),
            taken_us: tick.taken_us,
            first_position,
            end_position: None,
            load: false,
        });
        Ok(id)
    }

    /// Positions through `landed` are durable in the lake: delete the journal rows of the
    /// ticks that landed whole. Returns how many rows went.
    pub async fn confirm(&mut self, landed: u64) -> Result<u64, ProvisionError> {
        let Some(whole) = ticks::landed_whole(&self.ticks, landed) else {
            return Ok(0);
        };
        let tick = self.ticks[whole].clone();
        if self.cleared == Some(tick.id) {
            return Ok(0);
        }
        let deleted = self.delete_through(&tick).await?;
        self.cleared = Some(tick.id);
        self.ticks.drain(..whole);
        Ok(deleted)
    }

    /// Delete the journal rows visible in `tick`, and the ticks before it.
    async fn delete_through(&self, tick: &TickRecord) -> Result<u64, ProvisionError> {
        let s = quote_ident(&self.schema);
        let deleted = self
            .client
            .execute(
                &format!(
                    "DELETE FROM {s}.journal WHERE pg_visible_in_snapshot(xid, $1::text::pg_snapshot)"
                ),
                &[&tick.snapshot],
            )
            .await
            .map_err(query("deleting the journal rows that landed"))?;
        self.client
            .execute(&format!("DELETE FROM {s}.ticks WHERE id < $1"), &[&tick.id])
            .await
            .map_err(query("deleting the ticks that landed"))?;
        Ok(deleted)
    }

    /// The position the next new transaction takes.
    pub fn next_position(&self) -> u64 {
        self.next_position
    }
}
