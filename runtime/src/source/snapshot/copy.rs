//! PostgreSQL's binary `COPY` format, read without IO.
//!
//! `COPY ... TO STDOUT (FORMAT binary)` sends a signature, a header, then one tuple per row
//! (a field count, and per field a length, `-1` for null, followed by the value in the type's
//! binary send form, the same form `binary 'true'` pgoutput tuples carry), then a trailer.
//! [`CopyReader`] takes the bytes in whatever pieces they arrive and hands out whole rows.

use bytes::{Buf, Bytes, BytesMut};

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags and the length of the header extension.
const HEADER: usize = SIGNATURE.len() + 4 + 4;
/// Bit 16 says every tuple carries an OID; bits 17 to 31 are reserved for flags a reader
/// must understand.
const CRITICAL_FLAGS: u32 = 0xffff_0000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    #[error("the COPY data does not start with the binary COPY signature")]
    Signature,
    #[error("the binary COPY header has flags {0:#x} this reader does not understand")]
    Flags(u32),
    #[error("a binary COPY row has {got} fields, the query selected {expected}")]
    Arity { got: i16, expected: usize },
    #[error("a binary COPY field has the invalid length {0}")]
    Length(i32),
    #[error("the COPY data ended inside {0}")]
    Truncated(&'static str),
    #[error("the COPY data goes on after its trailer")]
    Trailing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Rows,
    Done,
}

/// One row: each field's bytes, `None` for null.
pub type CopyRow = Vec<Option<Bytes>>;

/// Reads binary COPY data pushed to it in pieces.
#[derive(Debug)]
pub struct CopyReader {
    buf: BytesMut,
    state: State,
    columns: usize,
}

impl CopyReader {
    /// A reader of rows of `columns` fields.
    pub fn new(columns: usize) -> CopyReader {
        CopyReader {
            buf: BytesMut::new(),
            state: State::Header,
            columns,
        }
    }

    /// The next piece of the data.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole row, or `None` when more data is needed (or the trailer was read).
    pub fn next_row(&mut self) -> Result<Option<CopyRow>, CopyError> {
        if self.state == State::Header && !self.header()? {
            return Ok(None);
        }
        if self.state == State::Done {
            return match self.buf.is_empty() {
                true => Ok(None),
                false => Err(CopyError::Trailing),
            };
        }
        let Some(len) = self.row_len()? else {
            return Ok(None);
        };
        let mut row = self.buf.split_to(len).freeze();
        let count = row.get_i16();
        if count == -1 {
            self.state = State::Done;
            return self.next_row();
        }
        let mut fields = Vec::with_capacity(self.columns);
        for _ in 0..count {
            let len = row.get_i32();
            fields.push(match len {
                -1 => None,
                n => Some(row.split_to(n as usize)),
            });
        }
        Ok(Some(fields))
    }

    /// Check that the data ended where it may: after the trailer, with nothing left over.
    pub fn finish(&self) -> Result<(), CopyError> {
        match self.state {
            State::Header => Err(CopyError::Truncated("the header")),
            State::Rows => Err(CopyError::Truncated("a row (no trailer)")),
            State::Done if !self.buf.is_empty() => Err(CopyError::Trailing),
            State::Done => Ok(()),
        }
    }

    /// Consume the header once it is all there; `false` while it is not.
    fn header(&mut self) -> Result<bool, CopyError> {
        let prefix = SIGNATURE.len().min(self.buf.len());
        if self.buf[..prefix] != SIGNATURE[..prefix] {
            return Err(CopyError::Signature);
        }
        if self.buf.len() < HEADER {
            return Ok(false);
        }
        let flags = u32::from_be_bytes(self.buf[11..15].try_into().expect("4 bytes"));
        if flags & CRITICAL_FLAGS != 0 {
            return Err(CopyError::Flags(flags));
        }
        let extension = u32::from_be_bytes(self.buf[15..19].try_into().expect("4 bytes")) as usize;
        if self.buf.len() < HEADER + extension {
            return Ok(false);
        }
        self.buf.advance(HEADER + extension);
        self.state = State::Rows;
        Ok(true)
    }

    /// The length of the tuple at the front of the buffer, once all of it is there.
    fn row_len(&self) -> Result<Option<usize>, CopyError> {
        let data = &self.buf[..];
        let Some(count) = data.get(..2) else {
            return Ok(None);
        };
        let count = i16::from_be_bytes([count[0], count[1]]);
        if count == -1 {
            return Ok(Some(2));
        }
        if count < 0 || count as usize != self.columns {
            return Err(CopyError::Arity {
                got: count,
                expected: self.columns,
            });
        }
        let mut at = 2;
        for _ in 0..count {
            let Some(len) = data.get(at..at + 4) else {
                return Ok(None);
            };
            let len = i32::from_be_bytes(len.try_into().expect("4 bytes"));
            at += 4;
            match len {
                -1 => {}
                n if n < 0 => return Err(CopyError::Length(n)),
                n => at += n as usize,
            }
        }
        Ok((data.len() >= at).then_some(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Binary COPY data of `rows`, as the server sends it.
    fn copy_data(rows: &[Vec<Option<&[u8]>>]) -> Vec<u8> {
        let mut out = SIGNATURE.to_vec();
        out.extend(0u32.to_be_bytes());
        out.extend(0u32.to_be_bytes());
        for row in rows {
            out.extend((row.len() as i16).to_be_bytes());
            for field in row {
                match field {
                    None => out.extend((-1i32).to_be_bytes()),
                    Some(bytes) => {
                        out.extend((bytes.len() as i32).to_be_bytes());
                        out.extend(*bytes);
                    }
                }
            }
        }
        out.extend((-1i16).to_be_bytes());
        out
    }

    fn read_all(reader: &mut CopyReader) -> Vec<CopyRow> {
        let mut rows = Vec::new();
        while let Some(row) = reader.next_row().unwrap() {
            rows.push(row);
        }
        rows
    }

    #[test]
    fn rows_come_out_whole_however_the_bytes_are_cut() {
        let data = copy_data(&[
            vec![Some(&1i32.to_be_bytes()[..]), Some(b"one")],
            vec![Some(&2i32.to_be_bytes()[..]), None],
            vec![Some(&3i32.to_be_bytes()[..]), Some(b"")],
        ]);
        for piece in [1, 2, 3, 7, data.len()] {
            let mut reader = CopyReader::new(2);
            let mut rows = Vec::new();
            for chunk in data.chunks(piece) {
                reader.push(chunk);
                rows.extend(read_all(&mut reader));
            }
            reader.finish().unwrap();
            let texts: Vec<Option<&[u8]>> = rows.iter().map(|r| r[1].as_deref()).collect();
            assert_eq!(
                texts,
                [Some(&b"one"[..]), None, Some(&b""[..])],
                "pieces of {piece}"
            );
            assert_eq!(rows[2][0].as_deref(), Some(&3i32.to_be_bytes()[..]));
        }
    }

    #[test]
    fn a_header_extension_is_skipped() {
        let mut data = SIGNATURE.to_vec();
        data.extend(0u32.to_be_bytes());
        data.extend(3u32.to_be_bytes());
        data.extend(b"xyz");
        data.extend(1i16.to_be_bytes());
        data.extend(1i32.to_be_bytes());
        data.push(b'a');
        data.extend((-1i16).to_be_bytes());
        let mut reader = CopyReader::new(1);
        reader.push(&data);
        let rows = read_all(&mut reader);
        assert_eq!(rows, [vec![Some(Bytes::from_static(b"a"))]]);
        reader.finish().unwrap();
    }

    #[test]
    fn malformed_data_is_refused() {
        let mut reader = CopyReader::new(1);
        reader.push(b"COPY");
        assert_eq!(reader.next_row(), Err(CopyError::Signature));

        let mut data = SIGNATURE.to_vec();
        data.extend(0x0001_0000u32.to_be_bytes());
        data.extend(0u32.to_be_bytes());
        let mut reader = CopyReader::new(1);
        reader.push(&data);
        assert_eq!(reader.next_row(), Err(CopyError::Flags(0x1_0000)));

        let mut reader = CopyReader::new(3);
        reader.push(&copy_data(&[vec![None]]));
        assert_eq!(
            reader.next_row(),
            Err(CopyError::Arity {
                got: 1,
                expected: 3
            })
        );

        let mut data = copy_data(&[]);
        data.truncate(data.len() - 2);
        data.extend(1i16.to_be_bytes());
        data.extend((-5i32).to_be_bytes());
        let mut reader = CopyReader::new(1);
        reader.push(&data);
        assert_eq!(reader.next_row(), Err(CopyError::Length(-5)));

        let data = copy_data(&[vec![Some(b"abc")]]);
        let mut reader = CopyReader::new(1);
        reader.push(&data[..data.len() - 4]);
        assert_eq!(read_all(&mut reader).len(), 0);
        assert_eq!(
            reader.finish(),
            Err(CopyError::Truncated("a row (no trailer)"))
        );

        let mut data = copy_data(&[]);
        data.push(0);
        let mut reader = CopyReader::new(1);
        reader.push(&data);
        assert_eq!(reader.next_row(), Err(CopyError::Trailing));
        assert_eq!(
            CopyReader::new(1).finish(),
            Err(CopyError::Truncated("the header"))
        );
    }
}
