//! The chaos test's workload on three tables: a writer per table (inserts, updates, deletes, a
//! key change, rolled-back transactions and savepoints), a pool of connections running small
//! transactions across tables at once, one TRUNCATE and one large transaction.
//!
//! The source is the truth: a transaction whose outcome is unknown (the server went away
//! before it answered) is simply whatever the source holds at the end. No writer keeps a model
//! of the data beyond the ids it believes exist, which only steer its updates and deletes
//! towards real rows. Every task draws from a generator of its own, forked from the seed, so
//! the kinds and sizes of the transactions each task runs depend on the seed alone; the ids
//! they touch also depend on how the tasks interleave.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tributary_tests::chaos::{Rng, try_connect};

/// The tables, with their key columns.
pub const TABLES: [(&str, &str); 3] = [
    ("public.accounts", "id"),
    ("public.orders", "id"),
    ("public.events", "id"),
];

/// Every column type the lake and the source are compared on: integers, numeric, text,
/// boolean, timestamptz; `orders` logs whole old rows.
pub const SCHEMA: &str = "
CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(14,2) NOT NULL,
    active boolean NOT NULL, updated timestamptz NOT NULL DEFAULT now(), version integer NOT NULL DEFAULT 0);
CREATE TABLE orders (id bigint PRIMARY KEY, account bigint NOT NULL, amount numeric(12,2) NOT NULL,
    status text NOT NULL, note text);
ALTER TABLE orders REPLICA IDENTITY FULL;
CREATE TABLE events (id bigint PRIMARY KEY, kind text NOT NULL, body text,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
";

/// Ids at and above this are the large transactions' and the markers', below it the writers'.
const RESERVED_IDS: i64 = 1 << 40;

/// The id of the `n`-th marker row of `events` (a test's own writes, outside the workload's).
pub fn marker_id(n: u64) -> i64 {
    RESERVED_IDS + n as i64
}

/// What one task did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Transactions that ran to their end (the deliberately rolled-back ones included).
    pub ended: u64,
    /// Transactions that failed or whose outcome is unknown (the source decides).
    pub failed: u64,
}

/// Id counters shared by the tasks.
#[derive(Default)]
struct Ids {
    accounts: AtomicI64,
    orders: AtomicI64,
    events: AtomicI64,
    /// Bumped by the TRUNCATE of `orders`, so the orders writer forgets the ids it knew.
    orders_epoch: AtomicU64,
}

impl Ids {
    fn next(counter: &AtomicI64) -> i64 {
        counter.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// One transaction's statements, and what it does to the ids its writer believes exist.
#[derive(Default)]
struct Transaction {
    sql: String,
    inserted: Vec<i64>,
    deleted: Vec<i64>,
}

impl Transaction {
    fn push(&mut self, statement: String) {
        self.sql.push_str(&statement);
        self.sql.push_str(";\n");
    }

    fn delete(&mut self, table: &str, ids: Vec<i64>) {
        for id in ids {
            self.push(format!("DELETE FROM {table} WHERE id = {id}"));
            self.deleted.push(id);
        }
    }

    /// Wrapped in `BEGIN` and `COMMIT` (or `ROLLBACK`), as one simple query.
    fn finish(mut self, commit: bool) -> Transaction {
        let end = if commit { "COMMIT" } else { "ROLLBACK" };
        self.sql = format!("BEGIN;\n{}{end};", self.sql);
        if !commit {
            self.inserted.clear();
            self.deleted.clear();
        }
        self
    }
}

/// The running workload.
pub struct Workload {
    url: String,
    stop: Arc<AtomicBool>,
    ids: Arc<Ids>,
    rng: Rng,
    tasks: Vec<(String, JoinHandle<Tally>)>,
    /// What the one-off statements did.
    done: Vec<(String, Tally)>,
    big: u64,
}

impl Workload {
    /// Start the writers and the pool of `pool` connections on the source at `url` (the tables
    /// exist).
    pub fn start(url: &str, rng: &mut Rng, pool: usize) -> Workload {
        let mut workload = Workload {
            url: url.to_owned(),
            stop: Arc::new(AtomicBool::new(false)),
            ids: Arc::new(Ids::default()),
            rng: rng.fork(),
            tasks: Vec::new(),
            done: Vec::new(),
            big: 0,
        };
        workload.spawn_writer("accounts writer", (20, 80), accounts);
        workload.spawn_writer("orders writer", (20, 80), orders);
        workload.spawn_writer("events writer", (20, 80), events);
        for n in 0..pool {
            workload.spawn_writer(&format!("pool connection {n}"), (20, 100), transfer);
        }
        workload
    }

    fn spawn_writer(
        &mut self,
        name: &str,
        pause_ms: (u64, u64),
        next: fn(&mut Rng, &Ids, &mut Known) -> Transaction,
    ) {
        let (url, stop, ids, mut rng) = (
            self.url.clone(),
            self.stop.clone(),
            self.ids.clone(),
            self.rng.fork(),
        );
        let task = tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut known = Known::default();
            let mut client = None;
            while !stop.load(Ordering::Relaxed) {
                let Some(sql) = connected(&mut client, &url, &stop).await else {
                    break;
                };
                if known.epoch != ids.orders_epoch.load(Ordering::Relaxed) {
                    known = Known {
                        epoch: ids.orders_epoch.load(Ordering::Relaxed),
                        ..Known::default()
                    };
                }
                let tx = next(&mut rng, &ids, &mut known);
                match sql.batch_execute(&tx.sql).await {
                    Ok(()) => {
                        tally.ended += 1;
                        known.ids.retain(|id| !tx.deleted.contains(id));
                        known.ids.extend(tx.inserted);
                    }
                    Err(_) => {
                        tally.failed += 1;
                        if sql.is_closed() {
                            client = None;
                        } else {
                            // A failed statement leaves the transaction open and aborted.
                            let _ = sql.batch_execute("ROLLBACK").await;
                        }
                    }
                }
                tokio::time::sleep(rng.millis(pause_ms.0, pause_ms.1)).await;
            }
            tally
        });
        self.tasks.push((name.to_owned(), task));
    }

    /// `TRUNCATE orders`, tried until it succeeds.
    pub async fn truncate(&mut self) {
        let tally = until_done(&self.url, "TRUNCATE orders", None).await;
        self.ids.orders_epoch.fetch_add(1, Ordering::Relaxed);
        self.done.push(("truncate".into(), tally));
    }

    /// One transaction inserting `rows` events; returns once it committed. Tried again after a
    /// failure only if none of its rows is in the source (it surely did not commit).
    pub async fn large_transaction(&mut self, rows: u64) {
        self.big += 1;
        let first = RESERVED_IDS + ((self.big as i64) << 32);
        let last = first + rows as i64 - 1;
        let insert = format!(
            "INSERT INTO events (id, kind, body) \
             SELECT g, 'bulk', 'row ' || g || ' of a large transaction' \
             FROM generate_series({first}::bigint, {last}) g"
        );
        let count = format!("SELECT count(*) FROM events WHERE id BETWEEN {first} AND {last}");
        let tally = until_done(&self.url, &insert, Some(&count)).await;
        self.done
            .push((format!("large transaction {}", self.big), tally));
    }

    /// Stop every task and wait for each.
    pub async fn finish(self) -> Vec<(String, Tally)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut tallies = self.done;
        for (name, task) in self.tasks {
            let tally = task
                .await
                .unwrap_or_else(|e| panic!("{name} panicked: {e}"));
            tallies.push((name, tally));
        }
        tallies
    }
}

/// The ids a writer believes exist in its table.
#[derive(Default)]
struct Known {
    ids: Vec<i64>,
    epoch: u64,
}

impl Known {
    fn some(&self, rng: &mut Rng, most: u64) -> Vec<i64> {
        (0..rng.between(1, most))
            .filter_map(|_| rng.pick(&self.ids).copied())
            .collect()
    }
}

/// Run `statement` until it succeeds. After a failure, `committed` (a query counting rows the
/// statement writes) tells whether it committed before the connection went; without it the
/// statement simply runs again.
async fn until_done(url: &str, statement: &str, committed: Option<&str>) -> Tally {
    let mut tally = Tally::default();
    let mut client = None;
    let never = AtomicBool::new(false);
    loop {
        if let Some(sql) = connected(&mut client, url, &never).await {
            if sql.batch_execute(statement).await.is_ok() {
                tally.ended += 1;
                return tally;
            }
            tally.failed += 1;
        }
        client = None;
        if let Some(query) = committed
            && let Some(sql) = connected(&mut client, url, &never).await
            && let Ok(row) = sql.query_one(query, &[]).await
            && row.get::<_, i64>(0) > 0
        {
            tally.ended += 1;
            return tally;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The connection, opened again (every 200 ms) if it was lost; `None` once `stop` is set.
async fn connected<'a>(
    client: &'a mut Option<tokio_postgres::Client>,
    url: &str,
    stop: &AtomicBool,
) -> Option<&'a tokio_postgres::Client> {
    while client.as_ref().is_none_or(|c| c.is_closed()) {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        *client = try_connect(url).await;
        if client.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    client.as_ref()
}

fn money(rng: &mut Rng) -> String {
    let cents = rng.below(1_000_000) as i64 - 200_000;
    format!("{}.{:02}", cents / 100, (cents % 100).abs())
}

fn accounts(rng: &mut Rng, ids: &Ids, known: &mut Known) -> Transaction {
    let mut tx = Transaction::default();
    let roll = rng.below(100);
    match roll {
        0..45 => {
            for _ in 0..rng.between(1, 4) {
                let id = Ids::next(&ids.accounts);
                tx.push(format!(
                    "INSERT INTO accounts (id, owner, balance, active) VALUES ({id}, 'owner {}', {}, {})",
                    rng.below(1000),
                    money(rng),
                    rng.chance(0.8)
                ));
                tx.inserted.push(id);
            }
        }
        45..75 => {
            for id in known.some(rng, 3) {
                tx.push(format!(
                    "UPDATE accounts SET balance = balance + {}, version = version + 1, \
                     active = NOT active, updated = now() WHERE id = {id}",
                    money(rng)
                ));
            }
        }
        75..90 => {
            tx.delete("accounts", known.some(rng, 2));
        }
        90..95 => {
            // A key change: the landed update carries the old key.
            if let Some(&old) = rng.pick(&known.ids) {
                let id = Ids::next(&ids.accounts);
                tx.push(format!("UPDATE accounts SET id = {id} WHERE id = {old}"));
                tx.deleted.push(old);
                tx.inserted.push(id);
            }
        }
        _ => {
            let id = Ids::next(&ids.accounts);
            tx.push(format!(
                "INSERT INTO accounts (id, owner, balance, active) VALUES ({id}, 'rolled back', 0, true)"
            ));
            return tx.finish(false);
        }
    }
    tx.finish(true)
}

fn orders(rng: &mut Rng, ids: &Ids, known: &mut Known) -> Transaction {
    let mut tx = Transaction::default();
    let accounts = ids.accounts.load(Ordering::Relaxed).max(1);
    match rng.below(100) {
        0..50 => {
            for _ in 0..rng.between(1, 20) {
                let id = Ids::next(&ids.orders);
                let note = if rng.chance(0.3) {
                    "NULL".to_owned()
                } else {
                    format!("'note {}'", rng.below(10_000))
                };
                tx.push(format!(
                    "INSERT INTO orders VALUES ({id}, {}, {}, 'new', {note})",
                    rng.between(1, accounts as u64),
                    money(rng)
                ));
                tx.inserted.push(id);
            }
        }
        50..80 => {
            for id in known.some(rng, 5) {
                let status = rng.pick(&["paid", "shipped", "returned"]).unwrap();
                tx.push(format!(
                    "UPDATE orders SET status = '{status}', note = coalesce(note, '') || '+' WHERE id = {id}"
                ));
            }
        }
        _ => {
            tx.delete("orders", known.some(rng, 3));
        }
    }
    tx.finish(true)
}

fn events(rng: &mut Rng, ids: &Ids, known: &mut Known) -> Transaction {
    let mut tx = Transaction::default();
    let insert = |tx: &mut Transaction, rng: &mut Rng, kept: bool| {
        let rows = rng.between(1, 50) as i64;
        let first = ids.events.fetch_add(rows, Ordering::Relaxed) + 1;
        let last = first + rows - 1;
        tx.push(format!(
            "INSERT INTO events (id, kind, body) SELECT g, 'batch', 'event ' || g \
             FROM generate_series({first}::bigint, {last}) g"
        ));
        if kept {
            tx.inserted.extend(first..=last);
        }
    };
    match rng.below(100) {
        0..70 => insert(&mut tx, rng, true),
        70..85 => {
            // A rolled-back savepoint between two kept inserts: only those land.
            insert(&mut tx, rng, true);
            tx.push("SAVEPOINT undone".into());
            insert(&mut tx, rng, false);
            tx.push("ROLLBACK TO SAVEPOINT undone".into());
            insert(&mut tx, rng, true);
        }
        85..95 => {
            for id in known.some(rng, 4) {
                tx.push(format!(
                    "UPDATE events SET body = body || ' (edited)', kind = 'edited' WHERE id = {id}"
                ));
            }
        }
        _ => {
            tx.delete("events", known.some(rng, 4));
        }
    }
    // The writer keeps a bounded sample of what it inserted.
    if known.ids.len() > 10_000 {
        known.ids.drain(..5_000);
    }
    tx.finish(true)
}

/// A small transaction across all three tables: money moves between two accounts and is
/// recorded as an order and an event. Concurrent ones wait for each other's row locks (and
/// now and then deadlock, which PostgreSQL resolves by aborting one).
fn transfer(rng: &mut Rng, ids: &Ids, _known: &mut Known) -> Transaction {
    let mut tx = Transaction::default();
    let accounts = ids.accounts.load(Ordering::Relaxed).max(1) as u64;
    let (from, to) = (rng.between(1, accounts), rng.between(1, accounts));
    let amount = rng.between(1, 10_000);
    let amount = format!("{}.{:02}", amount / 100, amount % 100);
    tx.push(format!(
        "UPDATE accounts SET balance = balance - {amount}, version = version + 1 WHERE id = {from}"
    ));
    tx.push(format!(
        "UPDATE accounts SET balance = balance + {amount}, version = version + 1 WHERE id = {to}"
    ));
    let order = Ids::next(&ids.orders);
    tx.push(format!(
        "INSERT INTO orders VALUES ({order}, {from}, {amount}, 'transfer', 'to {to}')"
    ));
    let event = Ids::next(&ids.events);
    tx.push(format!(
        "INSERT INTO events (id, kind, body) VALUES ({event}, 'transfer', '{from} -> {to}')"
    ));
    tx.finish(!rng.chance(0.05))
}
