//! TLS to a real server with a certificate authority the test makes, on both connection kinds
//! (an SQL session and the replication client): `verify-full` with SCRAM channel binding, a
//! client certificate, and each way it goes wrong, with the sentence that says so.

use std::time::Duration;

use tributary::source::connect::{self, PgConfig};
use tributary_tests::service::{Fixture, Service};
use tributary_tests::tls::{
    CERT_ROLE, KEY_PASSPHRASE, SCRAM_PASSWORD, SCRAM_ROLE, TlsServer, tls_server, tls_server17,
};

/// A connection string read with no `PG*` variables and no home directory, so the machine's
/// own settings play no part.
fn config(url: &str) -> Result<PgConfig, String> {
    PgConfig::parse(url, &|_| None, None).map_err(|e| e.to_string())
}

/// Both connection kinds to `url`: how each is protected, or why it failed.
async fn both(url: &str) -> (Result<String, String>, Result<String, String>) {
    let config = match config(url) {
        Ok(config) => config,
        Err(e) => return (Err(e.clone()), Err(e)),
    };
    let sql = match connect::sql(&config).await {
        Ok(client) => connect::describe_sql(&client, &config)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let replication = match connect::replication(&config).await {
        Ok(mut conn) => match conn.identify_system().await {
            Ok(_) => Ok(conn.protection()),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    eprintln!("sql: {sql:?}\nreplication: {replication:?}");
    (sql, replication)
}

fn params(server: &TlsServer, mode: &str, ca: &std::path::Path, more: &str) -> String {
    let _ = server;
    format!("sslmode={mode}&sslrootcert={}{more}", ca.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_channel_binding_on_both_connection_kinds() {
    let server = tls_server();
    let url = server.url(
        SCRAM_ROLE,
        "localhost",
        &params(
            server,
            "verify-full",
            &server.ca,
            "&channel_binding=require",
        ),
    );
    let (sql, replication) = both(&url).await;
    let against = format!("verify-full against {}", server.ca.display());
    let sql = sql.unwrap();
    assert!(
        sql.starts_with("TLS 1.3 (") && sql.contains(&against),
        "{sql}"
    );
    let replication = replication.unwrap();
    assert!(
        replication.starts_with("TLS 1.3 (")
            && replication.contains(&against)
            && replication.ends_with(", channel binding"),
        "{replication}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused_with_its_subject_and_the_ca_file() {
    let server = tls_server();
    let url = server.url(
        SCRAM_ROLE,
        "localhost",
        &params(server, "verify-full", &server.other_ca, ""),
    );
    let (sql, replication) = both(&url).await;
    for error in [sql.unwrap_err(), replication.unwrap_err()] {
        assert!(
            error.contains(
                "presented a certificate for CN=localhost, issued by CN=Tributary test CA"
            ) && error.contains(&format!(
                "does not verify against {}",
                server.other_ca.display()
            )) && error.contains("give sslrootcert the CA certificate that signed the server's"),
            "{error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_the_certificate_does_not_carry_is_refused_under_verify_full_only() {
    let server = tls_server();
    let port = server.cluster.port();
    let url = server.url(
        SCRAM_ROLE,
        "127.0.0.1",
        &params(server, "verify-full", &server.ca, ""),
    );
    let (sql, replication) = both(&url).await;
    for error in [sql.unwrap_err(), replication.unwrap_err()] {
        assert!(
            error.contains("the server's certificate is for localhost,")
                && error.contains(&format!("not for 127.0.0.1:{port}"))
                && error.contains("sslmode=verify-ca"),
            "{error}"
        );
    }
    // verify-ca checks the chain alone.
    let url = server.url(
        SCRAM_ROLE,
        "127.0.0.1",
        &params(server, "verify-ca", &server.ca, ""),
    );
    let (sql, replication) = both(&url).await;
    assert!(sql.unwrap().contains("verify-ca against"));
    assert!(replication.unwrap().contains("verify-ca against"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_against_a_server_without_tls_says_how_to_turn_it_on() {
    let plain = tributary_tests::postgres();
    let url = format!("{}?sslmode=require", plain.url("postgres"));
    let (sql, replication) = both(&url).await;
    for error in [sql.unwrap_err(), replication.unwrap_err()] {
        assert!(
            error.contains(&format!(
                "the server at 127.0.0.1:{} does not offer TLS, and sslmode=require requires it",
                plain.port()
            )) && error.contains("ssl = on"),
            "{error}"
        );
    }
    // prefer falls back to plain text, and says so.
    let url = format!("{}?sslmode=prefer", plain.url("postgres"));
    let (sql, replication) = both(&url).await;
    assert_eq!(sql.unwrap(), "unencrypted (sslmode=prefer)");
    assert_eq!(replication.unwrap(), "unencrypted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_authenticates_and_an_open_key_is_refused() {
    let server = tls_server();
    let certs = format!(
        "&sslcert={}&sslkey={}",
        server.client_cert.display(),
        server.client_key.display()
    );
    let url = server.url(
        CERT_ROLE,
        "localhost",
        &params(server, "verify-full", &server.ca, &certs),
    );
    let (sql, replication) = both(&url).await;
    assert!(sql.unwrap().starts_with("TLS 1.3"));
    // cert authentication has no password, so nothing to bind.
    assert!(replication.unwrap().ends_with(", no channel binding"));

    // Without the certificate the server's `hostssl ... cert` rule turns the role away.
    let url = server.url(
        CERT_ROLE,
        "localhost",
        &params(server, "verify-full", &server.ca, ""),
    );
    let (sql, replication) = both(&url).await;
    assert!(sql.unwrap_err().contains("certificate"));
    assert!(replication.unwrap_err().contains("certificate"));

    let open = server.dir.join(format!("open-{}.key", std::process::id()));
    std::fs::copy(&server.client_key, &open).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let url = server.url(
        CERT_ROLE,
        "localhost",
        &params(
            server,
            "verify-full",
            &server.ca,
            &format!(
                "&sslcert={}&sslkey={}",
                server.client_cert.display(),
                open.display()
            ),
        ),
    );
    let error = config(&url).unwrap_err();
    assert_eq!(
        error,
        format!(
            "the client key {} (sslkey) may be read by others (mode 0644); like libpq, tributary refuses such a key: run chmod 600 {} (or 640 if root owns it)",
            open.display(),
            open.display()
        )
    );
    let _ = std::fs::remove_file(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_binding_require_fails_clearly_without_tls_or_without_scram() {
    let server = tls_server();
    let port = server.cluster.port();
    let url = server.url(
        SCRAM_ROLE,
        "localhost",
        "sslmode=disable&channel_binding=require",
    );
    let (sql, replication) = both(&url).await;
    for error in [sql.unwrap_err(), replication.unwrap_err()] {
        assert!(
            error.starts_with("channel_binding=require, but the connection to")
                && error.contains("is not encrypted"),
            "{error}"
        );
    }
    // `postgres` is trusted: no SCRAM, so no binding, over TLS or not.
    let url = format!(
        "postgres://postgres@localhost:{port}/postgres?{}",
        params(
            server,
            "verify-full",
            &server.ca,
            "&channel_binding=require"
        )
    );
    let (sql, replication) = both(&url).await;
    assert!(sql.unwrap_err().contains("channel binding"));
    let error = replication.unwrap_err();
    assert!(
        error.contains("channel_binding=require, but the server at")
            && error.contains("authenticated with trust"),
        "{error}"
    );
}

/// A client key encrypted with a passphrase opens with `sslpassword`, on both kinds; without
/// it, or with a wrong one, the key is named and the passphrase never shown. A pipeline file
/// that takes the passphrase from the environment checks clean, and no output holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_client_key_opens_with_sslpassword() {
    let server = tls_server();
    let key = server.client_key_encrypted.display().to_string();
    let with = |password: &str| {
        server.url(
            CERT_ROLE,
            "localhost",
            &params(
                server,
                "verify-full",
                &server.ca,
                &format!(
                    "&sslcert={}&sslkey={key}{password}",
                    server.client_cert.display()
                ),
            ),
        )
    };
    let (sql, replication) = both(&with(&format!("&sslpassword={KEY_PASSPHRASE}"))).await;
    assert!(sql.unwrap().starts_with("TLS 1.3"));
    assert!(replication.unwrap().starts_with("TLS 1.3"));

    assert_eq!(
        config(&with("")).unwrap_err(),
        format!(
            "the client key {key} (sslkey) is encrypted: give its passphrase as sslpassword (in the pipeline file, sslpassword=${{NAME}} takes it from the environment)"
        )
    );
    let wrong = config(&with("&sslpassword=not-the-one")).unwrap_err();
    assert_eq!(
        wrong,
        format!(
            "the client key {key} (sslkey) could not be decrypted with the sslpassword given: check the passphrase"
        )
    );

    let mut fixture = Fixture::new(
        &with("&sslpassword=${TLS_KEY_PASS}"),
        "tls_key_pass",
        &["public.events"],
    )
    .await;
    fixture.file = fixture.cfg.write(&fixture.dir);
    let (_, out, err) = tributary(
        "check",
        &fixture.file,
        &[],
        &[("TLS_KEY_PASS", KEY_PASSPHRASE)],
    )
    .await;
    // (The table does not exist there: the check fails on that, after connecting.)
    assert!(out.contains("connection (SQL): TLS 1.3 ("), "{out}{err}");
    assert!(
        !out.contains(KEY_PASSPHRASE) && !err.contains(KEY_PASSPHRASE),
        "check showed the passphrase:\n{out}{err}"
    );
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

/// PostgreSQL 17 takes TLS from the first byte, without the `SSLRequest` round trip
/// (`sslnegotiation=direct`, with ALPN `postgresql`); it needs `sslmode=require` or stricter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_negotiation_on_postgresql_17() {
    let server = tls_server17();
    let url = server.url(
        SCRAM_ROLE,
        "localhost",
        &params(
            server,
            "verify-full",
            &server.ca,
            "&sslnegotiation=direct&channel_binding=require",
        ),
    );
    let (sql, replication) = both(&url).await;
    assert!(sql.unwrap().starts_with("TLS 1.3 ("));
    let replication = replication.unwrap();
    assert!(
        replication.starts_with("TLS 1.3 (") && replication.ends_with(", channel binding"),
        "{replication}"
    );
    let url = server.url(
        SCRAM_ROLE,
        "localhost",
        "sslmode=prefer&sslnegotiation=direct",
    );
    assert_eq!(
        config(&url).unwrap_err(),
        "sslnegotiation=direct starts TLS without asking, so it needs sslmode=require or stricter (not prefer)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificate_files_are_named_before_any_connection() {
    let server = tls_server();
    let missing = server.dir.join("no-such-ca.pem");
    let url = server.url(
        SCRAM_ROLE,
        "localhost",
        &params(server, "verify-full", &missing, ""),
    );
    assert_eq!(
        config(&url).unwrap_err(),
        format!(
            "cannot read the root certificate file {} (sslrootcert): it does not exist; check the path and that this user may read it",
            missing.display()
        )
    );
    let url = server.url(SCRAM_ROLE, "localhost", "sslmode=verify-full");
    let error = config(&url).unwrap_err();
    assert!(
        error.starts_with(
            "sslmode=verify-full checks the server's certificate against a root certificate"
        ) && error.contains("give sslrootcert=<file>"),
        "{error}"
    );
}

/// `tributary <command>` with `env`, logging at debug level.
async fn tributary(
    command: &str,
    file: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let mut env = env.to_vec();
    env.push(("RUST_LOG", "debug,wasmtime=warn,cranelift=warn"));
    tributary_tests::service::command(command, file, args, &env).await
}

/// A new database on the TLS server with an `events` table: a client to it and its name.
async fn events_database(server: &TlsServer, hint: &str) -> (tokio_postgres::Client, String) {
    let admin = tributary_tests::connect(&server.cluster.url("postgres")).await;
    let db = tributary_tests::unique_name(hint);
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let source = tributary_tests::connect(&server.cluster.url(&db)).await;
    source
        .batch_execute("CREATE TABLE events (id int PRIMARY KEY, body text)")
        .await
        .unwrap();
    (source, db)
}

/// A whole pipeline (a real `tributary run` with a plugin) over verify-full with channel
/// binding, the password only in `PGPASSWORD` or a password file: every change lands once, and
/// no command's output (at debug level), no file in the lake, and no metric shows the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_lands_exactly_once_over_verify_full_and_never_shows_the_password() {
    let server = tls_server();
    let (source, db) = events_database(server, "tls_pipeline").await;
    let url = format!(
        "postgres://{SCRAM_ROLE}@localhost:{}/{db}?{}",
        server.cluster.port(),
        params(
            server,
            "verify-full",
            &server.ca,
            "&channel_binding=require"
        )
    );
    let mut fixture = Fixture::new(&url, "tls_pipeline", &["public.events"]).await;
    fixture.cfg.transforms = vec![tributary_tests::plugin("passthrough")];
    fixture.file = fixture.cfg.write(&fixture.dir);
    let mut said = String::new();

    // check with the password in a password file, the way libpq reads one.
    let pgpass = fixture.dir.join("pgpass");
    std::fs::write(
        &pgpass,
        format!("# the test's\nlocalhost:*:{db}:{SCRAM_ROLE}:{SCRAM_PASSWORD}\n"),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let pgpass_env = [("PGPASSFILE", pgpass.to_str().unwrap())];
    let (code, out, err) = tributary("check", &fixture.file, &[], &pgpass_env).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("connection (SQL): TLS 1.3 (")
            && out.contains("connection (replication): TLS 1.3 (")
            && out.contains(&format!(
                "verify-full against {}, channel binding\n",
                server.ca.display()
            )),
        "{out}"
    );
    said.push_str(&out);
    said.push_str(&err);

    // A pipeline file that takes the password from a variable of its own naming.
    let mut referring = fixture.cfg.clone();
    referring.name = format!("{}_ref", fixture.name);
    referring.source_url = url.replacen(
        &format!("{SCRAM_ROLE}@"),
        &format!("{SCRAM_ROLE}:${{TLS_TEST_SECRET}}@"),
        1,
    );
    let referring = referring.write(&fixture.dir);
    let (code, out, err) = tributary("check", &referring, &[], &[]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(
            "source.url refers to the environment variable TLS_TEST_SECRET, which is not set"
        ),
        "{err}"
    );
    let secret = [("TLS_TEST_SECRET", SCRAM_PASSWORD)];
    let (code, out, err) = tributary("check", &referring, &[], &secret).await;
    assert!(
        out.contains(&format!(
            "verify-full against {}, channel binding\n",
            server.ca.display()
        )),
        "{out}{err}"
    );
    let _ = code;
    said.push_str(&out);
    said.push_str(&err);

    let env = [("PGPASSWORD", SCRAM_PASSWORD)];
    let debug = [
        ("PGPASSWORD", SCRAM_PASSWORD),
        ("RUST_LOG", "debug,wasmtime=warn,cranelift=warn"),
    ];
    let mut service = Service::spawn_with(&fixture.file, &[], &fixture.dir.join("run.log"), &debug);
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    source
        .batch_execute(
            "INSERT INTO events SELECT g, 'e' || g FROM generate_series(1, 200) g;
             UPDATE events SET body = 'u' WHERE id % 10 = 0;
             DELETE FROM events WHERE id % 7 = 0;",
        )
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 200 + 20 + 28, Duration::from_secs(90))
        .await;
    for args in [&[][..], &["--json"][..]] {
        let (code, out, err) = tributary("status", &fixture.file, args, &env).await;
        assert_eq!(code, 0, "{out}{err}");
        said.push_str(&out);
        said.push_str(&err);
    }
    said.push_str(&service.stop().await);

    let (code, out, err) = tributary("check", &fixture.file, &[], &[]).await;
    assert_eq!(code, 2, "check needs the password too: {out}{err}");
    assert!(
        err.contains(&format!(
            "the server at localhost:{} asks user \"{SCRAM_ROLE}\" for a password, and none was given; put it in PGPASSWORD",
            server.cluster.port()
        )),
        "{err}"
    );
    said.push_str(&out);
    said.push_str(&err);
    let (code, out, err) = tributary("verify", &fixture.file, &["--identities-only"], &env).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .last()
            .unwrap_or_default()
            .starts_with("verify: the lake's files are intact and no change landed twice"),
        "{out}"
    );
    said.push_str(&out);
    said.push_str(&err);
    let landed = tributary_tests::lake::committed_rows(&fixture.sink, "public.events").await;
    assert_eq!(landed.len(), 248, "every change once");

    let (code, out, err) = tributary("teardown", &fixture.file, &["--yes"], &env).await;
    assert_eq!(code, 0, "{out}{err}");
    said.push_str(&out);
    said.push_str(&err);

    assert!(
        !said.contains(SCRAM_PASSWORD),
        "a command showed the password:\n{said}"
    );
    let mut written = String::new();
    for name in tributary_tests::lake::object_names(fixture.sink.store().as_ref(), "").await {
        let bytes = fixture
            .sink
            .get(&object_store::path::Path::from(name.as_str()))
            .await
            .unwrap()
            .unwrap_or_default();
        written.push_str(&String::from_utf8_lossy(&bytes));
    }
    assert!(!written.is_empty());
    assert!(
        !written.contains(SCRAM_PASSWORD),
        "the lake holds the password"
    );
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

/// A busy TLS stream is read in chunks (the socket's low-water mark raised), and once it slows
/// down the last partial chunk and a lone transaction after it are still read at once: the
/// mark comes down again instead of leaving them until the server's next keepalive (30 s with
/// the default `wal_sender_timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_tls_stream_is_read_in_chunks_and_a_lone_change_after_it_lands_at_once() {
    let server = tls_server();
    let (source, db) = events_database(server, "tls_paced").await;
    let url = format!(
        "postgres://{SCRAM_ROLE}@localhost:{}/{db}?{}",
        server.cluster.port(),
        params(server, "verify-full", &server.ca, "")
    );
    let fixture = Fixture::new(&url, "tls_paced", &["public.events"]).await;
    let env = [
        ("PGPASSWORD", SCRAM_PASSWORD),
        ("RUST_LOG", "info,tributary::source::replication=debug"),
    ];
    let mut service = Service::spawn_with(&fixture.file, &[], &fixture.dir.join("run.log"), &env);
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    // About 10 MB of pgoutput in one transaction: far more than 32 KiB per 5 ms.
    source
        .batch_execute(
            "INSERT INTO events SELECT g, repeat('x', 50) FROM generate_series(1, 100000) g",
        )
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 100_000, Duration::from_secs(120))
        .await;
    let log = service.log();
    assert!(
        log.contains("the stream is busy: the socket wakes the reader at 32768 bytes"),
        "the bulk was not read in chunks:\n{log}"
    );
    let started = std::time::Instant::now();
    source
        .batch_execute("INSERT INTO events VALUES (0, 'alone')")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 100_001, Duration::from_secs(60))
        .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "a lone change after a busy stream took {took:?} to land"
    );
    assert!(
        service
            .log()
            .contains("the stream is slow: the socket wakes the reader at 1 bytes"),
        "{}",
        service.log()
    );
    service.stop().await;
    let landed = tributary_tests::lake::committed_rows(&fixture.sink, "public.events").await;
    assert_eq!(landed.len(), 100_001, "every change once");
}
