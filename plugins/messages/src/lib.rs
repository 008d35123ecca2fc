//! Passes every change through and lands every logical decoding message
//! (`pg_logical_emit_message`) as one row of the declared output `messages`.
//!
//! The host gives each message row its identity from its origin: a transactional message's
//! row carries its transaction's commit and its index among the transaction's messages; a
//! non-transactional one travels with the transaction that commits after it and numbers on
//! from that transaction's own messages, so a replay lands the same identities.

use tributary_guest::*;

/// The declared output.
const OUTPUT: &str = "messages";

struct Messages;

impl Transform for Messages {
    fn describe() -> PluginInfo {
        PluginInfo::new("messages", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        no_settings(&config)?;
        let columns = vec![
            OutputColumn::new("prefix", ScalarType::Text).not_null(),
            OutputColumn::new("content", ScalarType::Bytea).not_null(),
            // The content as text when it is UTF-8, else null.
            OutputColumn::new("text", ScalarType::Text),
            OutputColumn::new("lsn", ScalarType::Int8).not_null(),
            OutputColumn::new("transactional", ScalarType::Boolean).not_null(),
            // How many of the transaction's changes precede a transactional message; null for
            // a non-transactional one, whose position counts transactions of the batch and so
            // depends on where batches were cut.
            OutputColumn::new("before_seq", ScalarType::Int8),
        ];
        Ok(Setup::new()
            .reads_columns(&[])
            .without_old_images()
            .with_messages()
            .output(OUTPUT, columns))
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        let mut emits: Vec<Emit> = batch.changes().map(|c| c.keep()).collect();
        for (t, transaction) in batch.transactions.iter().enumerate() {
            for (m, message) in transaction.messages.iter().enumerate() {
                let origin = Origin::Message(MessageRef {
                    transaction: t as u32,
                    message: m as u32,
                });
                emits.push(row(origin, message, true));
            }
        }
        for (i, message) in batch.messages.iter().enumerate() {
            emits.push(row(Origin::BatchMessage(i as u32), message, false));
        }
        Ok(emits.into())
    }
}

fn row(origin: Origin, message: &Message, transactional: bool) -> Emit {
    let text = match std::str::from_utf8(&message.content) {
        Ok(text) => Value::Text(text.to_owned()),
        Err(_) => Value::Null,
    };
    Emit::Row(Row {
        target: Target::Declared(OUTPUT.to_owned()),
        origin,
        sub: 0,
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
    })
}

export_transform!(Messages);
