//! Spills: the row messages of a large transaction, held in a spill medium until it commits.
//!
//! The medium comes from outside ([`SpillMedia`]): anything that reads, writes and seeks, so
//! this module does no IO of its own. The pipeline gives unnamed local files; tests and tools
//! give memory. Records keep the row as pgoutput sent it (the values' text or binary form),
//! so typing happens once, when the transaction is read back after its commit. Each record:
//!
//! ```text
//! u32 length of the rest | u8 op (I U D T) | u32 own xid | u32 relation index
//! | u8 images (bit 0 new, bit 1 old) | tuple... ;  tuple = u16 values, then per value:
//! u8 kind (n u t b) and, for t and b, u32 length and the bytes
//! ```
//!
//! Integers are little-endian. Relations are kept in memory beside the medium (a transaction
//! touches a handful), so a record names its relation as it was when the row was sent, even
//! when a later Relation message in the same transaction changed the table.

use std::fmt;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use bytes::Bytes;

use crate::stream::change::Op;
use crate::wire::pgoutput::{Relation, Tuple, TupleValue};

/// Write buffer per spilling transaction: several may spill at once.
const WRITE_BUFFER: usize = 256 << 10;
const READ_BUFFER: usize = 1 << 20;

/// Storage for one transaction's spill: written from its start, then read back from its start.
pub trait SpillMedium: Read + Write + Seek + Send {}

impl<T: Read + Write + Seek + Send> SpillMedium for T {}

type OpenMedium = dyn Fn() -> io::Result<Box<dyn SpillMedium>> + Send + Sync;

/// Where large transactions wait for their commit: a maker of fresh, empty media, the place
/// an error names them by, and what a user can do when they fail.
#[derive(Clone)]
pub struct SpillMedia {
    open: Arc<OpenMedium>,
    place: String,
    remedy: String,
}

impl SpillMedia {
    pub fn new(
        place: impl Into<String>,
        remedy: impl Into<String>,
        open: impl Fn() -> io::Result<Box<dyn SpillMedium>> + Send + Sync + 'static,
    ) -> SpillMedia {
        SpillMedia {
            open: Arc::new(open),
            place: place.into(),
            remedy: remedy.into(),
        }
    }

    /// Media in memory: for tests and tools, where a large transaction fits; a pipeline
    /// spills to disk so that one never has to.
    pub fn memory() -> SpillMedia {
        SpillMedia::new("memory", "spill to disk instead", || {
            Ok(Box::new(io::Cursor::new(Vec::new())))
        })
    }

    /// A fresh, empty medium.
    pub fn open(&self) -> io::Result<Box<dyn SpillMedium>> {
        (self.open)()
    }

    /// Where the media are, as errors name it.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// What a user can do when the media fail.
    pub fn remedy(&self) -> &str {
        &self.remedy
    }
}

impl fmt::Debug for SpillMedia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpillMedia")
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

/// The row messages of one transaction, being written.
pub(crate) struct SpillWriter {
    file: BufWriter<Box<dyn SpillMedium>>,
    relations: Vec<Arc<Relation>>,
    records: u64,
    written: u64,
    record: Vec<u8>,
}

impl SpillWriter {
    pub fn create(media: &SpillMedia) -> io::Result<SpillWriter> {
        let file = media.open()?;
        Ok(SpillWriter {
            file: BufWriter::with_capacity(WRITE_BUFFER, file),
            relations: Vec::new(),
            records: 0,
            written: 0,
            record: Vec::new(),
        })
    }

    /// Rows written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn write(
        &mut self,
        op: Op,
        own: u32,
        relation: &Arc<Relation>,
        new: Option<&Tuple>,
        old: Option<&Tuple>,
    ) -> io::Result<()> {
        let index = self.relation_index(relation);
        let record = &mut self.record;
        record.clear();
        record.extend_from_slice(&[0; 4]);
        record.push(op_tag(op));
        record.extend_from_slice(&own.to_le_bytes());
        record.extend_from_slice(&index.to_le_bytes());
        record.push(u8::from(new.is_some()) | (u8::from(old.is_some()) << 1));
        for tuple in [new, old].into_iter().flatten() {
            write_tuple(record, tuple);
        }
        let length = u32::try_from(record.len() - 4)
            .map_err(|_| io::Error::other("a row larger than 4 GiB cannot be spilled"))?;
        record[..4].copy_from_slice(&length.to_le_bytes());
        self.file.write_all(record)?;
        self.records += 1;
        self.written += record.len() as u64;
        Ok(())
    }

    /// Everything written, to be read back from the start.
    pub fn finish(self) -> io::Result<SpillReader> {
        let mut file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        Ok(SpillReader {
            file: BufReader::with_capacity(READ_BUFFER, file),
            relations: self.relations,
            remaining: self.records,
        })
    }

    fn relation_index(&mut self, relation: &Arc<Relation>) -> u32 {
        // The latest relation is the likeliest; a transaction touches few.
        let found = self
            .relations
            .iter()
            .rposition(|r| Arc::ptr_eq(r, relation));
        let index = found.unwrap_or_else(|| {
            self.relations.push(relation.clone());
            self.relations.len() - 1
        });
        index as u32
    }
}

/// One row read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpilledRow {
    pub op: Op,
    pub own: u32,
    pub relation: Arc<Relation>,
    pub new: Option<Tuple>,
    pub old: Option<Tuple>,
}

/// The row messages of one committed transaction, read back in the order they were written.
pub(crate) struct SpillReader {
    file: BufReader<Box<dyn SpillMedium>>,
    relations: Vec<Arc<Relation>>,
    remaining: u64,
}

impl SpillReader {
    /// Rows not read yet.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    pub fn next_row(&mut self) -> io::Result<Option<SpilledRow>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let mut length = [0; 4];
        self.file.read_exact(&mut length)?;
        let mut record = vec![0; u32::from_le_bytes(length) as usize];
        self.file.read_exact(&mut record)?;
        self.remaining -= 1;
        let mut cursor = Cursor {
            bytes: Bytes::from(record),
            at: 0,
        };
        let op = tag_op(cursor.u8()?)?;
        let own = cursor.u32()?;
        let index = cursor.u32()? as usize;
        let relation = self
            .relations
            .get(index)
            .cloned()
            .ok_or_else(|| corrupt("a relation index past the relations kept"))?;
        let images = cursor.u8()?;
        let new = (images & 1 != 0).then(|| cursor.tuple()).transpose()?;
        let old = (images & 2 != 0).then(|| cursor.tuple()).transpose()?;
        Ok(Some(SpilledRow {
            op,
            own,
            relation,
            new,
            old,
        }))
    }
}

fn op_tag(op: Op) -> u8 {
    match op {
        Op::Insert => b'I',
        Op::Update => b'U',
        Op::Delete => b'D',
        Op::Truncate => b'T',
        Op::Load => b'L',
    }
}

fn tag_op(tag: u8) -> io::Result<Op> {
    Ok(match tag {
        b'I' => Op::Insert,
        b'U' => Op::Update,
        b'D' => Op::Delete,
        b'T' => Op::Truncate,
        b'L' => Op::Load,
        _ => return Err(corrupt("an unknown operation")),
    })
}

fn write_tuple(out: &mut Vec<u8>, tuple: &Tuple) {
    // The decoder read the count from a u16.
    out.extend_from_slice(&(tuple.0.len() as u16).to_le_bytes());
    for value in &tuple.0 {
        let (kind, data) = match value {
            TupleValue::Null => (b'n', None),
            TupleValue::UnchangedToast => (b'u', None),
            TupleValue::Text(data) => (b't', Some(data)),
            TupleValue::Binary(data) => (b'b', Some(data)),
        };
        out.push(kind);
        if let Some(data) = data {
            // pgoutput sent the length as an i32.
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
    }
}

fn corrupt(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("spill file holds {what}: the file was changed while it was held"),
    )
}

/// Reads a record; values are slices of it, not copies.
struct Cursor {
    bytes: Bytes,
    at: usize,
}

impl Cursor {
    fn take(&mut self, n: usize) -> io::Result<Bytes> {
        if self.bytes.len() - self.at < n {
            return Err(corrupt("a truncated record"));
        }
        let taken = self.bytes.slice(self.at..self.at + n);
        self.at += n;
        Ok(taken)
    }

    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> io::Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn tuple(&mut self) -> io::Result<Tuple> {
        let n = self.u16()?;
        let mut values = Vec::with_capacity(n.into());
        for _ in 0..n {
            values.push(match self.u8()? {
                b'n' => TupleValue::Null,
                b'u' => TupleValue::UnchangedToast,
                b't' => {
                    let len = self.u32()? as usize;
                    TupleValue::Text(self.take(len)?)
                }
                b'b' => {
                    let len = self.u32()? as usize;
                    TupleValue::Binary(self.take(len)?)
                }
                _ => return Err(corrupt("an unknown value kind")),
            });
        }
        Ok(Tuple(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pgoutput::{RelationColumn, ReplicaIdentity};

    fn relation(name: &str) -> Arc<Relation> {
        Arc::new(Relation {
            id: 1,
            namespace: "public".into(),
            name: name.into(),
            replica_identity: ReplicaIdentity::Full,
            columns: vec![RelationColumn::new("id", 23, -1, true)],
        })
    }

    #[test]
    fn rows_read_back_as_written_with_their_relation() {
        let (a, b) = (relation("a"), relation("b"));
        let text = |s: &str| TupleValue::Text(Bytes::copy_from_slice(s.as_bytes()));
        let rows = vec![
            SpilledRow {
                op: Op::Insert,
                own: 7,
                relation: a.clone(),
                new: Some(Tuple(vec![text("1"), TupleValue::Null])),
                old: None,
            },
            SpilledRow {
                op: Op::Update,
                own: 8,
                relation: b.clone(),
                new: Some(Tuple(vec![
                    TupleValue::UnchangedToast,
                    TupleValue::Binary(Bytes::from_static(&[0, 1, 2])),
                ])),
                old: Some(Tuple(vec![text(""), text("old")])),
            },
            SpilledRow {
                op: Op::Truncate,
                own: 7,
                relation: a.clone(),
                new: None,
                old: None,
            },
        ];
        let mut writer = SpillWriter::create(&SpillMedia::memory()).unwrap();
        for row in &rows {
            writer
                .write(
                    row.op,
                    row.own,
                    &row.relation,
                    row.new.as_ref(),
                    row.old.as_ref(),
                )
                .unwrap();
        }
        assert_eq!(writer.records(), 3);
        assert!(writer.written() > 20);
        let mut reader = writer.finish().unwrap();
        let mut read = Vec::new();
        while let Some(row) = reader.next_row().unwrap() {
            read.push(row);
        }
        assert_eq!(read, rows);
        assert!(Arc::ptr_eq(&read[2].relation, &a) && Arc::ptr_eq(&read[1].relation, &b));
        assert_eq!(reader.remaining(), 0);
    }

    #[test]
    fn media_that_cannot_be_had_are_an_error() {
        let media = SpillMedia::new("nowhere", "look elsewhere", || {
            Err(io::Error::new(io::ErrorKind::NotFound, "gone"))
        });
        let err = SpillWriter::create(&media).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            (media.place(), media.remedy()),
            ("nowhere", "look elsewhere")
        );
    }
}
