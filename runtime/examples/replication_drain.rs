//! Drains a logical slot with the replication client alone and confirms every commit: the
//! ceiling for the whole pipeline, and a check that a stalled consumer keeps the stream alive.
//!
//! ```text
//! cargo run --release -p tributary --example replication_drain -- \
//!     postgres://replicator@host/db SLOT PUBLICATION [--proto 1] [--stall SECS] [--idle SECS] [--status-interval SECS]
//! ```
//!
//! Creates the slot if it is missing, streams from where the slot stands, and stops once no
//! frame has arrived for `--idle` seconds (default 3). `--stall` waits that long before reading
//! anything: longer than `wal_sender_timeout` (with `--status-interval` well below it) proves the
//! status updates carry on while the consumer is not reading.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tributary::Lsn;
use tributary::source::replication::{ReplicationConnection, XLogData};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(slot), Some(publication)) = (args.next(), args.next(), args.next()) else {
        bail!(
            "usage: replication_drain URL SLOT PUBLICATION [--proto N] [--stall SECS] [--idle SECS] \
             [--status-interval SECS]"
        );
    };
    let (mut proto, mut stall, mut idle, mut interval) = ("1".to_owned(), 0u64, 3u64, 10u64);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--proto" => proto = value,
            "--stall" => stall = value.parse()?,
            "--idle" => idle = value.parse()?,
            "--status-interval" => interval = value.parse()?,
            other => bail!("unknown option {other}"),
        }
    }

    let config: tributary::source::connect::PgConfig = url.parse()?;
    let mut conn = ReplicationConnection::connect(&config).await?;
    match conn.create_logical_slot(&slot).await {
        Ok(created) => println!("created slot {slot} at {}", created.consistent_point),
        Err(e) if e.code() == Some("42710") => println!("slot {slot} exists"),
        Err(e) => return Err(e.into()),
    }
    let publications = format!("\"{}\"", publication.replace('"', "\"\""));
    let options = [
        ("proto_version", proto.as_str()),
        ("publication_names", publications.as_str()),
    ];
    let mut stream = conn
        .start_logical(&slot, Lsn::ZERO, &options, Duration::from_secs(interval))
        .await?;

    if stall > 0 {
        println!("stalling {stall}s without reading");
        tokio::time::sleep(Duration::from_secs(stall)).await;
    }

    let (mut frames, mut bytes, mut inserts, mut commits) = (0u64, 0u64, 0u64, 0u64);
    let mut batch: Vec<XLogData> = Vec::with_capacity(8192);
    let mut started = None;
    let mut last = Instant::now();
    loop {
        batch.clear();
        let received = tokio::time::timeout(
            Duration::from_secs(idle),
            stream.recv_many(&mut batch, 8192),
        )
        .await;
        let n = match received {
            Err(_) => break,
            Ok(result) => result?,
        };
        if n == 0 {
            println!("server ended the stream");
            break;
        }
        started.get_or_insert_with(Instant::now);
        last = Instant::now();
        let mut confirm = None;
        for frame in &batch {
            frames += 1;
            bytes += frame.data.len() as u64;
            match frame.data.first() {
                Some(b'I') => inserts += 1,
                Some(b'C') if frame.data.len() >= 18 => {
                    commits += 1;
                    let end = u64::from_be_bytes(frame.data[10..18].try_into()?);
                    confirm = Some(Lsn(end));
                }
                _ => {}
            }
        }
        if let Some(lsn) = confirm {
            stream.confirm(lsn);
        }
    }
    let elapsed = started
        .map(|s| last.duration_since(s))
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-9);
    println!(
        "{frames} frames, {inserts} inserts, {commits} commits, {:.1} MiB in {elapsed:.2}s: \
         {:.0} inserts/s, {:.0} commits/s; confirmed {}, server at {}",
        bytes as f64 / (1024.0 * 1024.0),
        inserts as f64 / elapsed,
        commits as f64 / elapsed,
        stream.confirmed(),
        stream.server_wal_end(),
    );
    stream.shutdown().await?;
    Ok(())
}
