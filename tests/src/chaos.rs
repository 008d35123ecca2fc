//! What the chaos test needs that is not about one schedule: a seeded random generator, a
//! watch on the slot's confirmed position against the commit log, and the final comparison of
//! the lake with the source.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, pin_mut};
use tributary::Lsn;
use tributary::lake::commit::CommitLog;
use tributary::lake::sink::Sink;

use crate::lake::{LandedRow, committed_rows, object_names};

/// SplitMix64: small, fast, and the same numbers from the same seed on every machine, which is
/// all a replayable schedule needs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }

    /// A duration between `lo` and `hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.between(lo, hi))
    }

    /// A generator of its own for another task, so that each task's choices depend on the seed
    /// alone and not on how the tasks interleave.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        match items.len() {
            0 => None,
            n => items.get(self.below(n as u64) as usize),
        }
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// The seed `var` names (a decimal `u64`), else a new one from the clock and the pid.
pub fn seed_from_env(var: &str) -> u64 {
    match std::env::var(var) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={text:?} is not a seed (a decimal u64)")),
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            Rng::new(nanos ^ u64::from(std::process::id()).rotate_left(32)).next_u64()
        }
    }
}

/// What [`ConfirmWatch`] saw.
#[derive(Debug, Default, Clone)]
pub struct ConfirmSamples {
    /// Samples compared with an entry.
    pub samples: u64,
    /// Samples taken before the log had an entry (the slot exists from the first start on, its
    /// first entry a moment later).
    pub before_first_entry: u64,
    /// Samples whose confirmed position was past the latest entry's end, as sentences.
    pub violations: Vec<String>,
}

/// Samples the slot's `confirmed_flush_lsn` over and over, and compares each sample with the
/// latest commit entry's `last_end_lsn` read at or after it: the confirmed position must never
/// pass what the log holds. Rides through restarts of the server and outages of the sink (a
/// sample waits until the log can be read again; the log only grows meanwhile, so the check
/// stays sound).
pub struct ConfirmWatch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<ConfirmSamples>,
}

impl ConfirmWatch {
    /// `log` should reach the sink directly, not through a proxy a test breaks.
    pub fn start(url: &str, slot: &str, log: CommitLog, every: Duration) -> ConfirmWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let (url, slot, flag) = (url.to_owned(), slot.to_owned(), stop.clone());
        let task = tokio::spawn(async move {
            let mut seen = ConfirmSamples::default();
            let mut client: Option<tokio_postgres::Client> = None;
            while !flag.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                if client.as_ref().is_none_or(|c| c.is_closed()) {
                    client = try_connect(&url).await;
                }
                let Some(sql) = &client else { continue };
                let Ok(row) = sql
                    .query_opt(
                        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                        &[&slot],
                    )
                    .await
                else {
                    continue;
                };
                let Some(confirmed) = row
                    .and_then(|r| r.get::<_, Option<String>>(0))
                    .map(|text| text.parse::<Lsn>().unwrap())
                else {
                    continue;
                };
                let latest = loop {
                    match log.latest().await {
                        Ok(latest) => break latest,
                        Err(_) if !flag.load(Ordering::Relaxed) => {
                            tokio::time::sleep(every).await;
                        }
                        Err(_) => return seen,
                    }
                };
                match latest {
                    None => seen.before_first_entry += 1,
                    Some(entry) => {
                        seen.samples += 1;
                        if confirmed > entry.last_end_lsn {
                            seen.violations.push(format!(
                                "the slot was confirmed at {confirmed} while the latest entry ({}, read after) ends at {}",
                                entry.sequence, entry.last_end_lsn
                            ));
                        }
                    }
                }
            }
            seen
        });
        ConfirmWatch { stop, task }
    }

    pub async fn finish(self) -> ConfirmSamples {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the confirm watch panicked")
    }
}

/// A connection, or `None` while the server is down.
pub async fn try_connect(url: &str) -> Option<tokio_postgres::Client> {
    let connecting = tokio_postgres::connect(url, tokio_postgres::NoTls);
    let (client, connection) = tokio::time::timeout(Duration::from_secs(5), connecting)
        .await
        .ok()?
        .ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Some(client)
}

/// A table's rows by key, each row's values (canonical text, see [`crate::lake::cell`]) in the
/// order of its column names.
pub type Table = HashMap<String, Vec<Option<String>>>;

/// The comparison, per table.
#[derive(Debug, Clone)]
pub struct TableFigures {
    pub table: String,
    /// Rows in the source at the end.
    pub rows: usize,
    /// Changes landed (every operation, replays excluded).
    pub changes: usize,
    /// Changes per operation.
    pub ops: BTreeMap<String, usize>,
}

/// The final check: the lake, replayed, equals the source. Panics with what differs.
///
/// For every `(table, key column)`: the landed rows the commit log names
/// ([`committed_rows`], which also checks that every data file is named by an entry and holds
/// the bytes and rows the entry says, and that no identity `(_commit_lsn, _seq)` lands twice)
/// are applied in identity order, the latest version per key (an update's old key removed,
/// a delete removing, a truncate or a full load's marker emptying the table), and the result must equal the table's
/// rows as the source holds them now, column by column in the lake's canonical text. Over all
/// tables, each transaction's `_seq` (a full load's rows aside) must run 0, 1, ... without a hole (no change of a
/// transaction went missing) and no intent may be left.
///
/// `tributary verify` is to do the same from the command line; this function is where a test
/// calls it once it exists.
pub async fn assert_lake_equals_source(
    client: &tokio_postgres::Client,
    sink: &Sink,
    tables: &[(&str, &str)],
) -> Vec<TableFigures> {
    let mut problems = Vec::new();
    let mut figures = Vec::new();
    let mut seqs: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for &(table, key) in tables {
        let rows = committed_rows(sink, table).await;
        let mut ops = BTreeMap::new();
        for row in &rows {
            // A full load's rows are numbered by their place in the heap, not 0, 1, ...
            if row.xid != tributary::stream::load::LOAD_XID {
                seqs.entry(row.commit_lsn).or_default().push(row.seq);
            }
            *ops.entry(row.op.clone()).or_default() += 1;
        }
        let changes = rows.len();
        let (columns, source) = source_rows(client, table, key).await;
        let lake = replay(table, key, &columns, rows, &mut problems);
        compare(table, &columns, &lake, &source, &mut problems);
        figures.push(TableFigures {
            table: table.to_owned(),
            rows: source.len(),
            changes,
            ops,
        });
    }
    for (lsn, mut numbers) in seqs {
        numbers.sort_unstable();
        if numbers.iter().copied().ne(0..numbers.len() as u32) {
            problems.push(format!(
                "transaction {}: its changes' _seq are not 0..{} (holes or repeats: {numbers:?})",
                Lsn(lsn),
                numbers.len()
            ));
        }
    }
    let intents = object_names(sink.store().as_ref(), "_tributary/intent").await;
    if !intents.is_empty() {
        problems.push(format!("intents left after a clean stop: {intents:?}"));
    }
    if !problems.is_empty() {
        problems.sort();
        let shown: Vec<&str> = problems.iter().take(30).map(String::as_str).collect();
        panic!(
            "the lake differs from the source in {} ways:\n  {}",
            problems.len(),
            shown.join("\n  ")
        );
    }
    figures
}

/// The table as the landed changes leave it; `columns` are the source's, sorted.
fn replay(
    table: &str,
    key: &str,
    columns: &[String],
    rows: Vec<LandedRow>,
    problems: &mut Vec<String>,
) -> Table {
    let at_key = columns
        .iter()
        .position(|c| c == key)
        .unwrap_or_else(|| panic!("{table} has no column {key}"));
    let mut state = Table::new();
    for row in rows {
        let (lsn, seq) = (Lsn(row.commit_lsn), row.seq);
        let at = || format!("{table} ({lsn}, {seq})");
        if !row.values.keys().eq(columns.iter()) {
            problems.push(format!(
                "{}: landed with the columns {:?}, the source has {columns:?}",
                at(),
                row.values.keys().collect::<Vec<_>>()
            ));
            continue;
        }
        let old_key = row.old.as_ref().and_then(|o| o.get(key).cloned().flatten());
        // Untouched TOASTed values landed as null: the earlier version holds them.
        let untouched: Vec<usize> = row
            .unchanged_toast
            .as_deref()
            .map(|list| {
                list.trim_matches(['[', ']'])
                    .split(',')
                    .filter_map(|name| columns.iter().position(|c| c == name))
                    .collect()
            })
            .unwrap_or_default();
        let mut values: Vec<Option<String>> = row.values.into_values().collect();
        let id = values[at_key].clone();
        match (row.op.as_str(), id) {
            ("insert", Some(id)) => {
                if state.insert(id.clone(), values).is_some() {
                    problems.push(format!(
                        "{}: insert of key {id}, which the lake holds",
                        at()
                    ));
                }
            }
            ("update", Some(id)) => {
                let before = old_key.unwrap_or_else(|| id.clone());
                let Some(mut earlier) = state.remove(&before) else {
                    problems.push(format!("{}: update of key {before}, never inserted", at()));
                    continue;
                };
                for i in untouched {
                    values[i] = earlier[i].take();
                }
                state.insert(id, values);
            }
            ("delete", id) => {
                let Some(id) = id.or(old_key) else {
                    problems.push(format!("{}: a delete without its key", at()));
                    continue;
                };
                if state.remove(&id).is_none() {
                    problems.push(format!("{}: delete of key {id}, never inserted", at()));
                }
            }
            // A load marker: the table's rows as of a snapshot follow.
            ("truncate" | "load", _) => state.clear(),
            (op, _) => problems.push(format!("{}: an {op} without its key, or unknown", at())),
        }
    }
    state
}

/// The table's column names (sorted) and rows as the source holds them, each value in the
/// lake's canonical text.
pub async fn source_rows(
    client: &tokio_postgres::Client,
    table: &str,
    key: &str,
) -> (Vec<String>, Table) {
    let (schema, name) = table.split_once('.').unwrap_or(("public", table));
    let mut columns: Vec<(String, String)> = client
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2",
            &[&schema, &name],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(!columns.is_empty(), "{table} has no columns in the source");
    columns.sort();
    let select: Vec<String> = columns
        .iter()
        .map(|(column, kind)| {
            let c = format!("\"{column}\"");
            match kind.as_str() {
                "boolean" => format!("CASE WHEN {c} THEN 'true' ELSE 'false' END"),
                "timestamp with time zone" | "timestamp without time zone" => {
                    format!("(extract(epoch FROM {c}) * 1000000)::bigint::text")
                }
                "smallint" | "integer" | "bigint" | "numeric" | "text" | "character varying" => {
                    format!("{c}::text")
                }
                other => panic!("the source reader does not render {other} ({table}.{column})"),
            }
        })
        .collect();
    let names: Vec<String> = columns.into_iter().map(|(name, _)| name).collect();
    let at_key = names
        .iter()
        .position(|c| c == key)
        .unwrap_or_else(|| panic!("{table} has no column {key}"));
    let sql = format!("SELECT {} FROM {table}", select.join(", "));
    let stream = client
        .query_raw(&sql, std::iter::empty::<i32>())
        .await
        .unwrap();
    pin_mut!(stream);
    let mut rows = Table::new();
    while let Some(row) = stream.next().await {
        let row = row.unwrap();
        let values: Vec<Option<String>> = (0..names.len()).map(|i| row.get(i)).collect();
        let id = values[at_key].clone().expect("the key is never null");
        rows.insert(id, values);
    }
    (names, rows)
}

fn compare(
    table: &str,
    columns: &[String],
    lake: &Table,
    source: &Table,
    problems: &mut Vec<String>,
) {
    for (id, landed) in lake {
        match source.get(id) {
            None => problems.push(format!(
                "{table} key {id}: in the lake, not in the source (a delete or truncate missing)"
            )),
            Some(held) if held != landed => {
                let differ: Vec<String> = columns
                    .iter()
                    .zip(landed.iter().zip(held))
                    .filter(|(_, (l, h))| l != h)
                    .map(|(c, (l, h))| format!("{c}: lake {l:?}, source {h:?}"))
                    .collect();
                problems.push(format!("{table} key {id}: {}", differ.join("; ")));
            }
            Some(_) => {}
        }
    }
    for id in source.keys().filter(|id| !lake.contains_key(*id)) {
        problems.push(format!(
            "{table} key {id}: in the source, not in the lake (a change missing)"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_numbers_everywhere() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let first: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        assert_eq!(first, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        // SplitMix64's published first output for seed 0.
        assert_eq!(Rng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn ranges_and_shuffles_stay_in_bounds() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            assert!((3..=9).contains(&rng.between(3, 9)));
        }
        let mut items: Vec<u32> = (0..50).collect();
        rng.shuffle(&mut items);
        assert_ne!(items, (0..50).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..50).collect::<Vec<_>>());
    }

    fn landed(op: &str, lsn: u64, id: &str, v: &str, old: Option<&str>) -> LandedRow {
        let values = |id: &str, v: Option<&str>| -> BTreeMap<String, Option<String>> {
            [
                ("id".to_owned(), Some(id.to_owned())),
                ("v".to_owned(), v.map(str::to_owned)),
            ]
            .into()
        };
        LandedRow {
            op: op.to_owned(),
            commit_lsn: lsn,
            seq: 0,
            xid: 0,
            commit_time: 0,
            values: values(id, (op != "delete").then_some(v)),
            schema: String::new(),
            unchanged_toast: None,
            old: old.map(|k| values(k, None)),
            file: String::new(),
        }
    }

    #[test]
    fn a_replay_keeps_the_latest_version_per_key() {
        let rows = [
            landed("insert", 1, "1", "a", None),
            landed("insert", 2, "2", "b", None),
            landed("update", 3, "1", "c", None),
            landed("update", 4, "3", "b", Some("2")),
            landed("truncate", 5, "", "", None),
            landed("insert", 6, "4", "d", None),
            landed("insert", 7, "5", "e", None),
            landed("delete", 8, "5", "", None),
        ];
        let columns = ["id".to_owned(), "v".to_owned()];
        let mut problems = Vec::new();
        let state = replay("t", "id", &columns, rows[..4].to_vec(), &mut problems);
        assert_eq!(problems, Vec::<String>::new());
        let mut keys: Vec<&str> = state.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["1", "3"]);
        assert_eq!(state["1"][1].as_deref(), Some("c"));
        let state = replay("t", "id", &columns, rows.to_vec(), &mut problems);
        assert_eq!(state.keys().collect::<Vec<_>>(), ["4"]);
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn a_replay_names_changes_that_cannot_follow_what_landed() {
        let rows = [
            landed("insert", 1, "1", "a", None),
            landed("insert", 2, "1", "a", None),
            landed("update", 3, "2", "b", None),
            landed("delete", 4, "3", "", None),
        ];
        let columns = ["id".to_owned(), "v".to_owned()];
        let mut problems = Vec::new();
        replay("t", "id", &columns, rows.to_vec(), &mut problems);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[1].contains("update of key 2, never inserted"));
    }
}
