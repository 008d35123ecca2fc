use bytes::Bytes;

use super::*;
use crate::Lsn;
use crate::stream::assemble::Assembled;

fn transaction(xid: u32, rows: usize) -> Assembled {
    let change = crate::stream::change::Change {
        op: crate::stream::change::Op::Insert,
        relation: std::sync::Arc::new(crate::wire::pgoutput::Relation {
            id: 1,
            namespace: "public".into(),
            name: "t".into(),
            replica_identity: crate::wire::pgoutput::ReplicaIdentity::Default,
            columns: Vec::new(),
        }),
        seq: 0,
        new: Some(Vec::new()),
        old: None,
    };
    let lsn = Lsn(u64::from(xid) * 0x100);
    Assembled {
        transaction: Transaction {
            xid,
            commit_lsn: lsn,
            end_lsn: Lsn(lsn.0 + 8),
            commit_time: 0,
            changes: vec![change; rows],
            messages: Vec::new(),
            load: false,
        },
        preceding: vec![Message {
            prefix: "p".into(),
            content: Bytes::from_static(b"x").to_vec(),
            lsn,
            before_seq: 0,
        }],
        bytes: 100 * rows,
    }
}

#[test]
fn batcher_cuts_on_rows_bytes_and_age() {
    let limits = BatchLimits {
        max_rows: 3,
        max_bytes: 1_000,
        max_delay: Duration::from_secs(1),
    };
    let mut b = Batcher::new(limits);
    let t0 = Instant::now();
    assert!(!b.is_due(t0) && b.deadline().is_none());
    b.push(transaction(1, 1), t0);
    assert!(!b.is_due(t0 + Duration::from_millis(999)));
    assert!(b.is_due(t0 + Duration::from_secs(1)), "age limit reached");
    b.push(transaction(2, 2), t0 + Duration::from_millis(10));
    assert!(
        b.is_due(t0 + Duration::from_millis(10)),
        "row limit reached"
    );
    let batch = b.take().unwrap();
    assert_eq!(batch.transactions.len(), 2);
    assert_eq!(batch.lsn_range(), Some((Lsn(0x100), Lsn(0x200))));
    // Each transaction's preceding message is placed before it.
    let placed: Vec<u32> = batch.messages.iter().map(|m| m.before_seq).collect();
    assert_eq!(placed, [0, 1]);
    assert!(b.take().is_none() && b.deadline().is_none());

    b.push(transaction(3, 1), t0);
    assert!(!b.is_due(t0));
    b.push(transaction(4, 1), t0);
    assert_eq!(b.held_bytes(), 200);
    assert!(!b.is_due(t0), "under every limit");
    b.take();
    b.push(transaction(5, 2), t0);
    assert!(!b.is_due(t0));
    b.push(
        Assembled {
            bytes: 800,
            ..transaction(6, 0)
        },
        t0,
    );
    assert!(b.is_due(t0), "byte limit reached");
}
