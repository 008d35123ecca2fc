//! The deployment files (issue 22, "Packaging"): the image the Dockerfile makes runs
//! `tributary` as a non-root user with its plugins and cache volume, and passes `check` against
//! the test cluster with the compose file's pipeline; the Kubernetes manifest validates against
//! the Kubernetes schema and wires what the pipeline file needs; the alert rules pass promtool
//! and their unit tests; and the alerts and the dashboard name only metrics that a real
//! pipeline serves.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tributary_tests::container::{self, BUNDLED_PLUGINS, Engine};
use tributary_tests::manifests::{
    declared_families, kubernetes_validate, metric_names, promtool, repo_root, yaml,
};
use tributary_tests::service::{Fixture, Service, scrape, tributary_bin};
use tributary_tests::{S3Server, fresh_database, plugin, plugin_dir};

/// `tributary check --config <file>` on this machine, with `env`: exit code and stderr.
fn check_on_host(file: &Path, env: &[(String, String)]) -> (i32, String) {
    let output = std::process::Command::new(tributary_bin())
        .args(["check", "--config"])
        .arg(file)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `${NAME}` references of a pipeline file, in order.
fn expanded_names(text: &str) -> Vec<String> {
    text.split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

/// `key=value` query parameters of a URL.
fn url_parameter<'a>(url: &'a str, key: &str) -> Option<&'a str> {
    url.split_once('?')?
        .1
        .split('&')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {value:#}"))
}

#[test]
fn the_manifest_validates_against_the_kubernetes_schema_and_wires_what_the_pipeline_needs() {
    let dir = repo_root().join("deploy/kubernetes");
    let files = ["configmap.yaml", "secret.yaml", "deployment.yaml"];
    let output = std::process::Command::new(kubernetes_validate())
        .arg("--strict")
        .args(files.map(|f| dir.join(f)))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    assert_eq!(said.matches(" passed for resource ").count(), 3, "{said}");

    // The validator does refuse: a Deployment whose replicas is not a number.
    let broken = std::env::temp_dir().join(tributary_tests::unique_name("broken_manifest"));
    std::fs::create_dir_all(&broken).unwrap();
    let text = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    assert!(text.contains("replicas: 1\n"));
    let file = broken.join("deployment.yaml");
    std::fs::write(&file, text.replace("replicas: 1\n", "replicas: one\n")).unwrap();
    let output = std::process::Command::new(kubernetes_validate())
        .arg("--strict")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success(), "a broken Deployment validated");
    let _ = std::fs::remove_dir_all(&broken);

    let deployment = yaml(&dir.join("deployment.yaml"));
    let pod = &deployment["spec"]["template"]["spec"];
    let tributary = &pod["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], 1);
    // Kubernetes must not wait for the new pod to be ready before stopping the old one: it
    // cannot be ready while the old one holds the slot.
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    assert!(
        pod["terminationGracePeriodSeconds"].as_u64().unwrap() >= 30,
        "the clean stop may wait 5 s for the sink on top of the flush in flight"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(tributary["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(str_at(tributary, "/livenessProbe/httpGet/path"), "/healthz");
    assert_eq!(str_at(tributary, "/readinessProbe/httpGet/path"), "/readyz");
    let port = tributary["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(
        str_at(
            &deployment,
            "/spec/template/metadata/annotations/prometheus.io~1port"
        ),
        port.to_string()
    );
    assert_eq!(
        str_at(
            &deployment,
            "/spec/template/metadata/annotations/prometheus.io~1scrape"
        ),
        "true"
    );
    let args: Vec<&str> = tributary["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--wait"),
        "a rolling update waits for the slot: {args:?}"
    );
    let mounts = tributary["volumeMounts"].as_array().unwrap();
    let mount_of = |volume: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == volume)
            .map(|m| m["mountPath"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("no mount of volume {volume}"))
    };
    let volume = |name: &str| {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
            .clone()
    };
    assert_eq!(mount_of("plugin-cache"), "/var/cache/tributary");
    assert_eq!(mount_of("tmp"), "/tmp");
    // The key: readable by no one but the pod's group, and owned by root (libpq's rule).
    let tls = volume("tls");
    let mode = tls["secret"]["defaultMode"].as_u64().unwrap();
    assert_eq!(
        mode & 0o037,
        0,
        "the client key's mode {mode:o} is too open"
    );
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);

    // The pipeline file: where the Deployment's args read it, every ${NAME} set by the
    // container's environment, its TLS files where the Secret is mounted, and its metrics on
    // the probes' port.
    let configmap = yaml(&dir.join("configmap.yaml"));
    let config_mount = mount_of("config");
    let config_path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    assert_eq!(config_path, format!("{config_mount}/pipeline.toml"));
    let pipeline = str_at(&configmap, "/data/pipeline.toml");
    let env: Vec<String> = tributary["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    let names = expanded_names(pipeline);
    assert!(
        !names.is_empty(),
        "the ConfigMap holds its secrets as ${{NAME}}"
    );
    for name in &names {
        assert!(
            env.contains(name),
            "${{{name}}} is not set by the Deployment: {env:?}"
        );
        let from = tributary["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name.as_str())
            .unwrap();
        assert_eq!(
            str_at(from, "/valueFrom/secretKeyRef/name"),
            "tributary-shop"
        );
    }
    assert!(
        pipeline.contains(&format!("listen = \"0.0.0.0:{port}\"")),
        "{pipeline}"
    );
    let parsed: toml::Table = pipeline.parse().unwrap();
    let url = parsed["source"]["url"].as_str().unwrap();
    let tls_mount = mount_of("tls");
    let items: Vec<&str> = tls["secret"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    for key in ["sslrootcert", "sslcert", "sslkey"] {
        let path = url_parameter(url, key).unwrap_or_else(|| panic!("no {key} in {url}"));
        let file = path
            .strip_prefix(&format!("{tls_mount}/"))
            .unwrap_or_else(|| panic!("{key} {path} is outside the Secret's mount {tls_mount}"));
        assert!(
            items.contains(&file),
            "{key} {path}: the Secret mounts {items:?}"
        );
    }
    let secret = yaml(&dir.join("secret.yaml"));
    for name in names.iter().chain(&["PGPASSWORD".to_owned()]) {
        assert!(
            secret["stringData"].get(name).is_some(),
            "the Secret has no {name}"
        );
    }

    // Tributary itself reads the file: with the variables set, the first thing it stops at is
    // the TLS files that only the pod has, not the file.
    let dir = std::env::temp_dir().join(tributary_tests::unique_name("manifest_pipeline"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, pipeline).unwrap();
    // What the Deployment sets literally goes in as written; what comes from the Secret gets
    // a stand-in value.
    let values: Vec<(String, String)> = tributary["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let value = e["value"].as_str().unwrap_or("placeholder");
            (e["name"].as_str().unwrap().to_owned(), value.to_owned())
        })
        .collect();
    let (code, stderr) = check_on_host(&file, &values);
    assert_eq!(code, 2, "{stderr}");
    // The Deployment asks for JSON logs: the refusal is one JSON line at ERROR.
    let line: serde_json::Value = serde_json::from_str(stderr.trim())
        .unwrap_or_else(|e| panic!("not one JSON line ({e}): {stderr}"));
    assert_eq!(line["level"], "ERROR", "{stderr}");
    assert!(
        line["message"].as_str().unwrap().starts_with(&format!(
            "cannot read the root certificate file {tls_mount}/ca.crt (sslrootcert)"
        )),
        "{stderr}"
    );
    // And without them, it names one that is missing.
    let (_, stderr) = check_on_host(&file, &[]);
    assert!(
        names.iter().any(|n| stderr.contains(&format!(
            "refers to the environment variable {n}, which is not set"
        ))),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = repo_root().join("examples/monitoring");
    for args in [
        &["check", "rules", "alerts.yml"][..],
        &["test", "rules", "alerts-test.yml"][..],
    ] {
        let output = std::process::Command::new(promtool())
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // The five conditions each have an alert.
    let rules = yaml(&dir.join("alerts.yml"));
    let exprs: Vec<&str> = rules["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap())
        .collect();
    for needle in [
        "tributary_slot_retained_wal_bytes >",
        "tributary_slot_wal_status{status=\"reserved\"} == 0",
        "tributary_lag_seconds >",
        "tributary_ready == 0",
        "increase(tributary_dead_letters_total",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(needle)),
            "no alert on {needle}: {exprs:?}"
        );
    }
}

/// Every expression of the alert rules and of the dashboard's panels.
fn monitoring_expressions() -> Vec<String> {
    let dir = repo_root().join("examples/monitoring");
    let rules = yaml(&dir.join("alerts.yml"));
    let mut exprs: Vec<String> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("dashboard.json")).unwrap())
            .expect("the dashboard is JSON");
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            exprs.push(query.to_owned());
        }
    }
    exprs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerts_and_the_dashboard_name_only_metrics_a_running_pipeline_serves() {
    let used: std::collections::BTreeSet<String> = monitoring_expressions()
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();
    assert!(used.len() >= 10, "{used:?}");

    let db = fresh_database("monitoring").await;
    db.client
        .batch_execute("CREATE TABLE public.signups (id bigint PRIMARY KEY, email text)")
        .await
        .unwrap();
    let mut fixture = Fixture::new(&db.url, "monitoring", &["public.signups"]).await;
    // A plugin, so that its families are served; slot gauges sampled every second.
    fixture.cfg.transforms = vec![plugin("passthrough")];
    fixture
        .cfg
        .source
        .push(("status_interval_secs".into(), "1".into()));
    let mut text = fixture.cfg.toml();
    text.push_str("\n[metrics]\nlisten = \"127.0.0.1:0\"\n");
    std::fs::write(&fixture.file, text).unwrap();
    let mut service = Service::spawn(&fixture.file, &[], &fixture.dir.join("run.log"));
    service
        .wait_for_log("streaming", Duration::from_secs(120))
        .await;
    let address = service.metrics_address();
    db.client
        .batch_execute("INSERT INTO public.signups VALUES (1, 'ann@example.com')")
        .await
        .unwrap();
    service
        .wait_for_landed(&fixture.log, 1, Duration::from_secs(60))
        .await;

    // Families that come with a sample of the source show up within a few status intervals.
    let deadline = Instant::now() + Duration::from_secs(20);
    let missing = loop {
        let served = declared_families(&scrape(&address).await);
        let missing: Vec<&String> = used.iter().filter(|n| !served.contains(n)).collect();
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        missing.is_empty(),
        "examples/monitoring names metrics that a running pipeline does not serve: {missing:?}"
    );
    service.stop().await;
    let _ = std::fs::remove_dir_all(&fixture.dir);
}

#[test]
fn the_compose_file_runs_logical_postgres_and_mounts_a_pipeline_file_tributary_reads() {
    let root = repo_root();
    let compose = yaml(&root.join("docker-compose.yml"));
    let services = &compose["services"];
    let postgres: Vec<&str> = services["postgres"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(postgres.contains(&"wal_level=logical"), "{postgres:?}");
    let tributary = &services["tributary"];
    assert_eq!(str_at(tributary, "/build"), ".");
    let volumes: Vec<&str> = tributary["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let pipeline = volumes
        .iter()
        .find_map(|v| v.strip_suffix(":/etc/tributary/pipeline.toml:ro"))
        .unwrap_or_else(|| panic!("no pipeline file at the image's default path: {volumes:?}"));
    assert!(
        volumes.iter().any(|v| v.ends_with(":/var/cache/tributary")),
        "the plugin cache is not on a volume: {volumes:?}"
    );
    let file = root.join(pipeline);
    let text = std::fs::read_to_string(&file).unwrap();
    let parsed: toml::Table = text.parse().unwrap();
    let sink = parsed["sink"]["url"].as_str().unwrap();
    // The bucket the one-shot service creates is the sink's.
    let bucket = sink
        .strip_prefix("s3://")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let makes_bucket = services
        .as_object()
        .unwrap()
        .values()
        .filter_map(|s| s["command"].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .any(|c| c.contains(&format!("mc mb --ignore-existing lake/{bucket}")));
    assert!(makes_bucket, "no service creates bucket {bucket}");
    // Its metrics on the port the image's HEALTHCHECK asks.
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert!(text.contains("listen = \"0.0.0.0:9187\""), "{text}");
    assert!(dockerfile.contains("http://127.0.0.1:9187/healthz"));

    // Tributary reads the file with the compose environment, and stops only at the database
    // that exists inside compose alone.
    let env: Vec<(String, String)> = tributary["environment"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    let mut env_refused = env.clone();
    env_refused.push((
        "TRIBUTARY_SOURCE_URL".into(),
        "postgres://tributary@127.0.0.1:1/shop?sslmode=disable".into(),
    ));
    let (code, stderr) = check_on_host(&file, &env_refused);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.starts_with("error: cannot connect to the source database"),
        "{stderr}"
    );
}

/// The image, built from the binary the suite built, runs `tributary --version` as the
/// Dockerfile's user with its plugins; then `tributary check` in it, with the compose file's
/// pipeline file and environment pointed at the test cluster and a private S3 server, finds
/// the pipeline ready, and a second check loads the plugin from the cache volume the first
/// one filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_its_user_and_checks_the_compose_pipeline_against_the_test_cluster() {
    let engine = Engine::find();
    let work = std::env::temp_dir().join(tributary_tests::unique_name("image"));
    std::fs::create_dir_all(&work).unwrap();
    let binary = tributary_bin();
    let base = container::base_image(&engine, &binary, &work).unwrap();
    if let Err(reason) = container::probe(&engine, &base) {
        // The one case that skips: the engine cannot start any container on this host.
        eprintln!("skipped: {reason}");
        return;
    }
    let image = container::tributary_image(
        &engine,
        &repo_root().join("Dockerfile"),
        &base,
        &binary,
        &plugin_dir(),
        &work,
    )
    .unwrap();

    // What the image says about itself.
    let inspect = engine.output(engine.command().args(["image", "inspect", &image.tag]));
    assert!(inspect.status.success());
    let inspect: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let config = &inspect[0]["Config"];
    assert_eq!(config["User"], "65532:65532", "{config:#}");
    assert_eq!(config["Entrypoint"], serde_json::json!(["tributary"]));
    assert!(
        config["Volumes"].get("/var/cache/tributary").is_some(),
        "{config:#}"
    );
    let env: Vec<&str> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"TRIBUTARY_PLUGIN_CACHE=/var/cache/tributary/plugins"),
        "{env:?}"
    );
    let health = inspect[0]["Healthcheck"]["Test"].to_string();
    assert!(health.contains("/healthz"), "{:#}", inspect[0]);

    // --version, on a read-only root and no network, as the image's user.
    let host_version = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .unwrap();
    let run = engine.output(engine.run().args([
        "--read-only",
        "--network",
        "none",
        &image.tag,
        "--version",
    ]));
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(run.stdout, host_version.stdout);
    assert!(String::from_utf8_lossy(&run.stdout).starts_with("tributary "));

    // The compose pipeline, against the test cluster and a private S3 server.
    let root = repo_root();
    let db = fresh_database("image").await;
    db.client
        .batch_execute(&std::fs::read_to_string(root.join("deploy/compose/init.sql")).unwrap())
        .await
        .unwrap();
    let s3 = S3Server::start();
    s3.create_bucket("lake").await;
    let pipeline = root.join("deploy/compose/pipeline.toml");
    let text = std::fs::read_to_string(&pipeline).unwrap();
    let parsed: toml::Table = text.parse().unwrap();
    // The file's URL with the compose host and database swapped for the test cluster's.
    let port = db
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let source = parsed["source"]["url"].as_str().unwrap().replace(
        "@postgres:5432/shop",
        &format!("@127.0.0.1:{port}/{}", db.name),
    );
    assert_ne!(source, parsed["source"]["url"].as_str().unwrap());
    let compose = yaml(&root.join("docker-compose.yml"));
    let mut env: Vec<(String, String)> = compose["services"]["tributary"]["environment"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    for (name, value) in [
        ("AWS_ENDPOINT", s3.endpoint()),
        ("AWS_ACCESS_KEY_ID", s3.access_key().to_owned()),
        ("AWS_SECRET_ACCESS_KEY", s3.secret_key().to_owned()),
        ("AWS_REGION", s3.region().to_owned()),
        ("TRIBUTARY_SOURCE_URL", source),
    ] {
        env.retain(|(k, _)| k != name);
        env.push((name.to_owned(), value));
    }
    let cache = format!("tributary-test-cache-{}", std::process::id());
    let check = || {
        let mut command = engine.run();
        command.args(["--read-only", "--network", "host"]);
        for (name, value) in &env {
            command.arg("--env").arg(format!("{name}={value}"));
        }
        command
            .arg("--volume")
            .arg(format!(
                "{}:/etc/tributary/pipeline.toml:ro",
                pipeline.display()
            ))
            .arg("--volume")
            .arg(format!("{cache}:/var/cache/tributary"))
            .args([
                &image.tag,
                "check",
                "--config",
                "/etc/tributary/pipeline.toml",
            ]);
        let output = engine.output(&mut command);
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, out, err) = check();
    let remove_cache = || {
        let _ = engine.output(engine.command().args(["volume", "rm", "--force", &cache]));
    };
    if code != 0 {
        remove_cache();
    }
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.ends_with("check: the pipeline is ready to run\n"),
        "{out}"
    );
    assert!(
        out.contains("ok    plugin \"mask\"")
            && out.contains("(/usr/share/tributary/plugins/mask.wasm)"),
        "{out}"
    );
    assert!(err.contains("compiling the plugin"), "{err}");
    let (code, out, err) = check();
    remove_cache();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !err.contains("compiling the plugin"),
        "the second check compiled the plugin again: the cache volume did not keep it\n{err}"
    );

    // Every bundled plugin is in the image, as the host built it.
    let name = format!("tributary-test-plugins-{}", std::process::id());
    let created = engine.output(
        engine
            .command()
            .args(["create", "--name", &name, &image.tag]),
    );
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let copied = engine.output(
        engine
            .command()
            .args(["cp", &format!("{name}:/usr/share/tributary/plugins")])
            .arg(work.join("plugins")),
    );
    let _ = engine.output(engine.command().args(["rm", "--force", "--volumes", &name]));
    assert!(
        copied.status.success(),
        "{}",
        String::from_utf8_lossy(&copied.stderr)
    );
    for plugin in BUNDLED_PLUGINS {
        let file = format!("{plugin}.wasm");
        let inside = std::fs::read(work.join("plugins").join(&file))
            .unwrap_or_else(|error| panic!("{file} is not in the image: {error}"));
        assert!(
            inside == std::fs::read(plugin_dir().join(&file)).unwrap(),
            "{file} differs"
        );
    }
    drop(image);
    drop(base);
    let _ = std::fs::remove_dir_all(&work);
}
