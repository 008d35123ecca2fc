//! Current-state tables (`mirror = true`) that are not kept, or whose files a vacuum deleted,
//! as `verify` and `vacuum` meet them (issue 36): each says at once what it skipped and why,
//! and what to do.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tributary_tests::TestDatabase;
use tributary_tests::lake::delta_txn_versions;
use tributary_tests::service::{Fixture, Service, command, tributary_bin, verify};

use super::delta::{mirror_section, t_fixture, wait_for_table};

/// A current-state table whose `mirror` was switched off while the pipeline runs on is named as
/// not compared at once, not after verify's wait: whether the pipeline file verify reads says
/// so, or only the running pipeline's. Its change-log table is compared, and vacuumed: a table
/// nobody keeps holds nothing back. With the file that keeps it, vacuum leaves the change-log
/// table alone and says what brings the current-state table up to date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_current_state_table_switched_off_is_not_compared_and_holds_back_no_vacuum() {
    let (db, fixture, off) = ten_rows_then_off("mirror_off").await;
    let kept = fixture.file.clone();

    // The same pipeline goes on without its current-state table.
    let mut service = Service::spawn(&off, &[], &fixture.dir.join("off.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    db.client
        .batch_execute(
            "INSERT INTO t SELECT g, 'w' || g FROM generate_series(11, 20) g;
             UPDATE t SET body = 'changed' WHERE id <= 5;",
        )
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 25, Duration::from_secs(60))
        .await;

    for (file, said) in [
        (
            &off,
            "current-state table public.t__current: not compared: outputs.\"public.t\".mirror is off in the pipeline file, so the pipeline no longer keeps it up to date; its change-log table is compared",
        ),
        (
            &kept,
            "the running pipeline does not keep it up to date (is outputs.\"public.t\".mirror off where it runs?); its change-log table is compared",
        ),
    ] {
        let started = Instant::now();
        let verified = verify(file, &["--timeout", "200"]).await;
        let took = started.elapsed();
        assert_eq!(verified.code, 0, "{verified}");
        assert!(
            verified.stdout.contains(said)
                && verified.stdout.contains("public.t: equal (20 rows")
                && verified
                    .last_line()
                    .starts_with("verify: the lake equals the source"),
            "{verified}"
        );
        // Nothing publishes to it: its audit does not say entries are on their way.
        assert!(!verified.stdout.contains("are not in it yet"), "{verified}");
        // It did not wait out its timeout for a table nobody publishes to.
        assert!(
            took < Duration::from_secs(150) && !verified.stdout.contains("is the pipeline running"),
            "verify took {took:?} (--timeout 200):\n{verified}"
        );
    }

    let (code, out, err) = command("vacuum", &off, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("vacuum: public.t: deleted 0 files") && !out.contains("left alone"),
        "{out}"
    );
    let (code, out, err) = command("vacuum", &kept, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("vacuum: public.t: left alone: its current-state table public.t__current holds commit entry ")
            && out.contains(
                "it missed flushes while mirror was off, and the pipeline builds it again from the whole change-log table at its next flush of this output; vacuum after that"
            ),
        "{out}"
    );
    service.stop().await;
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// Verify reads a current-state table at the version of its snapshot. When a flush after the
/// snapshot rewrote a file of that version and a vacuum with a short retention deleted it
/// before verify read it, verify says which file and version, why it is gone and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_explains_a_file_of_its_version_that_a_vacuum_deleted() {
    let (db, fixture) = t_fixture("mirror_vacuumed", |cfg| {
        cfg.sections.push(mirror_section("public.t"))
    })
    .await;
    let service = ten_rows_mirrored(&db, &fixture, &fixture.file, "run.log").await;

    // Verify is held (SIGSTOP) right after its snapshot, as a slow read of a large source
    // would hold it.
    let mut verifying = tokio::process::Command::new(tributary_bin())
        .arg("verify")
        .arg("--config")
        .arg(&fixture.file)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(verifying.stderr.take().unwrap()).lines();
    let mut stderr = String::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("verify took its snapshot within 2 minutes")
            .unwrap()
            .unwrap_or_else(|| panic!("verify ended before its snapshot:\n{stderr}"));
        stderr.push_str(&line);
        stderr.push('\n');
        if line.contains("snapshot taken") {
            break;
        }
    }
    let pid = verifying.id().unwrap() as i32;
    // SAFETY: kill(2) on our own child, which is not reaped before `wait` below.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);

    // A flush after the snapshot rewrites the file that the snapshot's version reads, and a
    // vacuum without retention deletes that file.
    let versions = delta_txn_versions(&fixture.sink, "public.t__current")
        .await
        .len();
    db.client
        .batch_execute("UPDATE t SET body = 'after' WHERE id = 1")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 11, Duration::from_secs(60))
        .await;
    wait_for_table(&fixture, "public.t__current", Duration::from_secs(60)).await;
    assert!(
        delta_txn_versions(&fixture.sink, "public.t__current")
            .await
            .len()
            > versions
    );
    let (code, out, err) = command("vacuum", &fixture.file, &["--retain", "0s"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("vacuum: public.t__current: deleted 1 files"),
        "{out}"
    );
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);

    while let Some(line) = lines.next_line().await.unwrap() {
        stderr.push_str(&line);
        stderr.push('\n');
    }
    let output = tokio::time::timeout(Duration::from_secs(240), verifying.wait_with_output())
        .await
        .expect("verify finished within 4 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    for part in [
        "error: current-state table public.t__current: ",
        ", which its version ",
        " reads (the version holding commit entry ",
        ", the last before the snapshot), is not in the sink: a later version of the table removed it at ",
        " (a flush rewrote its rows, or a compaction merged it) and `tributary vacuum` has deleted it since",
        "run verify again, and keep vacuum's --retain (seven days by default) longer than a verify run takes",
    ] {
        assert!(stderr.contains(part), "{part:?} in\n{stdout}{stderr}");
    }
    // With its snapshot past the rewrite, verify reads the latest version, whose files are all
    // there.
    let verified = verify(&fixture.file, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified.stdout.lines().any(|l| l
            .starts_with("current-state table public.t__current: version ")
            && l.ends_with("10 rows, equal to the source")),
        "{verified}"
    );
    service.stop().await;
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// A current-state table kept, then not while flushes of inserts, updates and deletes landed
/// and `tributary compact` merged their files in the change-log table, then kept again by a run
/// that stopped between the change-log table and the current-state table: the next start's
/// catch-up applies that flush, which the change log holds already, and finds the table
/// missed the flushes before it, so builds it again from the whole change log. Verify finds it
/// equal to the source. (It used to take that flush alone on top of the rows it had.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_current_state_table_kept_again_is_built_again_when_the_catch_up_meets_it() {
    let (db, fixture, off) = ten_rows_then_off("mirror_again").await;
    let kept = fixture.file.clone();
    let held = delta_txn_versions(&fixture.sink, "public.t__current").await;

    // Without it: three flushes, then a compaction of the change-log table.
    let mut service = Service::spawn(&off, &[], &fixture.dir.join("off.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    for (statement, landed) in [
        (
            "INSERT INTO t SELECT g, 'w' || g FROM generate_series(11, 20) g",
            20,
        ),
        ("UPDATE t SET body = 'changed' WHERE id <= 5", 25),
        ("DELETE FROM t WHERE id IN (6, 7, 15)", 28),
    ] {
        db.client.batch_execute(statement).await.unwrap();
        service
            .wait_for_landed(&fixture.log, landed, Duration::from_secs(60))
            .await;
    }
    service.stop().await;
    let (code, out, err) = command("compact", &off, &[], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("compact: public.t: 4 files (") && out.contains(" rewritten as 1 "),
        "{out}"
    );
    assert_eq!(
        delta_txn_versions(&fixture.sink, "public.t__current").await,
        held,
        "nothing kept it meanwhile"
    );

    // Kept again, by a run that stops between the change-log table and the current-state
    // table of a flush: of the entry its start's catch-up publishes again (the last run's
    // entries may name their tables as behind), or else of its first flush.
    let mut armed = Service::spawn_with(
        &kept,
        &[],
        &fixture.dir.join("armed.log"),
        &[("TRIBUTARY_FAILPOINTS", "delta.before-current")],
    );
    let reached = "failpoint delta.before-current reached";
    let deadline = Instant::now() + Duration::from_secs(120);
    while !armed.log().contains(reached) && !armed.log().contains("streaming") {
        assert!(Instant::now() < deadline, "{}", armed.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut changes = 28;
    if !armed.log().contains(reached) {
        db.client
            .batch_execute("UPDATE t SET body = 'first' WHERE id IN (3, 12)")
            .await
            .unwrap();
        changes += 2;
        armed.wait_for_log(reached, Duration::from_secs(60)).await;
    }
    armed.kill().await;
    assert_eq!(
        delta_txn_versions(&fixture.sink, "public.t__current").await,
        held
    );

    // The next start's catch-up publishes the flush again, which its change-log table holds.
    let mut service = Service::spawn(&kept, &[], &fixture.dir.join("again.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    db.client
        .batch_execute("UPDATE t SET body = 'again' WHERE id IN (4, 13)")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, changes + 2, Duration::from_secs(60))
        .await;
    wait_for_table(&fixture, "public.t__current", Duration::from_secs(60)).await;
    let verified = verify(&kept, &[]).await;
    assert_eq!(verified.code, 0, "{verified}");
    assert!(
        verified.stdout.lines().any(|l| l
            .starts_with("current-state table public.t__current: version ")
            && l.ends_with("17 rows, equal to the source")),
        "{verified}"
    );
    let log = service.stop().await;
    assert!(
        log.contains("building the current-state table from the whole change log")
            && log.contains("the change log held flush "),
        "{log}"
    );
    std::fs::remove_dir_all(&fixture.dir).unwrap();
}

/// A fixture whose pipeline file keeps `t`'s current-state table, after a run of it landed ten
/// rows, and the same pipeline file without that (`off.toml` beside it).
async fn ten_rows_then_off(hint: &str) -> (TestDatabase, Fixture, std::path::PathBuf) {
    let (db, fixture) = t_fixture(hint, |cfg| cfg.sections.push(mirror_section("public.t"))).await;
    let mut without = fixture.cfg.clone();
    without.sections.clear();
    let off = fixture.dir.join("off.toml");
    std::fs::write(&off, without.toml()).unwrap();
    let service = ten_rows_mirrored(&db, &fixture, &fixture.file, "kept.log").await;
    service.stop().await;
    (db, fixture, off)
}

/// Run the pipeline file `file` (logging to `log` in the fixture's directory), land ten rows
/// of `t`, and wait until its current-state table exists.
async fn ten_rows_mirrored(
    db: &TestDatabase,
    fixture: &Fixture,
    file: &std::path::Path,
    log: &str,
) -> Service {
    let mut service = Service::spawn(file, &[], &fixture.dir.join(log));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    db.client
        .batch_execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 10) g")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 10, Duration::from_secs(60))
        .await;
    wait_for_table(fixture, "public.t__current", Duration::from_secs(60)).await;
    service
}
