//! The `tributary` command: run a pipeline, try the whole thing on throwaway parts, show how
//! far behind a pipeline is, or verify that its lake equals its source.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio::sync::watch;
use tributary::commands::status;
use tributary::commands::teardown::Teardown;
use tributary::commands::verify::{self, VerifyOptions};
use tributary::config::{CaptureMode, PipelineConfig};
use tributary::lake::commit::journal_name;
use tributary::pipeline::{self, Progress, RunOptions, http, metrics};

mod demo;
mod log;
mod plugin;
mod schedule;

use log::LogFormat;

/// Change data capture from PostgreSQL, through WebAssembly transforms, to Parquet in object
/// storage — exactly once.
///
/// Tributary reads a logical replication slot or a trigger journal, hands every committed
/// transaction to the transforms named in the pipeline file, writes what they emit as Parquet
/// files (or Delta tables) to S3 or a directory, and only then lets the slot or the journal
/// move on.
#[derive(Parser)]
#[command(name = "tributary", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines are written to stderr: text, or one JSON object per line (naming the
    /// pipeline's slot, or its trigger journal, in each). RUST_LOG chooses what is logged in
    /// both.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "TRIBUTARY_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    /// How the kernel schedules Tributary's threads: `batch` (Linux's SCHED_BATCH, the
    /// default) lets a thread that wakes wait for its turn instead of preempting one that is
    /// running, such as a PostgreSQL walsender on the same host; `normal` is the kernel's
    /// default policy. Neither needs a privilege.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "TRIBUTARY_SCHEDULING",
        default_value = "batch"
    )]
    scheduling: schedule::Scheduling,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline until SIGINT or SIGTERM (it then finishes the flush in flight and lands
    /// what is committed before it stops).
    Run {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// Start across one gap between the sink and the slot (the changes in between are lost
        /// to this sink): the exact text the refusal printed, e.g. "0/16B3748..0/16C0010".
        #[arg(long, value_name = "GAP")]
        accept_gap: Option<String>,
        /// When another consumer holds the slot (a previous instance during a rolling
        /// restart), wait until it lets go instead of giving up after 15 s.
        #[arg(long)]
        wait: bool,
    },
    /// Run the whole pipeline on throwaway parts: a temporary PostgreSQL cluster, a sample
    /// shop schema and workload, the passthrough plugin, and a local directory as the sink.
    Demo(demo::DemoOptions),
    /// Show the slot's (or the trigger journal's) and the sink's positions: how far behind the
    /// pipeline is, and how much WAL the slot holds back or how many rows wait in the journal.
    Status {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Prove that the lake equals the source: take a snapshot of the source at a known WAL
    /// position, wait until the lake has committed that far (with trigger capture: a
    /// transaction's snapshot, and until no change it sees waits in the journal), replay the
    /// landed changes up to it and compare every tracked table; also check that every
    /// committed file is intact, that no file is named by no entry and that no change landed
    /// twice. Prints what differs; exits 0 when the lake equals the source, 1 when anything
    /// differs, 2 when it could not verify.
    Verify {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// Only this table (`schema.table`) and its files.
        #[arg(long, value_name = "SCHEMA.TABLE")]
        table: Option<String>,
        /// How many differing keys to print per kind of difference and table.
        #[arg(long, value_name = "N", default_value_t = 10)]
        show: usize,
        /// The longest to wait, in seconds, for the lake to reach the snapshot.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
        /// Check only the lake's files and change identities (no snapshot, no content: for
        /// pipelines with transforms, or without the source at hand).
        #[arg(long)]
        identities_only: bool,
    },
    /// Check that the pipeline is ready to run, and print every problem at once with the
    /// statement or setting that fixes it: the source (wal_level, free replication slots and
    /// WAL senders, the role's REPLICATION attribute and SELECT on the tracked tables, their
    /// replica identity, the publication, the slot and the server version), the plugins
    /// (loaded and initialized with their settings, as a run does), the sink (its URL, its
    /// commit log, and whether it belongs to another pipeline), the server's timeline against
    /// the lake's, and where a run would start. A run refuses for the same reasons. Exits 0
    /// when the pipeline is ready, 1 when something must be fixed, 2 when it could not check
    /// (the source unreachable).
    Check {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// Judge the start as `run --accept-gap GAP` would: the gap or the change of timeline
        /// this exact text names (as a refusal printed it) is accepted.
        #[arg(long, value_name = "GAP")]
        accept_gap: Option<String>,
    },
    /// Load some tables (or every tracked one) again from a new snapshot while the pipeline
    /// keeps running: a request written into the source's WAL, which the pipeline acts on after
    /// the changes committed before it (or at its next start). New load markers tell readers
    /// to replace their copy of each table.
    Resync {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// A table to load again (`schema.table`); repeat for more; every tracked table when
        /// none is named.
        #[arg(long, value_name = "SCHEMA.TABLE")]
        table: Vec<String>,
    },
    /// Drop the slot and the publication Tributary created for this pipeline, or what trigger
    /// capture installed (its schema, functions and triggers), and nothing else: it prints what
    /// it will drop and asks first. It refuses while a pipeline holds the slot or reads the
    /// journal. The sink's files stay.
    Teardown {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// Drop without asking (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Rewrite the small files of the pipeline's Delta tables (sink.format = "delta") into
    /// files of parquet.target_file_mb, as a commit that changes no row, beside the running
    /// pipeline. A compaction that meets another one stops without committing anything.
    Compact {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// Only this output's table (`schema.table`, or a plugin's output name).
        #[arg(long, value_name = "OUTPUT")]
        output: Option<String>,
    },
    /// Delete the data files the pipeline's Delta tables no longer read (replaced by a
    /// compaction, rewritten by a current-state table, dropped by a new version) once the
    /// commit that removed them is older than the retention, beside the running pipeline.
    Vacuum {
        /// The pipeline file (TOML). TRIBUTARY_SOURCE_URL overrides source.url.
        #[arg(long, short)]
        config: PathBuf,
        /// Only this table (`schema.table`, a plugin's output name, or `<output>__current`).
        #[arg(long, value_name = "OUTPUT")]
        output: Option<String>,
        /// Keep files whose removal is younger than this: a whole number and s, m, h or d.
        /// A reader of a table version older than it may find files gone.
        #[arg(long, value_name = "DURATION", default_value = "7d")]
        retain: String,
        /// Say what would be deleted, and delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Tools for writing transform plugins.
    Plugin {
        #[command(subcommand)]
        command: plugin::PluginCommand,
    },
}

/// Arenas glibc's allocator may keep. Its default (eight per core) lets every thread that
/// ever allocated keep its own heap at its high-water mark; batches are built on one thread
/// and freed on another, so resident memory grew well past what the pipeline holds (about 30 %
/// more peak RSS on the insert benchmark). `MALLOC_ARENA_MAX` in the environment still wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_ARENAS: i32 = 2;

fn main() -> ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before any other thread
        // exists.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    }
    let cli = Cli::parse();
    // The demo prints its own story; the service logs what it does.
    let default_filter = match cli.command {
        Command::Demo(_) => "warn",
        _ => "info,wasmtime=warn,cranelift=warn",
    };
    log::init(cli.log_format, default_filter);
    // Before the runtime's threads exist: each inherits the policy of the thread that made it.
    schedule::apply(cli.scheduling);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Verify and check keep 1 for "the lake differs" or "the source is not ready": that they
    // could not tell is another answer.
    let failure = match cli.command {
        Command::Verify { .. } | Command::Check { .. } => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    };
    let code = match runtime.block_on(execute(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            // Not `{e:#}`: that repeats every cause a message already says.
            let error = tributary::error_chain(e.as_ref());
            match cli.log_format {
                LogFormat::Text => eprintln!("error: {error}"),
                // Every line of a JSON log is an object, the last one too.
                LogFormat::Json => tracing::error!("{error}"),
            }
            failure
        }
    };
    // Dropping the runtime would wait for every blocking task, and a plugin compile abandoned
    // by a stop during start-up is one: everything that matters has finished by now.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// A full load's progress on the terminal, one line redrawn twice a second (a log file gets
/// the same figures as a line every ten seconds).
async fn load_bar(mut progress: watch::Receiver<Progress>) {
    let mut shown = false;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        if progress.has_changed().is_err() {
            break;
        }
        let load = progress.borrow_and_update().load.clone();
        match load {
            Some(load) => {
                eprint!("\r\x1b[2K{}", load.line());
                shown = true;
            }
            None if shown => {
                eprintln!();
                shown = false;
            }
            None => {}
        }
    }
}

/// The metrics and probe endpoint of `run` (`metrics.listen`), serving while it runs.
struct Front {
    stop: watch::Sender<bool>,
    serving: tokio::task::JoinHandle<()>,
}

impl Front {
    /// Bind and serve, when the pipeline file asks for it. Bound before anything else happens,
    /// so a port in use is refused before the slot or the publication is touched.
    async fn start(
        config: &PipelineConfig,
        progress: &watch::Sender<Progress>,
    ) -> anyhow::Result<Option<Front>> {
        let Some(address) = config.metrics.address().map_err(anyhow::Error::msg)? else {
            return Ok(None);
        };
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| {
                format!(
                    "metrics.listen = \"{address}\": cannot listen there; choose a free port, or \
                     stop what holds it"
                )
            })?;
        let address = listener.local_addr().unwrap_or(address);
        tracing::info!("metrics at http://{address}/metrics, probes at /healthz and /readyz");
        let endpoint = metrics::Endpoint {
            identity: metrics::Identity {
                slot: source_name(config),
                version: env!("CARGO_PKG_VERSION"),
            },
            ready_after_failing: config.metrics.ready_after_failing(),
        };
        let (stop, stopped) = watch::channel(false);
        let serving = tokio::spawn(http::serve(
            listener,
            progress.subscribe(),
            endpoint,
            stopped,
        ));
        Ok(Some(Front { stop, serving }))
    }

    /// Stop once the pipeline has ended: the probes answer while a stop finishes the flush in
    /// flight, and requests begun are answered.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.serving.await;
    }
}

/// `tributary run`: the pipeline until a signal stops it, with its metrics endpoint when the
/// pipeline file asks for one.
async fn run(
    file: &std::path::Path,
    accept_gap: Option<String>,
    wait: bool,
) -> anyhow::Result<ExitCode> {
    let config = PipelineConfig::load(file)?;
    log::name_slot(&source_name(&config));
    let (stop, shutdown) = watch::channel(false);
    let (progress, _) = watch::channel(Progress::default());
    let stopping = progress.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("stopping: finishing the flush in flight");
        stopping.send_modify(|p| p.stopping = true);
        let _ = stop.send(true);
    });
    if std::io::stderr().is_terminal() {
        tokio::spawn(load_bar(progress.subscribe()));
    }
    let front = Front::start(&config, &progress).await?;
    let options = RunOptions {
        accept_gap,
        wait_for_slot: wait,
        ..RunOptions::default()
    };
    let ended = pipeline::run(config, options, shutdown, progress).await;
    if let Some(front) = front {
        front.stop().await;
    }
    let done = ended?;
    tracing::info!(
        flushes = done.flushes,
        transactions = done.transactions,
        changes = done.changes,
        "stopped"
    );
    if !done.plugins.is_empty() {
        let counted = tributary::transform::describe_tallies(&done.plugins);
        tracing::info!("plugin counters: {counted}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn execute(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run {
            config,
            accept_gap,
            wait,
        } => run(&config, accept_gap, wait).await,
        Command::Demo(options) => demo::run(options).await.map(|()| ExitCode::SUCCESS),
        Command::Status { config, json } => {
            let config = PipelineConfig::load(&config)?;
            log::name_slot(&source_name(&config));
            let status = status::collect(&config).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&status).context("printing status")?
                );
            } else {
                print!("{status}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify {
            config,
            table,
            show,
            timeout,
            identities_only,
        } => {
            let config = PipelineConfig::load(&config)?;
            log::name_slot(&source_name(&config));
            let options = VerifyOptions {
                table,
                show,
                timeout: Duration::from_secs(timeout),
                identities_only,
            };
            let report = verify::run(&config, &options).await?;
            print!("{report}");
            Ok(match report.is_equal() {
                true => ExitCode::SUCCESS,
                false => ExitCode::FAILURE,
            })
        }
        Command::Check { config, accept_gap } => {
            let config = PipelineConfig::load(&config)?;
            log::name_slot(&source_name(&config));
            for note in config.source.deprecations() {
                tracing::warn!("{note}");
            }
            let report = tributary::commands::check::check(&config, accept_gap.as_deref()).await?;
            print!("{report}");
            Ok(match report.is_ready() {
                true => ExitCode::SUCCESS,
                false => ExitCode::FAILURE,
            })
        }
        Command::Resync { config, table } => {
            let config = PipelineConfig::load(&config)?;
            log::name_slot(&source_name(&config));
            let requested = tributary::commands::resync::request(&config, &table).await?;
            print!("{requested}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Teardown { config, yes } => {
            let config = PipelineConfig::load(&config)?;
            log::name_slot(&source_name(&config));
            let teardown = Teardown::prepare(&config).await?;
            print!("{teardown}");
            if teardown.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            if !yes {
                anyhow::ensure!(
                    std::io::stdin().is_terminal(),
                    "teardown asks before it drops anything, and stdin is not a terminal: pass --yes to drop without asking"
                );
                if !confirmed("drop them?")? {
                    println!("nothing dropped");
                    return Ok(ExitCode::FAILURE);
                }
            }
            for line in teardown.execute().await? {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Compact { config, output } => {
            let config = PipelineConfig::load(&config)?;
            log::name_slot(&source_name(&config));
            let done = tributary::commands::compact::run(&config, output.as_deref()).await?;
            print!("{done}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Vacuum {
            config,
            output,
            retain,
            dry_run,
        } => {
            let config = PipelineConfig::load(&config)?;
            log::name_slot(&source_name(&config));
            let retention_ms = tributary::lake::tables::tend::parse_retention(&retain)
                .map_err(|e| anyhow::anyhow!("--retain {e}"))?;
            let options = tributary::commands::vacuum::VacuumOptions {
                output,
                retention_ms,
                dry_run,
            };
            let done = tributary::commands::vacuum::run(&config, &options).await?;
            print!("{done}");
            Ok(ExitCode::SUCCESS)
        }
        // Plugin calls block (the guest's WASI streams wait on the runtime): off the async
        // threads.
        Command::Plugin { command } => tokio::task::spawn_blocking(move || plugin::run(command))
            .await
            .context("the plugin command stopped")?
            .map(|()| ExitCode::SUCCESS),
    }
}

/// What names the pipeline's source in log lines and metric labels: its slot, or with trigger
/// capture its journal (`trigger:<schema>`, as the lake records it).
fn source_name(config: &PipelineConfig) -> String {
    match config.source.capture {
        CaptureMode::Trigger => journal_name(&config.source.trigger_schema),
        CaptureMode::Wal | CaptureMode::Auto => config.source.slot.clone(),
    }
}

/// Ask a yes/no question on the terminal; only "y" or "yes" is yes.
fn confirmed(question: &str) -> anyhow::Result<bool> {
    use std::io::Write;
    print!("{question} [y/N] ");
    std::io::stdout().flush().context("asking")?;
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .context("reading the answer")?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every option of every subcommand says what it is in `--help`.
    #[test]
    fn every_option_has_help_text() {
        let cli = Cli::command();
        let mut missing = Vec::new();
        let mut configs = 0;
        for command in cli.get_subcommands() {
            for arg in command.get_arguments() {
                if arg.get_id() == "config" {
                    configs += 1;
                }
                if arg.get_help().is_none() && !arg.is_positional() {
                    missing.push(format!("{} --{}", command.get_name(), arg.get_id()));
                }
            }
        }
        assert!(configs >= 8, "the subcommands that read a pipeline file");
        assert!(missing.is_empty(), "options without help: {missing:?}");
    }

    /// The top-level help names both ways of capture.
    #[test]
    fn the_help_names_slots_and_trigger_journals() {
        let cli = Cli::command();
        let help = cli
            .get_long_about()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            help.contains("a logical replication slot or a trigger journal"),
            "{help}"
        );
    }
}
