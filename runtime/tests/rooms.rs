//! The map in `docs/design.md` holds: each room imports only the rooms its row allows, and
//! the files of the pure rooms import no tokio, no socket and no file system.
//!
//! No library function is longer than [`MAX_FUNCTION_LINES`]: a longer one is split into
//! named steps.
//!
//! Read from the sources, so a change that breaks the layering (or grows a function past the
//! limit) fails here with the file and the import (or the function) named, rather than going
//! unnoticed until the next review.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Each room and the rooms it may import (`crate::<room>`); the shared modules at the top
/// ([`SHARED`]) may be imported by all, and have rows of their own.
fn allowed() -> BTreeMap<&'static str, &'static [&'static str]> {
    BTreeMap::from([
        ("basics", &[][..]),
        ("failpoint", &[][..]),
        // The pipeline file reads the option types of the rooms it configures.
        (
            "config",
            &[
                "transform",
                "lake::encode",
                "lake::tables",
                "lake::TableFormat",
            ][..],
        ),
        ("wire", &[][..]),
        ("stream", &["wire"][..]),
        ("source", &["wire", "stream"][..]),
        ("transform", &["wire", "stream", "lake::encode"][..]),
        ("lake", &["wire", "stream"][..]),
        (
            "pipeline",
            &["wire", "stream", "source", "transform", "lake"][..],
        ),
        (
            "commands",
            &[
                "wire",
                "stream",
                "source",
                "transform",
                "lake",
                // The preflight that `check` prints is the one a start makes.
                "pipeline::preflight",
            ][..],
        ),
    ])
}

/// Files and folders that must stay free of IO, relative to `runtime/src`.
const PURE: &[&str] = &[
    "wire/",
    "stream/",
    "lake/encode/",
    "lake/flush.rs",
    "lake/commit/mod.rs",
    "lake/delta/actions.rs",
    "lake/delta/checkpoint.rs",
    "lake/delta/compact.rs",
    "lake/delta/vacuum.rs",
    "lake/delta/mirror.rs",
    "lake/delta/schema.rs",
    "lake/delta/state.rs",
    "lake/tables/audit.rs",
    "lake/tables/keyed.rs",
    "pipeline/position.rs",
    "source/toast.rs",
    "source/trigger/journal.rs",
    "source/trigger/sql.rs",
    "source/trigger/ticks.rs",
    "transform/functions/",
];

/// What an IO-free file never names.
const IO: &[&str] = &[
    "tokio",
    "std::fs",
    "std::net",
    "tempfile",
    "File::",
    "TcpStream",
];

/// Modules at the top of the crate that every room may import; each imports only what its
/// row allows, like a room.
const SHARED: &[&str] = &["basics", "failpoint", "config"];

const ROOMS: &[&str] = &[
    "basics",
    "failpoint",
    "config",
    "wire",
    "stream",
    "source",
    "transform",
    "lake",
    "pipeline",
    "commands",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read the source tree") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's code outside its tests, comments kept; `None` for a file of tests.
fn library_code<'a>(relative: &str, text: &'a str) -> Option<&'a str> {
    let name = Path::new(relative);
    let test_file = name
        .file_stem()
        .is_some_and(|s| s == "tests" || s.to_string_lossy().ends_with("_tests"))
        || name.components().any(|c| c.as_os_str() == "tests")
        || name.file_name().is_some_and(|f| f == "fixture.rs");
    if test_file {
        return None;
    }
    Some(match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    })
}

/// The file's code outside its tests and comments: test modules may use what they like.
fn production_code(relative: &str, text: &str) -> Option<String> {
    let code = library_code(relative, text)?;
    let lines: Vec<&str> = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect();
    Some(lines.join("\n"))
}

/// Every source file under `src`, by its path relative to it, with its text.
fn sources() -> Vec<(String, String)> {
    let root = src();
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(&root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let text = fs::read_to_string(&path).expect("read a source file");
            (relative, text)
        })
        .collect()
}

/// Every library file's code outside its tests and comments.
fn files() -> Vec<(String, String)> {
    sources()
        .into_iter()
        .filter_map(|(relative, text)| {
            production_code(&relative, &text).map(|code| (relative, code))
        })
        .collect()
}

/// The room a file is in: its folder under `src`, or, at the top, the file itself.
fn room_of(relative: &str) -> Option<&'static str> {
    let first = relative.split('/').next()?;
    let first = first.strip_suffix(".rs").unwrap_or(first);
    ROOMS.iter().copied().find(|r| *r == first)
}

#[test]
fn every_file_at_the_top_is_a_room_or_the_crate_root() {
    let mut outside = Vec::new();
    for entry in fs::read_dir(src()).expect("read the source tree") {
        let name = entry.expect("a directory entry").file_name();
        let name = name.to_string_lossy();
        if name != "lib.rs" && room_of(&name).is_none() {
            outside.push(name.into_owned());
        }
    }
    assert!(
        outside.is_empty(),
        "entries at the top of src that no room row covers: {outside:?}"
    );
    let entries = fs::read_dir(src()).expect("read the source tree").count();
    assert!(entries <= 12, "{entries} entries at the top of src");
}

#[test]
fn every_room_imports_only_what_its_row_allows() {
    let allowed = allowed();
    let mut wrong = Vec::new();
    for (file, code) in files() {
        let Some(room) = room_of(&file) else { continue };
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let Some(target) = ROOMS
                .iter()
                .find(|r| path == **r || path.starts_with(&format!("{r}::")))
            else {
                continue;
            };
            if *target == room || SHARED.contains(target) {
                continue;
            }
            let ok = allowed[room]
                .iter()
                .any(|a| path == *a || path.starts_with(&format!("{a}::")));
            if !ok {
                wrong.push(format!("{file}: crate::{path}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports the room map in docs/design.md does not allow:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn pure_files_do_no_io() {
    let mut wrong = Vec::new();
    for (file, code) in files() {
        if !PURE.iter().any(|p| file.starts_with(p)) {
            continue;
        }
        for io in IO {
            if code.contains(io) {
                wrong.push(format!("{file}: {io}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "files of pure rooms that name IO:\n{}",
        wrong.join("\n")
    );
}

/// The most lines a library function may take, from its `fn` line to its closing brace.
const MAX_FUNCTION_LINES: usize = 150;

/// The name of the function a line declares (`pub(crate) async fn name(...`), if it does.
fn declared_fn(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    let mut word = words.next()?;
    while word.starts_with("pub") || ["async", "const", "unsafe", "extern", "\"C\""].contains(&word)
    {
        word = words.next()?;
    }
    if word != "fn" {
        return None;
    }
    let name = words.next()?;
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    Some(&name[..end])
}

/// The functions of `code` with a body, each with its length in lines: from the `fn` line to
/// the closing brace at the same indent (a body on one line, or none, is not counted).
fn function_lengths(code: &str) -> Vec<(&str, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = declared_fn(line) else {
            continue;
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        let closing = format!("{indent}}}");
        let mut opened = false;
        for (offset, next) in lines[at..].iter().enumerate() {
            let next = next.trim_end();
            if !opened && next.ends_with(';') {
                // A declaration without a body (a trait's).
                break;
            }
            if offset == 0 && next.contains('{') && next.ends_with('}') {
                // A body on the same line.
                break;
            }
            opened |= next.ends_with('{');
            if opened && offset > 0 && next == closing {
                found.push((name, offset + 1));
                break;
            }
        }
    }
    found
}

#[test]
fn no_library_function_is_longer_than_the_limit() {
    let mut long = Vec::new();
    for (file, text) in sources() {
        let Some(code) = library_code(&file, &text) else {
            continue;
        };
        for (name, lines) in function_lengths(code) {
            if lines > MAX_FUNCTION_LINES {
                long.push(format!("{file}: fn {name} is {lines} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "library functions longer than {MAX_FUNCTION_LINES} lines; split each into named steps:\n{}",
        long.join("\n")
    );
}

#[test]
fn function_lengths_count_from_the_fn_line_to_its_closing_brace() {
    let code = "pub(crate) async fn outer(\n    a: u8,\n) -> u8 {\n    fn inner() {}\n    a\n}\n\
                trait T {\n    fn declared(&self)\n        -> u8;\n    fn given(&self) -> u8 {\n        1\n    }\n}\n";
    assert_eq!(function_lengths(code), [("outer", 6), ("given", 3)]);
}
