//! Unchanged TOAST values, without IO.
//!
//! PostgreSQL stores a large value of a varlena type (text, bytea, jsonb, ...) out of line, in
//! the table's TOAST relation. An update that leaves such a value untouched does not copy it,
//! and pgoutput does not send it either: the new row holds [`Value::UnchangedToast`] in its
//! place. Whether the value can be recovered depends on the table's replica identity:
//!
//! - `REPLICA IDENTITY FULL`: every update carries the whole old row, and PostgreSQL inlines
//!   TOASTed values into that old image before logging it. The untouched value is therefore in
//!   the old row, and [`fill_from_old_image`] copies it into the new one, so the lake and the
//!   transforms see the complete row.
//! - any other identity: the old image is the key at most, and the value is gone from the
//!   stream. `source.unchanged_toast` decides before streaming starts: refuse such tables
//!   (the default, checked in [`provision`](crate::source::provision)), or land the value as null.

use crate::stream::change::Value;
use crate::wire::pgoutput::{Relation, ReplicaIdentity};

/// The new row of a change with every unchanged TOAST value filled from the old row, when the
/// relation's updates carry the whole old row (`REPLICA IDENTITY FULL`). Rows of any other
/// relation, and changes without both rows, are returned as they came.
pub fn fill_from_old_image(
    relation: &Relation,
    new: Option<Vec<Value>>,
    old: Option<&[Value]>,
) -> Option<Vec<Value>> {
    let mut new = new?;
    if relation.replica_identity == ReplicaIdentity::Full
        && let Some(old) = old
    {
        fill_unchanged(&mut new, old);
    }
    Some(new)
}

/// Replace each [`Value::UnchangedToast`] of `new` with the value at the same position of
/// `old`, the whole old row; returns how many were filled. A position the old row lacks, or
/// holds no value for either, stays unchanged.
pub fn fill_unchanged(new: &mut [Value], old: &[Value]) -> usize {
    let mut filled = 0;
    for (value, previous) in new.iter_mut().zip(old) {
        if *value == Value::UnchangedToast && *previous != Value::UnchangedToast {
            *value = previous.clone();
            filled += 1;
        }
    }
    filled
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pgoutput::RelationColumn;

    fn relation(replica_identity: ReplicaIdentity) -> Relation {
        let column = |name: &str, type_oid| RelationColumn::new(name, type_oid, -1, name == "id");
        Relation {
            id: 16384,
            namespace: "public".into(),
            name: "docs".into(),
            replica_identity,
            columns: vec![column("id", 23), column("title", 25), column("body", 25)],
        }
    }

    fn big() -> Value {
        Value::Text("x".repeat(100_000))
    }

    #[test]
    fn a_full_old_row_fills_the_untouched_value() {
        let new = vec![
            Value::Int4(1),
            Value::Text("new title".into()),
            Value::UnchangedToast,
        ];
        let old = [Value::Int4(1), Value::Text("old title".into()), big()];
        let filled = fill_from_old_image(&relation(ReplicaIdentity::Full), Some(new), Some(&old));
        assert_eq!(
            filled,
            Some(vec![Value::Int4(1), Value::Text("new title".into()), big()])
        );
    }

    #[test]
    fn values_the_update_sent_are_kept() {
        let mut new = vec![Value::Int4(1), Value::Null, Value::Text("short".into())];
        let old = [Value::Int4(1), Value::Text("was set".into()), big()];
        assert_eq!(fill_unchanged(&mut new, &old), 0);
        assert_eq!(
            new,
            [Value::Int4(1), Value::Null, Value::Text("short".into())]
        );
    }

    #[test]
    fn every_unchanged_value_is_filled_and_counted() {
        let mut new = vec![Value::Int4(2), Value::UnchangedToast, Value::UnchangedToast];
        let old = [
            Value::Int4(2),
            Value::Json("{}".into()),
            Value::Bytea(vec![0; 3]),
        ];
        assert_eq!(fill_unchanged(&mut new, &old), 2);
        assert_eq!(new, old);
    }

    #[test]
    fn key_images_do_not_fill_anything() {
        // A key-only old row holds nulls outside the key: they are not the untouched values.
        let new = vec![
            Value::Int4(1),
            Value::Text("t".into()),
            Value::UnchangedToast,
        ];
        let key = [Value::Int4(1), Value::Null, Value::Null];
        for identity in [
            ReplicaIdentity::Default,
            ReplicaIdentity::Index,
            ReplicaIdentity::Nothing,
        ] {
            let row = fill_from_old_image(&relation(identity), Some(new.clone()), Some(&key));
            assert_eq!(row.as_deref(), Some(new.as_slice()), "{identity:?}");
        }
    }

    #[test]
    fn rows_without_an_old_image_or_a_new_row_pass_through() {
        let full = relation(ReplicaIdentity::Full);
        let new = vec![Value::Int4(1), Value::Null, Value::UnchangedToast];
        assert_eq!(
            fill_from_old_image(&full, Some(new.clone()), None),
            Some(new)
        );
        assert_eq!(
            fill_from_old_image(&full, None, Some(&[Value::Int4(1)])),
            None
        );
    }

    #[test]
    fn the_assembler_fills_updates_of_full_identity_tables() {
        use crate::Lsn;
        use crate::stream::assemble::Assembler;
        use crate::wire::pgoutput::{LogicalMessage, OldTuple, Tuple, TupleValue};
        use bytes::Bytes;
        use std::sync::Arc;

        let text = |s: &str| TupleValue::Text(Bytes::copy_from_slice(s.as_bytes()));
        let body = "x".repeat(100_000);
        let mut assembler = Assembler::new();
        let mut push = |m| assembler.push(m).unwrap().map(|c| c.into_whole().unwrap());
        push(LogicalMessage::Begin {
            final_lsn: Lsn(0x100),
            commit_time: 0,
            xid: 9,
        });
        push(LogicalMessage::Update {
            xid: None,
            relation: Arc::new(relation(ReplicaIdentity::Full)),
            old: Some(OldTuple::Full(Tuple(vec![
                text("1"),
                text("old"),
                text(&body),
            ]))),
            new: Tuple(vec![text("1"), text("new"), TupleValue::UnchangedToast]),
        });
        let done = push(LogicalMessage::Commit {
            flags: 0,
            commit_lsn: Lsn(0x100),
            end_lsn: Lsn(0x108),
            commit_time: 0,
        })
        .unwrap();
        let change = &done.transaction.changes[0];
        assert_eq!(
            change.new.as_deref(),
            Some(
                [
                    Value::Int4(1),
                    Value::Text("new".into()),
                    Value::Text(body.clone())
                ]
                .as_slice()
            )
        );
        assert_eq!(change.old.as_ref().unwrap()[2], Value::Text(body));
    }

    #[test]
    fn a_short_or_unchanged_old_row_never_panics() {
        let mut new = vec![Value::UnchangedToast, Value::UnchangedToast];
        assert_eq!(fill_unchanged(&mut new, &[Value::UnchangedToast]), 0);
        assert_eq!(new, [Value::UnchangedToast, Value::UnchangedToast]);
        assert_eq!(fill_unchanged(&mut [], &[Value::Int4(1)]), 0);
    }
}
