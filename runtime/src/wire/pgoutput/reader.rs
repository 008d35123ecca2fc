//! A bounds-checked cursor over one pgoutput message.
//!
//! Every read names the field it is after, so a short or malformed message becomes a
//! [`DecodeError`] that says which message and which field, never a slice panic. Values are
//! handed out as [`Bytes`]: when the message itself arrived as `Bytes`, a value is a cheap
//! reference-counted view into it; otherwise it is copied out of the borrowed slice.

use bytes::Bytes;

use super::DecodeError;

pub(super) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// The same bytes as `data`, when the caller owns them as `Bytes`: lets values share the
    /// frame's allocation instead of copying.
    owner: Option<&'a Bytes>,
    /// The message being decoded, for error context.
    message: &'static str,
}

impl<'a> Reader<'a> {
    pub(super) fn new(data: &'a [u8], owner: Option<&'a Bytes>) -> Self {
        Reader {
            data,
            pos: 0,
            owner,
            message: "pgoutput",
        }
    }

    /// Names the message the following reads belong to.
    pub(super) fn set_message(&mut self, message: &'static str) {
        self.message = message;
    }

    pub(super) fn message(&self) -> &'static str {
        self.message
    }

    #[inline]
    pub(super) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    #[inline]
    fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or_default()
    }

    fn truncated(&self, what: &'static str, needed: usize) -> DecodeError {
        DecodeError::Truncated {
            message: self.message,
            what,
            needed,
            remaining: self.remaining(),
        }
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        match self.rest().first_chunk::<N>() {
            Some(chunk) => {
                self.pos += N;
                Ok(*chunk)
            }
            None => Err(self.truncated(what, N)),
        }
    }

    #[inline]
    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.array::<1>(what).map(|[b]| b)
    }

    #[inline]
    pub(super) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.array(what).map(u16::from_be_bytes)
    }

    #[inline]
    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.array(what).map(u32::from_be_bytes)
    }

    #[inline]
    pub(super) fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        self.array(what).map(i32::from_be_bytes)
    }

    #[inline]
    pub(super) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.array(what).map(u64::from_be_bytes)
    }

    #[inline]
    pub(super) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        self.array(what).map(i64::from_be_bytes)
    }

    /// An `Int32` byte count; PostgreSQL never sends a negative one.
    #[inline]
    pub(super) fn len(&mut self, what: &'static str) -> Result<usize, DecodeError> {
        let len = self.i32(what)?;
        usize::try_from(len).map_err(|_| DecodeError::NegativeLength {
            message: self.message,
            what,
            len,
        })
    }

    /// A NUL-terminated UTF-8 string; the terminator is consumed, not returned.
    pub(super) fn cstr(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let rest = self.rest();
        let Some(nul) = rest.iter().position(|&b| b == 0) else {
            return Err(DecodeError::UnterminatedString {
                message: self.message,
                what,
            });
        };
        let raw = rest.get(..nul).unwrap_or_default();
        let text = std::str::from_utf8(raw).map_err(|e| DecodeError::InvalidUtf8 {
            message: self.message,
            what,
            valid_up_to: e.valid_up_to(),
        })?;
        self.pos += nul + 1;
        Ok(text)
    }

    /// `len` bytes as a value.
    #[inline]
    pub(super) fn bytes(&mut self, len: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        let Some(end) = start.checked_add(len).filter(|&end| end <= self.data.len()) else {
            return Err(self.truncated(what, len));
        };
        let value = match (self.owner, self.data.get(start..end)) {
            // `owner` holds exactly the bytes of `data`, so the range checked above is in
            // bounds for it too.
            (Some(owner), Some(_)) if owner.len() == self.data.len() => owner.slice(start..end),
            (_, Some(slice)) => Bytes::copy_from_slice(slice),
            (_, None) => return Err(self.truncated(what, len)),
        };
        self.pos = end;
        Ok(value)
    }

    /// The message must end here: anything left over means it was misread.
    pub(super) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            remaining => Err(DecodeError::TrailingBytes {
                message: self.message,
                remaining,
            }),
        }
    }
}
