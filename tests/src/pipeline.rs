//! Running a pipeline inside a test: start it, wait for what it lands, stop it or crash it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tributary::Lsn;
use tributary::config::{
    FlushConfig, PipelineConfig, SinkConfig, SourceConfig, TransformConfig, UnchangedToastPolicy,
};
use tributary::pipeline::{self, PipelineError, Progress, RunOptions};

/// A pipeline file for a test: its own slot and publication (named `name`), small flushes.
///
/// Unchanged TOAST values land as null (`source.unchanged_toast = "null"`), so tests may use
/// text columns on tables with a plain primary key; tests of the default policy set it back.
pub fn config(
    source_url: &str,
    name: &str,
    tables: &[&str],
    sink_url: &str,
    sink_options: Vec<(String, String)>,
    plugins: &[PathBuf],
) -> PipelineConfig {
    PipelineConfig {
        source: SourceConfig {
            unchanged_toast: UnchangedToastPolicy::Null,
            ..SourceConfig::new(source_url, name, name, tables)
        },
        transforms: plugins
            .iter()
            .map(|p| TransformConfig {
                plugin: p.clone(),
                config: BTreeMap::new(),
                memory_limit_mib: 128,
                timeout_ms: 2_000,
                stack_kib: 512,
                on_error: Default::default(),
            })
            .collect(),
        sink: SinkConfig {
            url: sink_url.to_owned(),
            options: sink_options.into_iter().collect(),
            format: Default::default(),
            ..SinkConfig::default()
        },
        flush: FlushConfig {
            max_rows: 2_000,
            max_mib: 64,
            max_delay_ms: 200,
            in_flight_mib: 256,
            ..FlushConfig::default()
        },
        metrics: Default::default(),
        retry: Default::default(),
        parquet: Default::default(),
        load: Default::default(),
        outputs: Default::default(),
    }
}

/// Pipeline logs go to the test's output (shown for failing tests); `RUST_LOG` filters them.
fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "tributary=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A pipeline running on the test's runtime.
pub struct RunningPipeline {
    pub progress: watch::Receiver<Progress>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<Progress, PipelineError>>,
}

impl RunningPipeline {
    /// Start a pipeline and wait until it reads its slot, so that every transaction committed
    /// after this returns reaches it.
    pub async fn start(config: PipelineConfig) -> Self {
        Self::start_with(config, RunOptions::default()).await
    }

    pub async fn start_with(config: PipelineConfig, options: RunOptions) -> Self {
        init_logging();
        let (stop, shutdown) = watch::channel(false);
        let (progress_tx, mut progress) = watch::channel(Progress::default());
        let mut task = tokio::spawn(pipeline::run(config, options, shutdown, progress_tx));
        // Start-up compiles every plugin not in the compile cache yet: on a machine with a cold
        // cache and two busy cores, a 12-18 MiB Python or JavaScript plugin takes 30-40 s.
        let streaming = tokio::time::timeout(START_TIMEOUT, async {
            while !progress.borrow_and_update().streaming {
                if progress.changed().await.is_err() {
                    let result = (&mut task).await.expect("pipeline task panicked");
                    panic!("the pipeline stopped while starting: {result:?}");
                }
            }
        });
        streaming
            .await
            .expect("the pipeline did not start streaming within five minutes");
        RunningPipeline {
            progress,
            stop,
            task,
        }
    }

    /// Start a pipeline that is expected to fail before it streams; returns its error.
    pub async fn start_failure(config: PipelineConfig, options: RunOptions) -> PipelineError {
        init_logging();
        let (_stop, shutdown) = watch::channel(false);
        let (progress_tx, _progress) = watch::channel(Progress::default());
        match tokio::time::timeout(
            Duration::from_secs(60),
            pipeline::run(config, options, shutdown, progress_tx),
        )
        .await
        {
            Err(_) => panic!("the pipeline neither failed nor stopped within a minute"),
            Ok(Ok(progress)) => panic!("the pipeline started: {progress:?}"),
            Ok(Err(e)) => e,
        }
    }

    /// Wait until the pipeline has landed at least `changes` changes.
    pub async fn wait_for_changes(&mut self, changes: u64, timeout: Duration) -> Progress {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let now = self.progress.borrow_and_update().clone();
            if now.changes >= changes {
                return now;
            }
            if self.task.is_finished() {
                let result = (&mut self.task).await.expect("pipeline task panicked");
                panic!(
                    "the pipeline stopped after landing {} of {changes} changes: {result:?}",
                    now.changes
                );
            }
            match tokio::time::timeout_at(deadline, self.progress.changed()).await {
                Ok(_) => {}
                Err(_) => panic!(
                    "the pipeline landed {} of {changes} changes within {timeout:?}",
                    now.changes
                ),
            }
        }
    }

    /// Ask for a clean stop and wait for it.
    pub async fn stop(self) -> Progress {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the pipeline did not stop within a minute")
            .expect("pipeline task panicked")
            .expect("the pipeline failed")
    }

    /// Ask for a stop that the pipeline cannot finish cleanly; returns its error.
    pub async fn stop_with_error(self) -> PipelineError {
        let _ = self.stop.send(true);
        match tokio::time::timeout(Duration::from_secs(30), self.task).await {
            Err(_) => panic!("the pipeline did not stop within 30 s"),
            Ok(result) => match result.expect("pipeline task panicked") {
                Ok(progress) => panic!("the pipeline stopped cleanly: {progress:?}"),
                Err(e) => e,
            },
        }
    }

    /// Kill it where it stands, as a crash would.
    pub async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Wait for the pipeline to fail, and return its error.
    pub async fn failure(self, timeout: Duration) -> PipelineError {
        match tokio::time::timeout(timeout, self.task).await {
            Err(_) => panic!("the pipeline did not fail within {timeout:?}"),
            Ok(result) => match result.expect("pipeline task panicked") {
                Ok(progress) => panic!("the pipeline stopped without error: {progress:?}"),
                Err(e) => e,
            },
        }
    }
}

/// A fresh database holding the `events (id int PRIMARY KEY, body text)` table most tests
/// write to.
pub async fn events_database(hint: &str) -> crate::TestDatabase {
    let db = crate::fresh_database(hint).await;
    db.client.batch_execute(EVENTS_TABLE).await.unwrap();
    db
}

/// The `events` table the tests land, for a cluster of a test's own: a plain connection to its
/// `postgres` database, with the table created.
pub async fn events_on(cluster: &crate::TempCluster) -> tokio_postgres::Client {
    let client = crate::connect(&cluster.url("postgres")).await;
    client.batch_execute(EVENTS_TABLE).await.unwrap();
    client
}

/// The longest a pipeline of the tests may take to start streaming.
const START_TIMEOUT: Duration = Duration::from_secs(300);

const EVENTS_TABLE: &str = "CREATE TABLE events (id int PRIMARY KEY, body text)";

/// An events database whose transactions outgrow the server's decoding memory at once (the
/// smallest `logical_decoding_work_mem` PostgreSQL allows, for this database only: a walsender
/// of a `replication=database` connection applies the database's settings at startup), so
/// every large transaction is streamed before it commits.
pub async fn streaming_database(hint: &str) -> crate::TestDatabase {
    let db = events_database(hint).await;
    db.client
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET logical_decoding_work_mem = '64kB'",
            db.name
        ))
        .await
        .unwrap();
    db
}

/// The slot's `confirmed_flush_lsn`.
pub async fn confirmed_flush(client: &tokio_postgres::Client, slot: &str) -> Option<Lsn> {
    let row = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()?;
    row.get::<_, Option<String>>(0).map(|s| s.parse().unwrap())
}

/// Wait until the slot's confirmed position reaches `lsn` (status updates are asynchronous).
pub async fn wait_for_confirmed(client: &tokio_postgres::Client, slot: &str, lsn: Lsn) -> Lsn {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let confirmed = confirmed_flush(client, slot).await.unwrap_or_default();
        if confirmed >= lsn || tokio::time::Instant::now() > deadline {
            return confirmed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the slot and the publication named `name` exist.
pub async fn slot_and_publication(db: &crate::TestDatabase, name: &str) -> (bool, bool) {
    let slot = db
        .client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .is_some();
    let publication = db
        .client
        .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&name])
        .await
        .unwrap()
        .is_some();
    (slot, publication)
}
