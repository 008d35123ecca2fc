//! The single bytes that identify pgoutput messages and the parts inside them.

// Message tags: the first byte of every message.
pub const BEGIN: u8 = b'B';
pub const COMMIT: u8 = b'C';
pub const ORIGIN: u8 = b'O';
pub const RELATION: u8 = b'R';
pub const TYPE: u8 = b'Y';
pub const INSERT: u8 = b'I';
pub const UPDATE: u8 = b'U';
pub const DELETE: u8 = b'D';
pub const TRUNCATE: u8 = b'T';
pub const MESSAGE: u8 = b'M';
/// Protocol 2+.
pub const STREAM_START: u8 = b'S';
/// Protocol 2+.
pub const STREAM_STOP: u8 = b'E';
/// Protocol 2+.
pub const STREAM_COMMIT: u8 = b'c';
/// Protocol 2+.
pub const STREAM_ABORT: u8 = b'A';
/// Protocol 3+, two-phase commit.
pub const BEGIN_PREPARE: u8 = b'b';
/// Protocol 3+, two-phase commit.
pub const PREPARE: u8 = b'P';
/// Protocol 3+, two-phase commit. Shares its byte with [`TUPLE_KEY`], which only appears
/// inside update and delete messages.
pub const COMMIT_PREPARED: u8 = b'K';
/// Protocol 3+, two-phase commit.
pub const ROLLBACK_PREPARED: u8 = b'r';
/// Protocol 3+, two-phase commit of a streamed transaction.
pub const STREAM_PREPARE: u8 = b'p';

// Markers before a tuple inside update and delete messages.
/// The new row.
pub const TUPLE_NEW: u8 = b'N';
/// The old replica identity key.
pub const TUPLE_KEY: u8 = b'K';
/// The whole old row (`REPLICA IDENTITY FULL`).
pub const TUPLE_OLD: u8 = b'O';

// The kind byte before each column of a tuple.
pub const COLUMN_NULL: u8 = b'n';
pub const COLUMN_UNCHANGED_TOAST: u8 = b'u';
pub const COLUMN_TEXT: u8 = b't';
pub const COLUMN_BINARY: u8 = b'b';

// `relreplident` in a relation message.
pub const IDENTITY_DEFAULT: u8 = b'd';
pub const IDENTITY_NOTHING: u8 = b'n';
pub const IDENTITY_FULL: u8 = b'f';
pub const IDENTITY_INDEX: u8 = b'i';

/// Relation column flag: part of the replica identity key.
pub const COLUMN_FLAG_KEY: u8 = 1;
/// Logical decoding message flag: emitted inside the transaction.
pub const MESSAGE_FLAG_TRANSACTIONAL: u8 = 1;
/// Stream start flag: the first chunk of this transaction.
pub const STREAM_FIRST_SEGMENT: u8 = 1;
