//! What verify found, and the text it prints. No IO.
//!
//! The text is a contract for operators and scripts: one line per table that starts with the
//! table's name and `: equal` or `: DIFFERENT`, a `files:` and a `duplicates:` line, each
//! followed by indented details, and a last line that starts with `verify: the lake equals
//! the source at <LSN>`, `verify: the lake's files are intact` (identities only) or
//! `verify: <N> difference(s)`.

use std::fmt;

pub use super::digest::RowText;
use super::replay::{ChangeId, Difference, TableDiff};
use crate::Lsn;
use crate::lake::TableFormat;
use crate::lake::tables::TableAudit;

/// What verify found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The snapshot's position; `None` when only identities were checked.
    /// Where the source was read: a WAL position, or (trigger capture) a snapshot.
    pub at: Option<String>,
    pub tables: Vec<TableReport>,
    pub files: Files,
    pub duplicates: Vec<Duplicates>,
    /// Facts that explain differences without being defects (an accepted gap, where the lake
    /// starts).
    pub notes: Vec<String>,
    /// With tables (`sink.format = "delta"` or `"iceberg"`): each output's tables held
    /// against the commit log, and their format.
    pub audits: Vec<TableAudit>,
    pub format: TableFormat,
    /// Each current-state table compared with the source.
    pub mirrors: Vec<MirrorReport>,
}

/// A current-state table (`<output>__current`) compared with the source directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorReport {
    pub table: String,
    pub outcome: MirrorOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorOutcome {
    /// Its version that holds the commit entries up to the snapshot, against the source.
    Compared {
        version: u64,
        rows: u64,
        missing: u64,
        extra: u64,
        changed: u64,
    },
    /// No version of it is the source at the snapshot: a commit entry holds changes from both
    /// sides of it (a busy source), or the table went past it in one commit. Not a defect.
    NotAtSnapshot { reason: String },
    /// The pipeline does not keep it up to date (mirror is off in the pipeline file, or where
    /// the pipeline runs): what it holds is not compared, the change-log table is.
    NotKept { reason: String },
}

impl MirrorReport {
    fn differences(&self) -> u64 {
        match self.outcome {
            MirrorOutcome::Compared {
                missing,
                extra,
                changed,
                ..
            } => missing + extra + changed,
            MirrorOutcome::NotAtSnapshot { .. } | MirrorOutcome::NotKept { .. } => 0,
        }
    }
}

impl fmt::Display for MirrorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            MirrorOutcome::Compared {
                version,
                rows,
                missing,
                extra,
                changed,
            } => {
                let state = match missing + extra + changed {
                    0 => "equal to the source".to_owned(),
                    _ => format!(
                        "differs from the source: {missing} missing, {extra} extra, {changed} changed"
                    ),
                };
                writeln!(
                    f,
                    "current-state table {}: version {version}, {}, {state}",
                    self.table,
                    plural(*rows, "row", "rows")
                )
            }
            MirrorOutcome::NotAtSnapshot { reason } | MirrorOutcome::NotKept { reason } => {
                writeln!(
                    f,
                    "current-state table {}: not compared: {reason}",
                    self.table
                )
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableReport {
    pub table: String,
    /// The key columns; empty when rows are compared as a multiset.
    pub key: Vec<String>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Content compared.
    Compared { diff: TableDiff, shown: Vec<Shown> },
    /// Content not compared (`--identities-only`): how many rows landed.
    Landed { rows: u64 },
}

/// One differing key, with both sides' rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub difference: Difference,
    /// The key as text (`id=5`), or `row` for a table without a key.
    pub key: String,
    pub source: Option<RowText>,
    pub lake: Option<RowText>,
    /// Where the lake's row is: its file, row and change.
    pub lake_at: Option<String>,
}

/// A data file named by a commit entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub path: String,
    pub output: String,
    pub rows: u64,
    pub bytes: u64,
    /// The entry that names it.
    pub sequence: u64,
}

/// The files' defects, and what is in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Files {
    /// Data files named by commit entries.
    pub committed: usize,
    /// Named by an entry, not in the sink.
    pub missing: Vec<Committed>,
    /// In the sink, with another size than its entry says.
    pub wrong_size: Vec<(Committed, u64)>,
    /// Read, with another row count than its entry says.
    pub wrong_rows: Vec<(Committed, u64)>,
    /// Not readable as a landed file.
    pub unreadable: Vec<(Committed, String)>,
    /// In the sink, named by no entry and no intent: path and size.
    pub unnamed: Vec<(String, u64)>,
    /// Named by an intent and no entry: a flush in flight, or one a stopped writer left for
    /// the next start to delete. Not a defect.
    pub in_flight: Vec<String>,
}

impl Files {
    /// Committed files that are there but damaged, each counted once however it is.
    pub fn damaged(&self) -> usize {
        let paths: std::collections::BTreeSet<&str> = (self.wrong_size.iter())
            .chain(&self.wrong_rows)
            .map(|(c, _)| c.path.as_str())
            .chain(self.unreadable.iter().map(|(c, _)| c.path.as_str()))
            .collect();
        paths.len()
    }

    pub fn defects(&self) -> usize {
        self.missing.len() + self.damaged() + self.unnamed.len()
    }
}

/// Identities of one output that landed more than once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicates {
    pub output: String,
    /// Rows that repeat an identity landed before.
    pub count: u64,
    /// The first ones: the identity and where both copies are.
    pub shown: Vec<(ChangeId, String, String)>,
}

impl Report {
    /// Rows that differ, over every compared table.
    pub fn row_differences(&self) -> u64 {
        self.tables
            .iter()
            .map(|t| match &t.outcome {
                Outcome::Compared { diff, .. } => diff.missing + diff.extra + diff.changed,
                Outcome::Landed { .. } => 0,
            })
            .sum::<u64>()
            + self
                .mirrors
                .iter()
                .map(MirrorReport::differences)
                .sum::<u64>()
    }

    pub fn duplicate_count(&self) -> u64 {
        self.duplicates.iter().map(|d| d.count).sum()
    }

    /// Every difference and defect: rows, files, duplicates, Delta table problems.
    pub fn differences(&self) -> u64 {
        self.row_differences()
            + self.files.defects() as u64
            + self.duplicate_count()
            + self.table_problems()
    }

    pub fn table_problems(&self) -> u64 {
        self.audits.iter().map(|t| t.problems.len() as u64).sum()
    }

    pub fn is_equal(&self) -> bool {
        self.differences() == 0
    }

    /// The last line, without its newline.
    pub fn summary(&self) -> String {
        let n = self.differences();
        if n == 0 {
            return match &self.at {
                Some(at) => format!("verify: the lake equals the source at {at}"),
                None => "verify: the lake's files are intact and no change landed twice \
                         (content not compared)"
                    .to_owned(),
            };
        }
        let f = &self.files;
        let mut parts = Vec::new();
        let mut part = |count: u64, one: &str, many: &str| {
            if count > 0 {
                parts.push(format!("{count} {}", if count == 1 { one } else { many }));
            }
        };
        part(self.row_differences(), "row", "rows");
        part(f.missing.len() as u64, "missing file", "missing files");
        part(f.damaged() as u64, "damaged file", "damaged files");
        part(
            f.unnamed.len() as u64,
            "file named by no entry",
            "files named by no entry",
        );
        part(
            self.duplicate_count(),
            "duplicate change identity",
            "duplicate change identities",
        );
        part(
            self.table_problems(),
            &format!("{} table problem", self.format.name()),
            &format!("{} table problems", self.format.name()),
        );
        let at = self.at.as_ref().map_or_else(
            || " (content not compared)".to_owned(),
            |at| format!(" at {at}"),
        );
        let noun = if n == 1 { "difference" } else { "differences" };
        format!("verify: {n} {noun}{at}: {}", parts.join(", "))
    }
}

fn row_text(row: &RowText) -> String {
    row.iter()
        .map(|(c, v)| format!("{c}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl fmt::Display for TableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (diff, shown) = match &self.outcome {
            Outcome::Landed { rows } => {
                return writeln!(
                    f,
                    "{}: {} landed (content not compared)",
                    self.table,
                    plural(*rows, "row", "rows")
                );
            }
            Outcome::Compared { diff, shown } => (diff, shown),
        };
        if diff.is_equal() {
            return writeln!(
                f,
                "{}: equal ({})",
                self.table,
                plural(diff.source_rows, "row", "rows")
            );
        }
        writeln!(
            f,
            "{}: DIFFERENT (source {}, lake {}: {} missing, {} extra, {} changed)",
            self.table,
            plural(diff.source_rows, "row", "rows"),
            plural(diff.lake_rows, "row", "rows"),
            diff.missing,
            diff.extra,
            diff.changed
        )?;
        for s in shown {
            let kind = match s.difference {
                Difference::Missing => "missing",
                Difference::Extra => "extra",
                Difference::Changed => "changed",
            };
            writeln!(f, "  {kind} {}", s.key)?;
            if let Some(row) = &s.source {
                writeln!(f, "    source: {}", row_text(row))?;
            }
            if let Some(row) = &s.lake {
                writeln!(f, "    lake:   {}", row_text(row))?;
            }
            if let Some(at) = &s.lake_at {
                writeln!(f, "            ({at})")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Files {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named = plural(
            self.committed as u64,
            "committed data file",
            "committed data files",
        );
        match self.defects() {
            0 => writeln!(f, "files: {named}, all intact")?,
            n => writeln!(
                f,
                "files: {named}, {}",
                plural(n as u64, "defect", "defects")
            )?,
        }
        for c in &self.missing {
            writeln!(
                f,
                "  missing: {} (entry {}: {}, {} bytes)",
                c.path,
                c.sequence,
                plural(c.rows, "row", "rows"),
                c.bytes
            )?;
        }
        for (c, size) in &self.wrong_size {
            writeln!(
                f,
                "  damaged: {} is {size} bytes, entry {} says {}",
                c.path, c.sequence, c.bytes
            )?;
        }
        for (c, rows) in &self.wrong_rows {
            writeln!(
                f,
                "  damaged: {} holds {}, entry {} says {}",
                c.path,
                plural(*rows, "row", "rows"),
                c.sequence,
                c.rows
            )?;
        }
        for (c, reason) in &self.unreadable {
            writeln!(f, "  damaged: {} (entry {}) {reason}", c.path, c.sequence)?;
        }
        for (path, size) in &self.unnamed {
            writeln!(f, "  named by no entry: {path} ({size} bytes)")?;
        }
        for path in &self.in_flight {
            writeln!(f, "  in flight (named by an intent; not a defect): {path}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        for table in &self.tables {
            write!(f, "{table}")?;
        }
        write!(f, "{}", self.files)?;
        match self.duplicate_count() {
            0 => writeln!(f, "duplicates: none")?,
            n => writeln!(
                f,
                "duplicates: {} landed more than once",
                plural(n, "change identity", "change identities")
            )?,
        }
        for d in &self.duplicates {
            for (id, first, again) in &d.shown {
                writeln!(
                    f,
                    "  {} ({}, seq {}, sub {}): {first} and {again}",
                    d.output,
                    Lsn(id.commit_lsn),
                    id.seq,
                    id.sub
                )?;
            }
            let more = d.count - d.shown.len() as u64;
            if more > 0 {
                writeln!(f, "  {}: {more} more", d.output)?;
            }
        }
        for m in &self.mirrors {
            write!(f, "{m}")?;
        }
        for t in &self.audits {
            let version = t
                .version
                .map_or_else(|| "no log".to_owned(), |v| format!("version {v}"));
            let holds = t.holds.map_or_else(
                || "no commit entry".to_owned(),
                |s| format!("entries up to {s}"),
            );
            let state = match t.problems.len() {
                0 => "intact".to_owned(),
                n => plural(n as u64, "problem", "problems"),
            };
            let format = self.format.name().to_lowercase();
            writeln!(
                f,
                "{format} table {}: {version}, {holds}, {state}",
                t.output
            )?;
            match (t.base, self.format) {
                (None, _) => {}
                (Some(base), TableFormat::Iceberg) => writeln!(
                    f,
                    "  audited from its oldest snapshot, version {base}: the ones before it expired (a vacuum)"
                )?,
                (Some(base), _) => writeln!(
                    f,
                    "  audited from its checkpoint at version {base}: the commits before it are gone (a log clean-up)"
                )?,
            }
            for problem in &t.problems {
                writeln!(f, "  {problem}")?;
            }
            if !t.behind.is_empty() {
                writeln!(
                    f,
                    "  entries {:?} are not in it yet (a running pipeline is publishing them; a stopped one does at its next start)",
                    t.behind
                )?;
            }
        }
        writeln!(f, "{}", self.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(source: u64, lake: u64, missing: u64, extra: u64, changed: u64) -> TableDiff {
        TableDiff {
            source_rows: source,
            lake_rows: lake,
            missing,
            extra,
            changed,
            samples: vec![],
        }
    }

    fn report(tables: Vec<TableReport>, files: Files, duplicates: Vec<Duplicates>) -> Report {
        Report {
            at: Some(Lsn(0x1_6B37_48A0).to_string()),
            tables,
            files,
            duplicates,
            notes: vec![],
            audits: Vec::new(),
            format: TableFormat::Parquet,
            mirrors: Vec::new(),
        }
    }

    fn table(name: &str, diff: TableDiff, shown: Vec<Shown>) -> TableReport {
        TableReport {
            table: name.into(),
            key: vec!["id".into()],
            outcome: Outcome::Compared { diff, shown },
        }
    }

    #[test]
    fn an_equal_lake_says_so_in_one_stable_last_line() {
        let files = Files {
            committed: 3,
            ..Files::default()
        };
        let r = report(
            vec![table("public.events", diff(120, 120, 0, 0, 0), vec![])],
            files,
            vec![],
        );
        assert!(r.is_equal());
        assert_eq!(
            r.to_string(),
            "public.events: equal (120 rows)\n\
             files: 3 committed data files, all intact\n\
             duplicates: none\n\
             verify: the lake equals the source at 1/6B3748A0\n"
        );
    }

    #[test]
    fn differences_are_named_and_counted() {
        let missing = Committed {
            path: "public.events/part-1.parquet".into(),
            output: "public.events".into(),
            rows: 5,
            bytes: 900,
            sequence: 2,
        };
        let files = Files {
            committed: 3,
            missing: vec![missing],
            unnamed: vec![("public.events/part-9.parquet".into(), 900)],
            in_flight: vec!["public.events/part-4.parquet".into()],
            ..Files::default()
        };
        let shown = vec![Shown {
            difference: Difference::Changed,
            key: "id=7".into(),
            source: Some(vec![
                ("id".into(), "7".into()),
                ("body".into(), "\"new\"".into()),
            ]),
            lake: Some(vec![
                ("id".into(), "7".into()),
                ("body".into(), "\"old\"".into()),
            ]),
            lake_at: Some("public.events/part-2.parquet row 0, change 0/10 seq 0".into()),
        }];
        let duplicates = vec![Duplicates {
            output: "public.events".into(),
            count: 2,
            shown: vec![(
                ChangeId {
                    commit_lsn: 0x10,
                    seq: 0,
                    sub: 0,
                },
                "a row 0".into(),
                "b row 0".into(),
            )],
        }];
        let r = report(
            vec![table("public.events", diff(10, 9, 5, 4, 1), shown)],
            files,
            duplicates,
        );
        assert_eq!(r.differences(), 10 + 2 + 2);
        assert_eq!(
            r.to_string(),
            "public.events: DIFFERENT (source 10 rows, lake 9 rows: 5 missing, 4 extra, 1 changed)\n\
             \x20 changed id=7\n\
             \x20   source: id=7, body=\"new\"\n\
             \x20   lake:   id=7, body=\"old\"\n\
             \x20           (public.events/part-2.parquet row 0, change 0/10 seq 0)\n\
             files: 3 committed data files, 2 defects\n\
             \x20 missing: public.events/part-1.parquet (entry 2: 5 rows, 900 bytes)\n\
             \x20 named by no entry: public.events/part-9.parquet (900 bytes)\n\
             \x20 in flight (named by an intent; not a defect): public.events/part-4.parquet\n\
             duplicates: 2 change identities landed more than once\n\
             \x20 public.events (0/10, seq 0, sub 0): a row 0 and b row 0\n\
             \x20 public.events: 1 more\n\
             verify: 14 differences at 1/6B3748A0: 10 rows, 1 missing file, 1 file named by no entry, 2 duplicate change identities\n"
        );
    }

    #[test]
    fn a_file_damaged_in_two_ways_is_one_damaged_file() {
        let c = Committed {
            path: "public.t/part-1.parquet".into(),
            output: "public.t".into(),
            rows: 5,
            bytes: 900,
            sequence: 2,
        };
        let files = Files {
            committed: 1,
            wrong_size: vec![(c.clone(), 10)],
            unreadable: vec![(c, "not readable as Parquet: EOF".into())],
            ..Files::default()
        };
        let r = report(vec![], files, vec![]);
        assert_eq!(r.differences(), 1);
        assert_eq!(
            r.to_string(),
            "files: 1 committed data file, 1 defect\n\
             \x20 damaged: public.t/part-1.parquet is 10 bytes, entry 2 says 900\n\
             \x20 damaged: public.t/part-1.parquet (entry 2) not readable as Parquet: EOF\n\
             duplicates: none\n\
             verify: 1 difference at 1/6B3748A0: 1 damaged file\n"
        );
    }

    #[test]
    fn identities_only_says_content_was_not_compared() {
        let mut r = report(
            vec![TableReport {
                table: "public.events".into(),
                key: vec![],
                outcome: Outcome::Landed { rows: 1 },
            }],
            Files::default(),
            vec![],
        );
        r.at = None;
        assert!(r.to_string().starts_with(
            "public.events: 1 row landed (content not compared)\nfiles: 0 committed data files, all intact\n"
        ));
        assert_eq!(
            r.summary(),
            "verify: the lake's files are intact and no change landed twice (content not compared)"
        );
        r.files.unnamed.push(("x".into(), 1));
        assert_eq!(
            r.summary(),
            "verify: 1 difference (content not compared): 1 file named by no entry"
        );
    }

    #[test]
    fn an_iceberg_table_audited_after_an_expiry_says_where_it_started() {
        let mut r = report(
            vec![table("public.events", diff(5, 5, 0, 0, 0), vec![])],
            Files::default(),
            vec![],
        );
        r.format = TableFormat::Iceberg;
        r.audits.push(TableAudit {
            output: "public.events".into(),
            version: Some(9),
            holds: Some(12),
            behind: vec![14],
            problems: Vec::new(),
            base: Some(7),
        });
        let text = r.to_string();
        assert!(
            text.contains(
                "iceberg table public.events: version 9, entries up to 12, intact\n  \
                 audited from its oldest snapshot, version 7: the ones before it expired (a vacuum)\n  \
                 entries [14] are not in it yet"
            ),
            "{text}"
        );
    }
}
