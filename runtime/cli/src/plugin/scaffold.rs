//! `tributary plugin new`: a passthrough-shaped plugin to start from, in Rust, Python,
//! JavaScript or C, that builds and passes its own test with that language's toolchain.
//!
//! Everything it writes is carried in this binary, so it works anywhere: the contract
//! (`guest-sdk/wit/transform.wit`), the Rust guest SDK (vendored into a Rust plugin, which then
//! needs nothing but crates from the registry), the templates in `runtime/cli/templates/`, and
//! the parts of `examples/plugins/` they are based on (the C string helpers, the JavaScript
//! tools' pinned versions and lock file).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::ValueEnum;
use serde_json::{Value as Json, json};

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
    C,
}

const WIT: &str = include_str!("../../../../guest-sdk/wit/transform.wit");
const SDK_LIB: &str = include_str!("../../../../guest-sdk/src/lib.rs");
const SDK_TESTING: &str = include_str!("../../../../guest-sdk/src/testing.rs");
const SDK_FUNCTIONS: &str = include_str!("../../../../guest-sdk/src/functions.rs");
const FUNCTIONS_WIT: &str = include_str!("../../../../guest-sdk/wit/deps/functions/columns.wit");
const CHANGES: &str = include_str!("../../templates/changes.jsonl");

const RUST: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../templates/rust/Cargo.toml"),
    ),
    (
        "src/lib.rs",
        include_str!("../../templates/rust/src/lib.rs"),
    ),
    ("README.md", include_str!("../../templates/rust/README.md")),
    (".gitignore", include_str!("../../templates/rust/gitignore")),
    (
        "tributary-guest/Cargo.toml",
        include_str!("../../templates/rust/tributary-guest/Cargo.toml"),
    ),
];

const PYTHON: &[(&str, &str)] = &[
    (
        "app.py",
        include_str!("../../../../examples/plugins/python/passthrough/app.py"),
    ),
    ("build.sh", include_str!("../../templates/python/build.sh")),
    ("test.sh", include_str!("../../templates/python/test.sh")),
    (
        "README.md",
        include_str!("../../templates/python/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../../templates/python/gitignore"),
    ),
];

const JS: &[(&str, &str)] = &[
    (
        "src/{{name}}.js",
        include_str!("../../../../examples/plugins/js/src/passthrough.js"),
    ),
    ("README.md", include_str!("../../templates/js/README.md")),
    (".gitignore", include_str!("../../templates/js/gitignore")),
];

const C: &[(&str, &str)] = &[
    (
        "{{name}}.c",
        include_str!("../../../../examples/plugins/c/passthrough.c"),
    ),
    ("Makefile", include_str!("../../templates/c/Makefile")),
    ("README.md", include_str!("../../templates/c/README.md")),
    (".gitignore", include_str!("../../templates/c/gitignore")),
    (
        "text.c",
        include_str!("../../../../examples/plugins/c/text.c"),
    ),
    (
        "text.h",
        include_str!("../../../../examples/plugins/c/text.h"),
    ),
];

/// The JavaScript examples' manifest and lock file: the scaffold pins the same tools.
/// The names of the passthrough examples a new plugin's source starts from.
const EXAMPLE_NAMES: [&str; 3] = ["passthrough-py", "passthrough-js", "passthrough-c"];

const JS_EXAMPLE_MANIFEST: &str = include_str!("../../../../examples/plugins/js/package.json");
const JS_EXAMPLE_LOCK: &str = include_str!("../../../../examples/plugins/js/package-lock.json");
/// The examples' package name and version, as the lock file records them for its root.
const JS_EXAMPLE_NAME: &str = "tributary-js-plugins";

/// The version of a new plugin.
const PLUGIN_VERSION: &str = "0.1.0";

/// Names no new plugin may take: what the vendored SDK is called, and names Rust reserves.
const RESERVED: &[&str] = &[
    "tributary-guest",
    "tributary_guest",
    "std",
    "core",
    "alloc",
    "test",
    "proc-macro",
    "proc_macro",
    "self",
    "super",
    "crate",
    "build",
    "deps",
    "examples",
    "incremental",
    "node_modules",
];

/// Rust's keywords, which a crate name must not be.
const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
    "return", "static", "struct", "trait", "true", "type", "unsafe", "use", "where", "while",
    "abstract", "become", "box", "do", "final", "gen", "macro", "override", "priv", "try",
    "typeof", "unsized", "virtual", "yield",
];

/// Whether `name` can name a plugin package in every language; the error says what can.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    const RULE: &str = "a plugin name is 1 to 64 lowercase ASCII letters, digits, '-' and '_', \
                        starting with a letter (it names the package, the plugin and its file)";
    let mut chars = name.chars();
    let valid = name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!("{name:?} is not a valid plugin name: {RULE}");
    }
    if RESERVED.contains(&name) || RUST_KEYWORDS.contains(&name) {
        bail!(
            "{name:?} is reserved (by Rust, by the toolchains or by the vendored SDK); choose \
             another name, e.g. {name}-plugin"
        );
    }
    Ok(())
}

/// The files of a new plugin, by path relative to its directory. Shell scripts are marked
/// executable by their `.sh` name.
pub fn files(lang: Lang, name: &str) -> anyhow::Result<Vec<(String, String)>> {
    let substitute = |text: &str| {
        // A plugin's source is its language's passthrough example, renamed and at 0.1.0.
        let text = EXAMPLE_NAMES
            .iter()
            .fold(text.to_owned(), |t, example| t.replace(example, "{{name}}"))
            .replace("VERSION = \"1.0.0\"", "VERSION = \"0.1.0\"")
            .replace("VERSION = '1.0.0'", "VERSION = '0.1.0'")
            .replace("PLUGIN_VERSION \"1.0.0\"", "PLUGIN_VERSION \"0.1.0\"");
        text.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
    };
    let templates = match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
        Lang::C => C,
    };
    let mut files: Vec<(String, String)> = templates
        .iter()
        .map(|(path, text)| (substitute(path), substitute(text)))
        .collect();
    files.push(("changes.jsonl".into(), CHANGES.into()));
    match lang {
        Lang::Rust => {
            files.push(("tributary-guest/src/lib.rs".into(), SDK_LIB.into()));
            files.push(("tributary-guest/src/testing.rs".into(), SDK_TESTING.into()));
            files.push(("tributary-guest/wit/transform.wit".into(), WIT.into()));
            // The column functions, behind the SDK's `functions` feature.
            files.push((
                "tributary-guest/src/functions.rs".into(),
                SDK_FUNCTIONS.into(),
            ));
            files.push((
                "tributary-guest/wit/deps/functions/columns.wit".into(),
                FUNCTIONS_WIT.into(),
            ));
        }
        Lang::Python | Lang::C => files.push(("wit/transform.wit".into(), WIT.into())),
        Lang::Js => {
            files.push(("wit/transform.wit".into(), WIT.into()));
            files.push(("package.json".into(), js_manifest(name)?));
            files.push(("package-lock.json".into(), js_lock(name)?));
        }
    }
    Ok(files)
}

/// `package.json`: the plugin's own name, scripts for the scaffold's layout, and the tools,
/// engines and overrides of the JavaScript examples, so that their lock file fits.
fn js_manifest(name: &str) -> anyhow::Result<String> {
    let example: Json =
        serde_json::from_str(JS_EXAMPLE_MANIFEST).context("reading the examples' package.json")?;
    let build = format!(
        "mkdir -p dist && jco componentize src/{name}.js --wit wit/transform.wit \
         --world-name transform --disable http fetch-event clocks random --out dist/{name}.wasm"
    );
    let test = format!(
        "npm run build && tributary plugin check dist/{name}.wasm && tributary plugin test \
         dist/{name}.wasm --changes changes.jsonl"
    );
    // serde_json sorts the keys of its objects; write the manifest's in the usual order.
    let members: Vec<String> = [
        ("name", json!(name)),
        ("version", json!(PLUGIN_VERSION)),
        ("description", json!("A Tributary transform plugin")),
        ("private", json!(true)),
        ("type", json!("module")),
        ("engines", example["engines"].clone()),
        ("scripts", json!({ "build": build, "test": test })),
        ("devDependencies", example["devDependencies"].clone()),
        ("overrides", example["overrides"].clone()),
    ]
    .into_iter()
    .filter(|(_, value)| !value.is_null())
    .map(|(key, value)| {
        let text = serde_json::to_string_pretty(&value)?.replace('\n', "\n  ");
        Ok(format!("  {}: {text}", json!(key)))
    })
    .collect::<serde_json::Result<_>>()?;
    Ok(format!("{{\n{}\n}}\n", members.join(",\n")))
}

/// The examples' `package-lock.json`, with the plugin's name and version for the root
/// package: `npm ci` then installs exactly the tools the examples are built with.
fn js_lock(name: &str) -> anyhow::Result<String> {
    let example: Json =
        serde_json::from_str(JS_EXAMPLE_MANIFEST).context("reading the examples' package.json")?;
    let version = example["version"].as_str().unwrap_or_default();
    let mut lock = JS_EXAMPLE_LOCK.to_owned();
    // The root, at the top and as `packages[""]`; the examples' licence is theirs, not the
    // new plugin's.
    let mut replaced = 0;
    for (indent, licence) in [
        ("\n  ", ""),
        ("\n      ", "\n      \"license\": \"Apache-2.0\","),
    ] {
        let root =
            format!("{indent}\"name\": \"{JS_EXAMPLE_NAME}\",{indent}\"version\": \"{version}\",");
        let ours = format!(
            "{indent}\"name\": {},{indent}\"version\": \"{PLUGIN_VERSION}\",",
            json!(name)
        );
        for from in [format!("{root}{licence}"), root] {
            if lock.contains(&from) {
                lock = lock.replacen(&from, &ours, 1);
                replaced += 1;
                break;
            }
        }
    }
    if replaced != 2 || lock.contains(JS_EXAMPLE_NAME) {
        bail!("the JavaScript examples' package-lock.json is not laid out as expected");
    }
    Ok(lock)
}

/// Write the files of a new plugin into `dir`, which must not exist or be empty.
pub fn write(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir)
            .with_context(|| format!("{} exists and is not a directory", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} exists and is not empty; give a new directory with --dir, or empty it",
                dir.display()
            );
        }
    }
    for (path, text) in files {
        let file: PathBuf = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
        if path.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", file.display()))?;
        }
    }
    Ok(())
}

/// What to do next, for the person who asked.
pub fn next_steps(lang: Lang, name: &str, dir: &Path) -> String {
    let cd = format!("cd {}", dir.display());
    let (edit, steps) = match lang {
        Lang::Rust => (
            "src/lib.rs".to_owned(),
            vec![
                cd,
                "cargo test".into(),
                "cargo build --target wasm32-wasip2 --release".into(),
                format!(
                    "tributary plugin test target/wasm32-wasip2/release/{}.wasm --changes changes.jsonl",
                    name.replace('-', "_")
                ),
            ],
        ),
        Lang::Python => (
            "app.py".to_owned(),
            vec![
                cd,
                "python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1".into(),
                "./build.sh        # uses .venv's componentize-py (or the one COMPONENTIZE_PY names)".into(),
                "./test.sh         # builds, then tributary plugin check and plugin test".into(),
            ],
        ),
        Lang::Js => (
            format!("src/{name}.js"),
            vec![
                cd,
                "npm ci".into(),
                "npm run build".into(),
                "npm test          # builds, then tributary plugin check and plugin test".into(),
            ],
        ),
        Lang::C => (
            format!("{name}.c"),
            vec![
                cd,
                "make              # clang-19, wit-bindgen 0.46 and tributary (make CC=... WIT_BINDGEN=... TRIBUTARY=...)".into(),
                "make test         # builds, then tributary plugin check and plugin test".into(),
            ],
        ),
    };
    let mut out = format!(
        "wrote the plugin {name} in {} (edit {edit}; README.md says more)\n",
        dir.display()
    );
    for step in steps {
        out.push_str("  ");
        out.push_str(&step);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_saying_what_is_allowed() {
        for good in ["mask", "mask-pii", "mask_pii2", "a"] {
            check_name(good).unwrap();
        }
        for bad in [
            "",
            "Mask",
            "2mask",
            "-mask",
            "mask pii",
            "mask.pii",
            "maské",
            &"a".repeat(65),
        ] {
            let error = check_name(bad).unwrap_err().to_string();
            assert!(error.contains("lowercase ASCII letters"), "{error}");
        }
        for reserved in ["tributary-guest", "test", "fn", "std"] {
            let error = check_name(reserved).unwrap_err().to_string();
            assert!(error.contains("reserved"), "{error}");
        }
    }

    #[test]
    fn every_placeholder_is_filled_in() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js, Lang::C] {
            let files = files(lang, "my-plugin").unwrap();
            for (path, text) in &files {
                assert!(
                    !path.contains("{{") && !text.contains("{{name}}"),
                    "{lang:?} {path}"
                );
                assert!(!text.contains("{{crate}}") && !text.contains("{{version}}"));
            }
            assert!(files.iter().any(|(p, _)| p.ends_with("transform.wit")));
            assert!(files.iter().any(|(p, _)| p == "changes.jsonl"));
            let edited = files
                .iter()
                .filter(|(path, text)| path != "README.md" && text.contains("Edit here"))
                .count();
            assert_eq!(edited, 1, "{lang:?}: one place says where to edit");
        }
    }

    #[test]
    fn the_javascript_manifest_and_lock_name_the_plugin_and_pin_the_examples_tools() {
        let manifest: Json = serde_json::from_str(&js_manifest("my-plugin").unwrap()).unwrap();
        let example: Json = serde_json::from_str(JS_EXAMPLE_MANIFEST).unwrap();
        assert_eq!(manifest["name"], "my-plugin");
        assert_eq!(manifest["devDependencies"], example["devDependencies"]);
        assert!(
            manifest["scripts"]["build"]
                .as_str()
                .unwrap()
                .contains("dist/my-plugin.wasm")
        );
        let lock: Json = serde_json::from_str(&js_lock("my-plugin").unwrap()).unwrap();
        assert_eq!(lock["name"], "my-plugin");
        assert_eq!(lock["version"], PLUGIN_VERSION);
        assert_eq!(lock["packages"][""]["name"], "my-plugin");
        assert_eq!(lock["packages"][""]["version"], PLUGIN_VERSION);
        assert_eq!(
            lock["packages"][""]["devDependencies"],
            example["devDependencies"]
        );
    }

    #[test]
    fn a_non_empty_directory_is_refused() {
        let dir = std::env::temp_dir().join(format!("tributary-scaffold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep"), "").unwrap();
        let error = write(&dir, &[("a".into(), "b".into())])
            .unwrap_err()
            .to_string();
        assert!(error.contains("not empty"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
