//! Reading and checking the deployment files (`deploy/`, `docker-compose.yml`,
//! `examples/monitoring/`) with the tools their own ecosystems use: YAML through PyYAML,
//! the Kubernetes schema through `kubernetes-validate`, Prometheus rules through `promtool`.
//! `scripts/test.sh` installs all three (`scripts/packaging.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_owned()
}

fn tools_dir() -> PathBuf {
    std::env::var_os("TRIBUTARY_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/tributary/tools")
        })
}

/// The tools' Python (`TRIBUTARY_PYTHON`, else the tools' environment), which has PyYAML.
fn python() -> PathBuf {
    std::env::var_os("TRIBUTARY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| tools_dir().join("python/bin/python"))
}

/// `kubernetes-validate`: `TRIBUTARY_KUBERNETES_VALIDATE`, else the tools' environment; panics
/// with the way to install it.
pub fn kubernetes_validate() -> PathBuf {
    found(
        std::env::var_os("TRIBUTARY_KUBERNETES_VALIDATE")
            .map(PathBuf::from)
            .unwrap_or_else(|| tools_dir().join("python/bin/kubernetes-validate")),
        "kubernetes-validate",
    )
}

/// `promtool`: `TRIBUTARY_PROMTOOL`, else the tools' directory; panics with the way to install it.
pub fn promtool() -> PathBuf {
    found(
        std::env::var_os("TRIBUTARY_PROMTOOL")
            .map(PathBuf::from)
            .unwrap_or_else(|| tools_dir().join("bin/promtool")),
        "promtool",
    )
}

fn found(path: PathBuf, name: &str) -> PathBuf {
    assert!(
        path.is_file(),
        "{name} not found at {}: run scripts/test.sh, which installs it (ensure_packaging_tools in scripts/packaging.sh)",
        path.display()
    );
    path
}

/// Every document of a YAML file, as JSON values (PyYAML's safe loader: what a YAML tool
/// accepts, not what a lenient reader might).
pub fn yaml_documents(file: &Path) -> Vec<Value> {
    let output = Command::new(python())
        .args([
            "-c",
            "import json, sys, yaml\n\
             with open(sys.argv[1]) as f:\n    \
             json.dump(list(yaml.safe_load_all(f)), sys.stdout)",
        ])
        .arg(file)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "could not run {} (run scripts/test.sh, which installs it): {error}",
                python().display()
            )
        });
    assert!(
        output.status.success(),
        "{} is not valid YAML: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("PyYAML's documents as JSON")
}

/// The one document of a YAML file.
pub fn yaml(file: &Path) -> Value {
    let mut documents = yaml_documents(file);
    assert_eq!(documents.len(), 1, "{} holds one document", file.display());
    documents.remove(0)
}

/// Every `tributary_...` metric name a PromQL text uses.
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("tributary_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        // A name starts after something that cannot be part of one.
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.push(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The series names a Prometheus text exposition declares: the names of its `# TYPE` lines,
/// and for a histogram its `_bucket`, `_sum` and `_count` series, which queries name.
pub fn declared_families(exposition: &str) -> Vec<String> {
    let mut names = Vec::new();
    for rest in exposition.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let mut words = rest.split_whitespace();
        let (Some(name), kind) = (words.next(), words.next()) else {
            continue;
        };
        names.push(name.to_owned());
        if kind == Some("histogram") {
            names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_are_found_inside_functions_selectors_and_arithmetic() {
        assert_eq!(
            metric_names(
                "increase(tributary_dead_letters_total{plugin=\"x\"}[15m]) > 0 and on() tributary_ready==1 or my_tributary_x"
            ),
            ["tributary_dead_letters_total", "tributary_ready"]
        );
    }

    #[test]
    fn declared_families_are_the_type_lines_and_a_histograms_series() {
        let text = "# HELP tributary_ready r\n# TYPE tributary_ready gauge\ntributary_ready 1\n# TYPE tributary_x_total counter\n# TYPE tributary_y_seconds histogram\n";
        assert_eq!(
            declared_families(text),
            [
                "tributary_ready",
                "tributary_x_total",
                "tributary_y_seconds",
                "tributary_y_seconds_bucket",
                "tributary_y_seconds_sum",
                "tributary_y_seconds_count"
            ]
        );
    }
}
