//! The plugin author's tools, as an author runs them: `tributary plugin check`, `plugin test`
//! and `plugin new`, on the bundled plugins and on freshly scaffolded ones built with each
//! language's own toolchain.
//!
//! The Python, JavaScript and C builds run when their toolchain is on the machine, as
//! `scripts/guest/*.sh` exports it (`TRIBUTARY_COMPONENTIZE_PY`, `TRIBUTARY_JCO`,
//! `TRIBUTARY_WIT_BINDGEN` with `clang-19`); without one, that part is skipped with a note.

use std::ffi::OsString;
use std::fmt::Write;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use tributary_tests::plugin;

const BIN: &str = env!("CARGO_BIN_EXE_tributary");

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tributary-cli-plugin-{hint}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tributary(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn tributary_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stdout of a command that must succeed.
fn succeeded(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The stderr of a command that must fail.
fn failed(what: &str, out: Output) -> String {
    assert!(
        !out.status.success(),
        "{what} should have failed:\nstdout:\n{}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

#[test]
fn check_prints_what_a_plugin_is_and_declares() {
    let messages = plugin("messages");
    let out = succeeded("check", tributary(&["plugin", "check", path(&messages)]));
    for want in [
        "name                messages",
        "version             0.1.0",
        "contract            tributary:transform/plugin@1.0.0",
        "reads columns       none",
        "reads messages      yes",
        "output messages (6 columns)",
        "  prefix         text   not null",
        "  before_seq     int8",
    ] {
        assert!(out.contains(want), "check prints {want:?}:\n{out}");
    }
    let digest = Sha256::digest(std::fs::read(&messages).unwrap());
    let hex = digest.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    assert!(out.contains(&format!("sha256              {hex}")), "{out}");

    let out = succeeded(
        "check --json",
        tributary(&["plugin", "check", "--json", path(&messages)]),
    );
    let report: Json = serde_json::from_str(&out).expect("check --json prints JSON");
    assert_eq!(report["name"], "messages");
    assert_eq!(report["version"], "0.1.0");
    assert_eq!(report["sha256"], hex.as_str());
    assert_eq!(report["contract"], "tributary:transform/plugin@1.0.0");
    assert_eq!(report["outputs"][0]["name"], "messages");
    let columns = report["outputs"][0]["columns"].as_array().unwrap();
    assert_eq!(columns.len(), 6);
    assert_eq!(
        columns[1],
        serde_json::json!({"name": "content", "type": "bytea", "nullable": false, "key": false})
    );
    assert_eq!(report["reads"]["columns"], serde_json::json!([]));
    assert_eq!(report["reads"]["messages"], true);
    assert_eq!(report["reshapes"], serde_json::json!([]));

    let out = succeeded(
        "check mask",
        tributary(&[
            "plugin",
            "check",
            path(&plugin("mask")),
            "--config",
            "columns=email,phone",
        ]),
    );
    assert!(out.contains("reads columns       email, phone"), "{out}");
    assert!(out.contains("reads old images    yes"), "{out}");
    assert!(out.contains("outputs             none declared"), "{out}");
}

#[test]
fn check_refuses_a_plugin_that_refuses_its_settings() {
    let err = failed(
        "check mask without columns",
        tributary(&["plugin", "check", path(&plugin("mask"))]),
    );
    assert!(err.contains("refused its configuration"), "{err}");
    assert!(err.contains("columns"), "{err}");

    let err = failed(
        "check mask with a typo",
        tributary(&[
            "plugin",
            "check",
            path(&plugin("mask")),
            "--config",
            "colums=email",
        ]),
    );
    assert!(err.contains("colums"), "{err}");

    let err = failed(
        "check an old plugin",
        tributary(&["plugin", "check", path(&plugin("old_contract"))]),
    );
    assert!(err.contains("tributary:transform@0.1.0"), "{err}");

    let err = failed(
        "check a plugin importing newer column functions",
        tributary(&["plugin", "check", path(&plugin("newer_functions"))]),
    );
    assert!(
        err.contains("it imports tributary:functions/columns@1.1.0, but this Tributary serves"),
        "{err}"
    );

    let err = failed(
        "a setting without =",
        tributary(&[
            "plugin",
            "check",
            path(&plugin("mask")),
            "--config",
            "columns",
        ]),
    );
    assert!(err.contains("expected KEY=VALUE"), "{err}");
}

const SALT: &str = "pepper";

/// What the mask plugin lands for `text`: `sha256:` and the first 16 hex digits of
/// SHA-256(salt, 0, text).
fn masked(text: &str) -> String {
    let hash = Sha256::new()
        .chain_update(SALT)
        .chain_update([0])
        .chain_update(text)
        .finalize();
    hash[..8].iter().fold(String::from("sha256:"), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

const USERS: &str = r#"
# Two transactions on one table.
{"table": "public.users", "columns": [["id", "int4", true], ["email", "text"], ["note", "text"], ["visits", "int8"]]}
{"table": "public.users", "op": "insert", "new": {"id": 1, "email": "ann@example.com", "note": "first", "visits": 9007199254740993}}
{"table": "public.users", "op": "insert", "new": {"id": 2, "note": "no email"}}
{"commit": true}
{"table": "public.users", "op": "update", "old": {"id": 1, "email": "ann@example.com"}, "new": {"id": 1, "email": "ann@example.net", "note": "first"}}
{"table": "public.users", "op": "delete", "old": {"id": 2}}
"#;

#[test]
fn test_lands_what_mask_makes_of_sample_changes() {
    let dir = temp_dir("mask");
    let changes = dir.join("changes.jsonl");
    std::fs::write(&changes, USERS).unwrap();
    let mask = plugin("mask");
    let args = [
        "plugin",
        "test",
        path(&mask),
        "--config",
        "columns=email",
        "--config",
        &format!("salt={SALT}"),
        "--changes",
        path(&changes),
    ];
    let out = succeeded("test --json", tributary(&[&args[..], &["--json"]].concat()));
    let rows: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    let (ann, ann2) = (masked("ann@example.com"), masked("ann@example.net"));
    assert_eq!(
        rows[0],
        serde_json::json!({
            "output": "public.users", "op": "insert", "commit_lsn": "0/1000080", "seq": 0,
            "sub": 0,
            "values": {"id": 1, "email": ann, "note": "first", "visits": 9007199254740993_i64},
            "old": null,
        })
    );
    assert_eq!(rows[1]["values"]["email"], Json::Null);
    assert_eq!(rows[1]["values"]["note"], "no email");
    // The second transaction commits later; seq counts within it.
    let lsn = |row: &Json| {
        row["commit_lsn"]
            .as_str()
            .unwrap()
            .parse::<tributary::Lsn>()
            .unwrap()
    };
    assert!(lsn(&rows[2]) > lsn(&rows[0]));
    assert_eq!(
        (rows[2]["op"].as_str(), rows[2]["seq"].as_u64()),
        (Some("update"), Some(0))
    );
    assert_eq!(rows[2]["values"]["email"], ann2.as_str());
    assert_eq!(
        rows[2]["old"]["email"],
        ann.as_str(),
        "the old image is masked too"
    );
    assert_eq!(rows[2]["old"]["id"], 1);
    assert_eq!(rows[3]["op"], "delete");
    assert_eq!(rows[3]["values"]["id"], 2);
    assert!(!out.contains("@example"), "nothing lands an address: {out}");
    // Keys in column order, as the output has them.
    let first = out.lines().next().unwrap();
    assert!(first.contains(r#""values":{"id":1,"email":"#), "{first}");

    let table = succeeded("test", tributary(&args));
    assert!(table.starts_with("public.users (4 rows)\n"), "{table}");
    let header = table.lines().nth(1).unwrap();
    for column in [
        "op",
        "commit_lsn",
        "seq",
        "id",
        "email",
        "note",
        "visits",
        "old",
    ] {
        assert!(header.split_whitespace().any(|c| c == column), "{header}");
    }
    assert!(
        table.contains(&ann2) && !table.contains("@example"),
        "{table}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn test_reads_changes_from_stdin_and_lands_declared_outputs() {
    let changes = r#"{"table": "t", "columns": [["id", "int8", true]]}
{"message": "audit", "content": "who=ann"}
{"table": "t", "op": "insert", "new": {"id": 7}}
{"commit": true}"#;
    let out = succeeded(
        "test messages",
        tributary_with_stdin(
            &[
                "plugin",
                "test",
                path(&plugin("messages")),
                "--changes",
                "-",
                "--json",
            ],
            changes,
        ),
    );
    let rows: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outputs: Vec<&str> = rows.iter().map(|r| r["output"].as_str().unwrap()).collect();
    assert_eq!(outputs, ["messages", "public.t"], "{out}");
    assert_eq!(rows[0]["values"]["prefix"], "audit");
    assert_eq!(rows[0]["values"]["text"], "who=ann");
    assert_eq!(rows[0]["values"]["before_seq"], 0);
    assert_eq!(rows[1]["values"]["id"], 7);
}

#[test]
fn a_malformed_line_is_refused_naming_it() {
    let passthrough = plugin("passthrough");
    let cases = [
        (
            "{\"table\": \"t\", \"columns\": [[\"id\", \"int4\", true]]}\n\n{\"table\": \"t\", \"op\": \"insert\", \"new\": {\"id\": 1}\n",
            "stdin line 3: not JSON",
        ),
        (
            "{\"table\": \"t\", \"columns\": [[\"id\", \"int4\", true]]}\n{\"table\": \"t\", \"op\": \"insert\", \"new\": {\"id\": \"one\"}}\n",
            "stdin line 2: new column \"id\" (int4): cannot read \"one\" as int4",
        ),
        (
            "{\"table\": \"t\", \"op\": \"insert\", \"new\": {\"id\": 1}}\n",
            "stdin line 1: table public.t is not declared",
        ),
    ];
    for (changes, want) in cases {
        let err = failed(
            "a malformed sample",
            tributary_with_stdin(
                &["plugin", "test", path(&passthrough), "--changes", "-"],
                changes,
            ),
        );
        assert!(err.contains(want), "{want}: {err}");
    }
    let dir = temp_dir("malformed");
    let file = dir.join("bad.jsonl");
    std::fs::write(&file, "{\"commit\": 1}\n").unwrap();
    let err = failed(
        "a malformed file",
        tributary(&[
            "plugin",
            "test",
            path(&passthrough),
            "--changes",
            path(&file),
        ]),
    );
    assert!(
        err.contains(&format!("{} line 1: a commit is", file.display())),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn test_help_documents_the_changes_format() {
    let help = succeeded("test --help", tributary(&["plugin", "test", "--help"]));
    for want in [
        "\"columns\"",
        "\"op\": \"insert\"",
        "{\"commit\": true}",
        "RFC 3339",
    ] {
        assert!(help.contains(want), "{want}: {help}");
    }
}

#[test]
fn new_refuses_bad_names_and_non_empty_directories() {
    let dir = temp_dir("new-refusals");
    let err = failed(
        "new My.Plugin",
        tributary(&[
            "plugin",
            "new",
            "--lang",
            "rust",
            "My.Plugin",
            "--dir",
            path(&dir.join("x")),
        ]),
    );
    assert!(
        err.contains("lowercase ASCII letters, digits, '-' and '_'"),
        "{err}"
    );
    std::fs::write(dir.join("taken"), "").unwrap();
    let err = failed(
        "new into a non-empty directory",
        tributary(&["plugin", "new", "--lang", "c", "fine", "--dir", path(&dir)]),
    );
    assert!(err.contains("not empty"), "{err}");
    assert!(!dir.join("Makefile").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Scaffold a plugin; `dir` is created empty first, which `new` accepts.
fn scaffold(lang: &str, name: &str, dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    succeeded(
        "plugin new",
        tributary(&["plugin", "new", "--lang", lang, name, "--dir", path(dir)]),
    )
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Run a toolchain command in `dir`, printing its output (shown when the test fails).
fn run_in(
    dir: &Path,
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
    env: &[(&str, OsString)],
) -> String {
    let mut command = Command::new(program.as_ref());
    command.args(args).current_dir(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", program.as_ref()));
    let what = format!("{:?} {}", program.as_ref(), args.join(" "));
    eprintln!("{what}:\n{}{}", text(&out.stdout), text(&out.stderr));
    succeeded(&what, out)
}

/// Where the tributary commands of a scaffold test keep compiled plugins: a directory of the
/// test's own (`dir` is removed at the end), not the user's cache, which would gain an entry
/// per run (a scaffold's build is not byte for byte the same from one run to the next).
fn plugin_cache(dir: &Path) -> (&'static str, OsString) {
    (
        "TRIBUTARY_PLUGIN_CACHE",
        dir.join("plugin-cache").into_os_string(),
    )
}

/// `tributary` with the scaffold test's own plugin cache.
fn tributary_cached(args: &[&str], dir: &Path) -> Output {
    let (key, value) = plugin_cache(dir);
    Command::new(BIN)
        .args(args)
        .env(key, value)
        .output()
        .unwrap()
}

/// `tributary plugin check` and `plugin test` on a built scaffold in `dir`: it is the plugin
/// `name`, and it keeps the sample's four changes.
fn check_built(component: &Path, name: &str, dir: &Path) {
    let out = succeeded(
        "check the built plugin",
        tributary_cached(&["plugin", "check", path(component)], dir.parent().unwrap()),
    );
    assert!(
        out.contains(&format!("name                {name}\n")),
        "{out}"
    );
    assert!(out.contains("reads columns       none"), "{out}");
    let out = succeeded(
        "test the built plugin",
        tributary_cached(
            &[
                "plugin",
                "test",
                path(component),
                "--changes",
                path(&dir.join("changes.jsonl")),
            ],
            dir.parent().unwrap(),
        ),
    );
    assert!(out.starts_with("public.users (4 rows)\n"), "{out}");
    assert!(out.contains("ann@example.net"), "{out}");
}

#[test]
fn new_rust_plugin_builds_passes_its_tests_and_loads() {
    let dir = temp_dir("new-rust").join("scaffolded-rust");
    let said = scaffold("rust", "scaffolded-rust", &dir);
    assert!(
        said.contains("cargo build --target wasm32-wasip2 --release"),
        "{said}"
    );
    assert!(read(&dir, "Cargo.toml").contains("name = \"scaffolded-rust\""));
    assert!(read(&dir, "Cargo.toml").contains("[workspace]"));
    assert!(read(&dir, "src/lib.rs").contains("PluginInfo::new(\"scaffolded-rust\""));
    assert!(read(&dir, "tributary-guest/Cargo.toml").contains("wit-bindgen = \"0.46\""));
    assert!(
        read(&dir, "tributary-guest/wit/transform.wit")
            .contains("package tributary:transform@1.0.0;")
    );
    assert!(dir.join("tributary-guest/src/testing.rs").is_file());

    // The scaffold's dependencies are small: build them into the shared target directory
    // when there is one, instead of compiling from scratch.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
    let tests = run_in(&dir, &cargo, &["test"], &[]);
    assert!(tests.contains("test result: ok. 2 passed"), "{tests}");
    run_in(
        &dir,
        &cargo,
        &["build", "--release", "--target", "wasm32-wasip2"],
        &[],
    );
    let component = target_dir
        .unwrap_or_else(|| dir.join("target"))
        .join("wasm32-wasip2/release/scaffolded_rust.wasm");
    check_built(&component, "scaffolded-rust", &dir);
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// The toolchain named by `variable`, or `None` after saying the build is skipped.
fn toolchain(variable: &str, lang: &str) -> Option<PathBuf> {
    let found = std::env::var_os(variable)
        .map(PathBuf::from)
        .filter(|p| p.exists());
    if found.is_none() {
        eprintln!(
            "note: {variable} is not set, so the {lang} scaffold is not built here; \
             scripts/test.sh sets it up (scripts/guest/)"
        );
    }
    found
}

/// `PATH` with `dirs` in front.
fn path_with(dirs: &[&Path]) -> OsString {
    let mut all: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    all.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(all).unwrap()
}

fn bin_dir() -> &'static Path {
    Path::new(BIN).parent().unwrap()
}

#[test]
fn new_python_plugin_is_written_and_builds_with_componentize_py() {
    let dir = temp_dir("new-python").join("scaffolded-py");
    let said = scaffold("python", "scaffolded-py", &dir);
    assert!(
        said.contains("python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1"),
        "the next steps name the install: {said}"
    );
    let missing = Command::new(dir.join("build.sh"))
        .env("COMPONENTIZE_PY", "no-such-componentize-py")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
    assert!(
        text(&missing.stderr).contains("no-such-componentize-py not found; install it here with:"),
        "{}",
        text(&missing.stderr)
    );
    assert!(read(&dir, "app.py").contains("NAME = \"scaffolded-py\""));
    assert!(read(&dir, "build.sh").contains("-o scaffolded-py.wasm"));
    assert!(read(&dir, "wit/transform.wit").contains("world transform"));
    assert!(read(&dir, "README.md").contains("./test.sh"));
    if let Some(componentize_py) = toolchain("TRIBUTARY_COMPONENTIZE_PY", "Python") {
        let env = [
            ("COMPONENTIZE_PY", componentize_py.into_os_string()),
            ("TRIBUTARY", BIN.into()),
            plugin_cache(dir.parent().unwrap()),
        ];
        let out = run_in(&dir, dir.join("test.sh"), &[], &env);
        assert!(out.contains("name                scaffolded-py\n"), "{out}");
        assert!(out.contains("public.users (4 rows)"), "{out}");
        check_built(&dir.join("scaffolded-py.wasm"), "scaffolded-py", &dir);
    }
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn new_js_plugin_is_written_and_builds_with_jco() {
    let dir = temp_dir("new-js").join("scaffolded-js");
    scaffold("js", "scaffolded-js", &dir);
    let manifest: Json = serde_json::from_str(&read(&dir, "package.json")).unwrap();
    assert_eq!(manifest["name"], "scaffolded-js");
    assert!(
        manifest["scripts"]["build"]
            .as_str()
            .unwrap()
            .contains("src/scaffolded-js.js")
    );
    let lock: Json = serde_json::from_str(&read(&dir, "package-lock.json")).unwrap();
    assert_eq!(lock["packages"][""]["name"], "scaffolded-js");
    assert!(read(&dir, "src/scaffolded-js.js").contains("const NAME = 'scaffolded-js';"));
    assert!(read(&dir, "wit/transform.wit").contains("world transform"));
    if let Some(jco) = toolchain("TRIBUTARY_JCO", "JavaScript") {
        // `npm test` runs the package's own build script, then checks and tests the result
        // with the tributary command, both found on PATH.
        let env = [
            ("PATH", path_with(&[jco.parent().unwrap(), bin_dir()])),
            plugin_cache(dir.parent().unwrap()),
        ];
        let out = run_in(&dir, "npm", &["test"], &env);
        assert!(out.contains("name                scaffolded-js\n"), "{out}");
        assert!(out.contains("public.users (4 rows)"), "{out}");
        check_built(&dir.join("dist/scaffolded-js.wasm"), "scaffolded-js", &dir);
    }
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn new_c_plugin_is_written_and_builds_with_clang() {
    let dir = temp_dir("new-c").join("scaffolded-c");
    scaffold("c", "scaffolded-c", &dir);
    assert!(read(&dir, "scaffolded-c.c").contains("#define PLUGIN_NAME \"scaffolded-c\""));
    assert!(read(&dir, "Makefile").contains("PLUGIN := scaffolded-c"));
    assert!(dir.join("text.c").is_file() && dir.join("text.h").is_file());
    assert!(read(&dir, "wit/transform.wit").contains("world transform"));
    let clang = Command::new("clang-19")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !clang {
        eprintln!("note: clang-19 is not on PATH, so the C scaffold is not built here");
    } else if let Some(wit_bindgen) = toolchain("TRIBUTARY_WIT_BINDGEN", "C") {
        let wit_bindgen = format!("WIT_BINDGEN={}", wit_bindgen.display());
        let tributary = format!("TRIBUTARY={BIN}");
        let env = [plugin_cache(dir.parent().unwrap())];
        let out = run_in(&dir, "make", &["test", &wit_bindgen, &tributary], &env);
        assert!(out.contains("name                scaffolded-c\n"), "{out}");
        assert!(out.contains("public.users (4 rows)"), "{out}");
        check_built(&dir.join("build/scaffolded-c.wasm"), "scaffolded-c", &dir);
    }
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// The compile cache keeps within its bound, dropping the entry used least recently, and
/// `plugin cache` shows and clears it.
#[test]
fn the_plugin_cache_keeps_within_its_bound_and_is_shown_and_cleared() {
    let dir = temp_dir("plugin-cache");
    let cache = dir.join("cache");
    let with_cache = |args: &[&str], cap_mib: &str| {
        Command::new(BIN)
            .args(args)
            .env("TRIBUTARY_PLUGIN_CACHE", &cache)
            .env("TRIBUTARY_PLUGIN_CACHE_MIB", cap_mib)
            .env("RUST_LOG", "info")
            .output()
            .unwrap()
    };
    let entries = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&cache)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    succeeded(
        "check passthrough",
        with_cache(&["plugin", "check", path(&plugin("passthrough"))], "1024"),
    );
    succeeded(
        "check messages",
        with_cache(&["plugin", "check", path(&plugin("messages"))], "1024"),
    );
    assert_eq!(entries().len(), 2, "{:?}", entries());

    let shown = succeeded("plugin cache", with_cache(&["plugin", "cache"], "1024"));
    assert!(
        shown.contains(&format!("cache     {}", cache.display())),
        "{shown}"
    );
    assert!(shown.contains("bound     1024 MiB"), "{shown}");
    assert!(shown.contains("entries   2, "), "{shown}");
    for name in entries() {
        assert!(shown.contains(&name), "{shown}");
    }

    // A bound of 0 keeps only the entry just written: a new build evicts the others.
    let mask = plugin("mask");
    let out = with_cache(
        &["plugin", "check", path(&mask), "--config", "columns=email"],
        "0",
    );
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("removed 2 compiled plugin(s) used least recently"),
        "{log}"
    );
    assert_eq!(entries().len(), 1, "{:?}", entries());

    let cleared = succeeded(
        "plugin cache --clear",
        with_cache(&["plugin", "cache", "--clear"], "0"),
    );
    assert!(
        cleared.starts_with("removed 1 compiled plugin(s), "),
        "{cleared}"
    );
    assert!(entries().is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}
