//! Passes every change through and lands every logical decoding message
//! (`pg_logical_emit_message`) as one row of the declared output `messages`.
//!
//! A transactional message's row carries its transaction's identity and, as `seq`, its index
//! in `transaction.messages`. A non-transactional message travels with the transaction that
//! commits after it (`batch.transactions[before_seq]`) and takes the `seq`s after that
//! transaction's own messages, in order; a replay delivers it with the same transaction, so
//! its identity is stable too.

use tributary_guest::*;

/// The declared output.
const OUTPUT: &str = "messages";

struct Messages;

impl Transform for Messages {
    fn describe() -> PluginInfo {
        let column = |name: &str, type_| OutputColumn {
            name: name.to_owned(),
            type_,
        };
        PluginInfo {
            outputs: vec![Output {
                name: OUTPUT.to_owned(),
                columns: vec![
                    column("prefix", ColumnType::Text),
                    column("content", ColumnType::Bytea),
                    // The content as text when it is UTF-8, else null.
                    column("text", ColumnType::Text),
                    column("lsn", ColumnType::Int8),
                    column("transactional", ColumnType::Boolean),
                    // How many of the transaction's changes precede a transactional message;
                    // null for a non-transactional one, whose position counts transactions of
                    // the batch and so depends on where batches were cut.
                    column("before_seq", ColumnType::Int8),
                ],
            }],
            ..PluginInfo::new("messages", env!("CARGO_PKG_VERSION"))
        }
    }

    fn process(batch: Batch) -> Result<Vec<Emit>, Error> {
        let mut emits: Vec<Emit> = batch.changes().map(|c| c.passthrough()).collect();
        for transaction in &batch.transactions {
            for (seq, message) in transaction.messages.iter().enumerate() {
                emits.push(row(transaction, seq, message, true));
            }
        }
        // Non-transactional messages number on from their transaction's own messages.
        let mut next_seq: Vec<usize> = batch
            .transactions
            .iter()
            .map(|t| t.messages.len())
            .collect();
        for message in &batch.messages {
            let index = message.before_seq as usize;
            let (Some(transaction), Some(seq)) =
                (batch.transactions.get(index), next_seq.get_mut(index))
            else {
                return Err(Error::Fatal(format!(
                    "message at lsn {:#x} names transaction {index} of {}",
                    message.lsn,
                    batch.transactions.len()
                )));
            };
            emits.push(row(transaction, *seq, message, false));
            *seq += 1;
        }
        Ok(emits)
    }
}

fn row(transaction: &Transaction, seq: usize, message: &Message, transactional: bool) -> Emit {
    let text = match std::str::from_utf8(&message.content) {
        Ok(text) => Value::Text(text.to_owned()),
        Err(_) => Value::Null,
    };
    Emit {
        target: Target::Declared(OUTPUT.to_owned()),
        commit_lsn: transaction.commit_lsn,
        seq: seq as u32,
        op: Op::Insert,
        values: vec![
            Value::Text(message.prefix.clone()),
            Value::Bytea(message.content.clone()),
            text,
            Value::Int8(message.lsn as i64),
            Value::Boolean(transactional),
            match transactional {
                true => Value::Int8(i64::from(message.before_seq)),
                false => Value::Null,
            },
        ],
        old: None,
    }
}

export_transform!(Messages);
