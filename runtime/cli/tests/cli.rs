//! The `tributary` command as an operator uses it: help, refusals, a service that stops
//! cleanly on SIGTERM, and status. Runs against its own throwaway PostgreSQL cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;
use tributary_cluster::{ClusterOptions, TempCluster};

const BIN: &str = env!("CARGO_BIN_EXE_tributary");

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tributary-cli-{hint}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn pipeline_file(dir: &Path, source_url: &str, sink: &Path) -> PathBuf {
    let file = dir.join("pipeline.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[source]
url = "{source_url}"
slot = "cli_slot"
publication = "cli_pub"
tables = ["public.events"]

[sink]
url = "file://{}"

[flush]
max_delay_ms = 100
"#,
            sink.display()
        ),
    )
    .unwrap();
    file
}

/// `tributary run --config file`, which must exit 1; its error output.
fn refused_run(file: &Path) -> String {
    let out = Command::new(BIN)
        .args(["run", "--config"])
        .arg(file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn help_names_every_command() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for command in ["run", "demo", "status", "check", "teardown"] {
        assert!(help.contains(command), "--help lists {command}: {help}");
    }
}

#[test]
fn an_unknown_key_is_refused_naming_the_key_and_the_file() {
    let dir = temp_dir("unknown-key");
    let file = pipeline_file(&dir, "postgres://nobody@127.0.0.1:1/x", &dir.join("lake"));
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("[sink]", "[sink]\nbukket = 1");
    std::fs::write(&file, text).unwrap();
    let err = refused_run(&file);
    assert!(err.contains("bukket"), "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unreachable_source_is_named() {
    let dir = temp_dir("unreachable");
    let file = pipeline_file(
        &dir,
        "postgres://nobody@127.0.0.1:1/shop",
        &dir.join("lake"),
    );
    let err = refused_run(&file);
    assert!(
        err.contains("cannot connect to the source database"),
        "{err}"
    );
    // One line, each cause said once.
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(err.matches("refused").count(), 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_cleanly_on_sigterm_and_status_shows_the_positions() {
    let cluster = tokio::task::spawn_blocking(|| TempCluster::start(ClusterOptions::fast()))
        .await
        .unwrap()
        .expect("a throwaway PostgreSQL cluster");
    let url = cluster.url("postgres");
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(
            "CREATE TABLE events (id int PRIMARY KEY, body text);
             ALTER TABLE events REPLICA IDENTITY FULL",
        )
        .await
        .unwrap();

    let dir = temp_dir("sigterm");
    let lake = dir.join("lake");
    let file = pipeline_file(&dir, &url, &lake);
    let mut service = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Wait until the service holds its slot, then give it work.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let active = client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'cli_slot' AND active",
                &[],
            )
            .await
            .unwrap();
        if active.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the service did not start streaming"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client
        .batch_execute("INSERT INTO events SELECT g, 'e' || g FROM generate_series(1, 100) g")
        .await
        .unwrap();
    let log = lake.join("_tributary/log");
    while std::fs::read_dir(&log).map_or(0, |d| d.count()) == 0 {
        assert!(Instant::now() < deadline, "nothing was committed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // While it runs, status says so (issue 21: it said "running since" after a stop too).
    let running = Command::new(BIN)
        .args(["status", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let running = String::from_utf8(running.stdout).unwrap();
    assert!(
        running.contains("writer            running (it holds the slot)")
            && running.contains("active, held by \"tributary "),
        "{running}"
    );

    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = service.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(30),
            "no exit within 30 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(service.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(stderr.contains("stopping"), "{stderr}");

    let out = Command::new(BIN)
        .args(["status", "--json", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let slot = &status["slot"];
    assert_eq!(slot["exists"], true);
    assert_eq!(
        slot["active_pid"],
        serde_json::Value::Null,
        "the slot was released"
    );
    assert_eq!(
        slot["confirmed_flush_lsn"], status["sink"]["last_end_lsn"],
        "the slot is confirmed exactly to the last commit entry: {status}"
    );
    let human = Command::new(BIN)
        .args(["status", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let human = String::from_utf8(human.stdout).unwrap();
    assert!(
        human.contains("slot \"cli_slot\": inactive") && human.contains("last commit"),
        "{human}"
    );
    assert!(
        human.contains("writer            stopped (nothing holds the slot), last seen ")
            && !human.contains("running"),
        "{human}"
    );

    drop(client);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
