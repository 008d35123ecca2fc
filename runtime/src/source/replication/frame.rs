//! The replication sub-protocol carried inside `CopyData`, as pure functions over bytes.
//!
//! Server to client: `w` XLogData (a chunk of decoded WAL, for pgoutput one logical message) and
//! `k` primary keepalive. Client to server: `r` standby status update. Timestamps on this
//! protocol are microseconds since 2000-01-01 00:00:00 UTC. Encoders exist for both directions so
//! that a simulated server in tests speaks exactly the bytes a real one does.

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::message::backend::{Header, Message};

use super::XLogData;
use crate::Lsn;

pub const XLOG_DATA_TAG: u8 = b'w';
pub const PRIMARY_KEEPALIVE_TAG: u8 = b'k';
pub const STANDBY_STATUS_UPDATE_TAG: u8 = b'r';
pub const COPY_BOTH_RESPONSE_TAG: u8 = b'W';
pub const COPY_DATA_TAG: u8 = b'd';

/// Tag, WAL start, WAL end, send time.
pub const XLOG_DATA_HEADER_LEN: usize = 1 + 8 + 8 + 8;
/// Tag, WAL end, send time, reply flag.
pub const KEEPALIVE_LEN: usize = 1 + 8 + 8 + 1;
/// Tag, write, flush, apply, client time, reply flag.
pub const STATUS_UPDATE_LEN: usize = 1 + 8 + 8 + 8 + 8 + 1;

/// Seconds from the Unix epoch to the PostgreSQL epoch (2000-01-01).
const PG_EPOCH_UNIX_SECS: u64 = 946_684_800;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("{kind} frame is {len} bytes, shorter than its {need}-byte header")]
    Truncated {
        kind: &'static str,
        len: usize,
        need: usize,
    },
    #[error("unknown replication frame tag {tag:#04x} ({len} bytes)")]
    UnknownTag { tag: u8, len: usize },
    #[error("empty CopyData frame")]
    Empty,
}

/// The server asks for (or just offers) its position; see [`decode_server_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// The end of WAL on the server when it sent this.
    pub wal_end: Lsn,
    pub send_time: i64,
    /// The server wants a status update now (it is nearing `wal_sender_timeout`).
    pub reply_requested: bool,
}

/// One `CopyData` payload from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerFrame {
    XLogData(XLogData),
    Keepalive(Keepalive),
}

/// The client's acknowledgement: how far it has written, flushed and applied the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusUpdate {
    pub write: Lsn,
    pub flush: Lsn,
    pub apply: Lsn,
    pub client_time: i64,
    pub reply_requested: bool,
}

/// Microseconds since 2000-01-01 UTC, the clock of the replication protocol.
pub fn pg_timestamp(time: SystemTime) -> i64 {
    let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
    match time.duration_since(pg_epoch) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |m| -m),
    }
}

/// The inverse of [`pg_timestamp`].
pub fn system_time(pg_micros: i64) -> SystemTime {
    let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
    let offset = Duration::from_micros(pg_micros.unsigned_abs());
    if pg_micros >= 0 {
        pg_epoch + offset
    } else {
        pg_epoch - offset
    }
}

/// Decodes the payload of a `CopyData` message sent by the server. The XLogData payload shares
/// `frame`'s memory: no bytes are copied.
pub fn decode_server_frame(frame: Bytes) -> Result<ServerFrame, FrameError> {
    let len = frame.len();
    match frame.first() {
        None => Err(FrameError::Empty),
        Some(&XLOG_DATA_TAG) => {
            if len < XLOG_DATA_HEADER_LEN {
                return Err(FrameError::Truncated {
                    kind: "XLogData",
                    len,
                    need: XLOG_DATA_HEADER_LEN,
                });
            }
            let mut header = &frame[1..XLOG_DATA_HEADER_LEN];
            let wal_start = Lsn(header.get_u64());
            let wal_end = Lsn(header.get_u64());
            let send_time = header.get_i64();
            Ok(ServerFrame::XLogData(XLogData {
                wal_start,
                wal_end,
                send_time,
                data: frame.slice(XLOG_DATA_HEADER_LEN..),
            }))
        }
        Some(&PRIMARY_KEEPALIVE_TAG) => {
            if len < KEEPALIVE_LEN {
                return Err(FrameError::Truncated {
                    kind: "primary keepalive",
                    len,
                    need: KEEPALIVE_LEN,
                });
            }
            let mut body = &frame[1..KEEPALIVE_LEN];
            Ok(ServerFrame::Keepalive(Keepalive {
                wal_end: Lsn(body.get_u64()),
                send_time: body.get_i64(),
                reply_requested: body.get_u8() != 0,
            }))
        }
        Some(&tag) => Err(FrameError::UnknownTag { tag, len }),
    }
}

/// Appends a whole `CopyData` message carrying a standby status update.
pub fn encode_status_update(update: &StatusUpdate, out: &mut BytesMut) {
    out.reserve(5 + STATUS_UPDATE_LEN);
    out.put_u8(COPY_DATA_TAG);
    out.put_i32((4 + STATUS_UPDATE_LEN) as i32);
    out.put_u8(STANDBY_STATUS_UPDATE_TAG);
    out.put_u64(update.write.0);
    out.put_u64(update.flush.0);
    out.put_u64(update.apply.0);
    out.put_i64(update.client_time);
    out.put_u8(u8::from(update.reply_requested));
}

/// Decodes a status update payload (what a server reads); used by simulated servers in tests.
pub fn decode_status_update(payload: &[u8]) -> Result<StatusUpdate, FrameError> {
    let len = payload.len();
    if len < STATUS_UPDATE_LEN {
        return Err(FrameError::Truncated {
            kind: "standby status update",
            len,
            need: STATUS_UPDATE_LEN,
        });
    }
    if payload[0] != STANDBY_STATUS_UPDATE_TAG {
        return Err(FrameError::UnknownTag {
            tag: payload[0],
            len,
        });
    }
    let mut body = &payload[1..];
    Ok(StatusUpdate {
        write: Lsn(body.get_u64()),
        flush: Lsn(body.get_u64()),
        apply: Lsn(body.get_u64()),
        client_time: body.get_i64(),
        reply_requested: body.get_u8() != 0,
    })
}

/// Appends a whole `CopyData` message carrying a primary keepalive (server side).
pub fn encode_keepalive(keepalive: &Keepalive, out: &mut BytesMut) {
    out.reserve(5 + KEEPALIVE_LEN);
    out.put_u8(COPY_DATA_TAG);
    out.put_i32((4 + KEEPALIVE_LEN) as i32);
    out.put_u8(PRIMARY_KEEPALIVE_TAG);
    out.put_u64(keepalive.wal_end.0);
    out.put_i64(keepalive.send_time);
    out.put_u8(u8::from(keepalive.reply_requested));
}

/// Appends a whole `CopyData` message carrying XLogData (server side).
pub fn encode_xlog_data(frame: &XLogData, out: &mut BytesMut) {
    out.reserve(5 + XLOG_DATA_HEADER_LEN + frame.data.len());
    out.put_u8(COPY_DATA_TAG);
    out.put_i32((4 + XLOG_DATA_HEADER_LEN + frame.data.len()) as i32);
    out.put_u8(XLOG_DATA_TAG);
    out.put_u64(frame.wal_start.0);
    out.put_u64(frame.wal_end.0);
    out.put_i64(frame.send_time);
    out.put_slice(&frame.data);
}

/// A backend message: everything `postgres-protocol` parses, plus `CopyBothResponse`, which it
/// does not know and which is the one message that opens a replication stream.
pub(crate) enum Backend {
    CopyBothResponse,
    Message(Message),
}

impl Backend {
    /// The message's name in the protocol documentation, for error messages.
    pub(crate) fn name(&self) -> &'static str {
        let Backend::Message(message) = self else {
            return "CopyBothResponse";
        };
        match message {
            Message::AuthenticationCleartextPassword
            | Message::AuthenticationGss
            | Message::AuthenticationKerberosV5
            | Message::AuthenticationMd5Password(_)
            | Message::AuthenticationOk
            | Message::AuthenticationScmCredential
            | Message::AuthenticationSspi
            | Message::AuthenticationGssContinue(_)
            | Message::AuthenticationSasl(_)
            | Message::AuthenticationSaslContinue(_)
            | Message::AuthenticationSaslFinal(_) => "Authentication",
            Message::BackendKeyData(_) => "BackendKeyData",
            Message::BindComplete => "BindComplete",
            Message::CloseComplete => "CloseComplete",
            Message::CommandComplete(_) => "CommandComplete",
            Message::CopyData(_) => "CopyData",
            Message::CopyDone => "CopyDone",
            Message::CopyInResponse(_) => "CopyInResponse",
            Message::CopyOutResponse(_) => "CopyOutResponse",
            Message::DataRow(_) => "DataRow",
            Message::EmptyQueryResponse => "EmptyQueryResponse",
            Message::ErrorResponse(_) => "ErrorResponse",
            Message::NoData => "NoData",
            Message::NoticeResponse(_) => "NoticeResponse",
            Message::NotificationResponse(_) => "NotificationResponse",
            Message::ParameterDescription(_) => "ParameterDescription",
            Message::ParameterStatus(_) => "ParameterStatus",
            Message::ParseComplete => "ParseComplete",
            Message::PortalSuspended => "PortalSuspended",
            Message::ReadyForQuery(_) => "ReadyForQuery",
            Message::RowDescription(_) => "RowDescription",
            _ => "unknown",
        }
    }
}

/// Splits one complete backend message off the front of `buf`, or `None` until more bytes arrive.
pub(crate) fn parse_backend(buf: &mut BytesMut) -> io::Result<Option<Backend>> {
    let Some(header) = Header::parse(buf)? else {
        return Ok(None);
    };
    if header.tag() != COPY_BOTH_RESPONSE_TAG {
        return Message::parse(buf).map(|m| m.map(Backend::Message));
    }
    // The body (overall format and per-column formats) carries nothing a replication client
    // needs, so only its presence is checked.
    let total = header.len() as usize + 1;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    buf.advance(total);
    Ok(Some(Backend::CopyBothResponse))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LSN_A: Lsn = Lsn(0x0000_0001_2345_6789);
    const LSN_B: Lsn = Lsn(0x0000_0001_2345_6800);

    #[test]
    fn status_update_bytes_are_exact() {
        let mut out = BytesMut::new();
        let update = StatusUpdate {
            write: LSN_A,
            flush: LSN_A,
            apply: LSN_A,
            client_time: 0x0102_0304_0506_0708,
            reply_requested: false,
        };
        encode_status_update(&update, &mut out);
        let mut expected = vec![b'd', 0, 0, 0, 38, b'r'];
        for _ in 0..3 {
            expected.extend_from_slice(&[0, 0, 0, 1, 0x23, 0x45, 0x67, 0x89]);
        }
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0]);
        assert_eq!(&out[..], &expected[..]);
        assert_eq!(decode_status_update(&out[5..]).unwrap(), update);
    }

    #[test]
    fn keepalive_round_trips_byte_exact() {
        let keepalive = Keepalive {
            wal_end: LSN_B,
            send_time: -2,
            reply_requested: true,
        };
        let mut out = BytesMut::new();
        encode_keepalive(&keepalive, &mut out);
        let mut expected = vec![b'd', 0, 0, 0, 22, b'k', 0, 0, 0, 1, 0x23, 0x45, 0x68, 0x00];
        expected.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 1]);
        assert_eq!(&out[..], &expected[..]);
        let payload = out.freeze().slice(5..);
        assert_eq!(
            decode_server_frame(payload).unwrap(),
            ServerFrame::Keepalive(keepalive)
        );
    }

    #[test]
    fn xlog_data_payload_is_a_view_of_the_frame() {
        let frame = XLogData {
            wal_start: LSN_A,
            wal_end: LSN_B,
            send_time: 7,
            data: Bytes::from_static(b"B123"),
        };
        let mut out = BytesMut::new();
        encode_xlog_data(&frame, &mut out);
        assert_eq!(&out[..6], &[b'd', 0, 0, 0, 33, b'w']);
        assert_eq!(&out[6..14], &LSN_A.0.to_be_bytes());
        assert_eq!(&out[14..22], &LSN_B.0.to_be_bytes());
        assert_eq!(&out[22..30], &7i64.to_be_bytes());
        let payload = out.freeze().slice(5..);
        let ServerFrame::XLogData(decoded) = decode_server_frame(payload.clone()).unwrap() else {
            panic!("not XLogData");
        };
        assert_eq!(decoded, frame);
        assert_eq!(
            decoded.data.as_ptr(),
            payload[XLOG_DATA_HEADER_LEN..].as_ptr(),
            "payload was copied"
        );
    }

    #[test]
    fn empty_xlog_data_is_allowed() {
        let mut payload = vec![b'w'];
        payload.extend_from_slice(&[0; 24]);
        let ServerFrame::XLogData(frame) = decode_server_frame(Bytes::from(payload)).unwrap()
        else {
            panic!("not XLogData");
        };
        assert!(frame.data.is_empty());
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        assert_eq!(decode_server_frame(Bytes::new()), Err(FrameError::Empty));
        assert_eq!(
            decode_server_frame(Bytes::from_static(&[b'w', 0, 0])),
            Err(FrameError::Truncated {
                kind: "XLogData",
                len: 3,
                need: 25
            })
        );
        assert_eq!(
            decode_server_frame(Bytes::from_static(&[b'k'; 17])),
            Err(FrameError::Truncated {
                kind: "primary keepalive",
                len: 17,
                need: 18
            })
        );
        assert_eq!(
            decode_server_frame(Bytes::from_static(b"x1")),
            Err(FrameError::UnknownTag { tag: b'x', len: 2 })
        );
        assert!(decode_status_update(&[b'r'; 10]).is_err());
        assert!(decode_status_update(&[b'k'; 34]).is_err());
    }

    #[test]
    fn timestamps_count_from_2000() {
        assert_eq!(
            pg_timestamp(UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS)),
            0
        );
        assert_eq!(
            pg_timestamp(UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS + 1)),
            1_000_000
        );
        assert_eq!(pg_timestamp(UNIX_EPOCH), -946_684_800_000_000);
        let now = SystemTime::now();
        let round = system_time(pg_timestamp(now));
        assert!(now.duration_since(round).unwrap() < Duration::from_micros(1));
        assert_eq!(system_time(-946_684_800_000_000), UNIX_EPOCH);
    }

    #[test]
    fn copy_both_response_is_recognised_then_normal_messages_follow() {
        // CopyBothResponse: format 0, zero columns; then a CopyData keepalive split across reads.
        let mut wire = BytesMut::from(&[b'W', 0, 0, 0, 7, 0, 0, 0][..]);
        let mut keepalive = BytesMut::new();
        encode_keepalive(
            &Keepalive {
                wal_end: LSN_A,
                send_time: 1,
                reply_requested: false,
            },
            &mut keepalive,
        );
        wire.extend_from_slice(&keepalive[..10]);
        assert!(matches!(
            parse_backend(&mut wire).unwrap(),
            Some(Backend::CopyBothResponse)
        ));
        assert!(
            parse_backend(&mut wire).unwrap().is_none(),
            "half a message must wait"
        );
        wire.extend_from_slice(&keepalive[10..]);
        let Some(Backend::Message(Message::CopyData(body))) = parse_backend(&mut wire).unwrap()
        else {
            panic!("expected CopyData");
        };
        assert!(
            matches!(decode_server_frame(body.into_bytes()), Ok(ServerFrame::Keepalive(k)) if k.wal_end == LSN_A)
        );
        assert!(wire.is_empty());
    }

    #[test]
    fn partial_copy_both_response_waits() {
        let mut wire = BytesMut::from(&[b'W', 0, 0, 0, 7, 0][..]);
        assert!(parse_backend(&mut wire).unwrap().is_none());
        assert_eq!(wire.len(), 6);
    }
}
