//! The `languages` scenario: the same two plugins, `passthrough` and `mask`, written in Rust,
//! Python, JavaScript and C, against no transform, on the inserts table; for Python and
//! JavaScript also their columnar variants (`passthrough-columnar`, `mask-columnar`), which take
//! each table as an Arrow IPC stream through `tributary:transform/columnar@1.0.0`, and the
//! columnar mask on the host's column functions (`mask-functions`, importing
//! `tributary:functions/columns@1.0.0`), whose digests the host computes. Every mask's rows/s
//! is also printed over the Rust mask's, in the same run.
//!
//! The consumers run in two groups, each draining its own workload: no transform, Rust and C
//! on the full size, Python and JavaScript (interpreters compiled to Wasm) on a tenth of it,
//! so that every run stays short; rows/s compares across the two. For every consumer and run
//! the pipeline first starts twice on an idle slot, with an empty compile cache
//! (`TRIBUTARY_PLUGIN_CACHE`) and then with the cache that start filled, each time only up to
//! its first read: the start-up of a new plugin version and that of every later start. Then it
//! drains the workload with the filled cache. A plugin that is not built is skipped, saying
//! how to build it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Serialize;
use tributary::Lsn;

use crate::consume::{self, Measured};
use crate::report::{NONE_FILE, Spread, fixed2, rate};
use crate::workload::{self, Workload};
use crate::{Bench, Lake, PluginSpec};

/// The columns every masker hashes: the inserts table's two text columns.
const MASKED_COLUMNS: &str = "email,note";

/// Longest one plugin call may run: the interpreters take seconds per batch, more on a slow
/// machine, and a timeout would stop the run rather than measure it.
const CALL_TIMEOUT_MS: u64 = 600_000;

/// The plugins of every language.
const PLUGINS: [&str; 2] = ["passthrough", "mask"];

/// The plugins of the languages that also have columnar variants, and a mask on the host's
/// column functions.
const WITH_COLUMNAR: [&str; 5] = [
    "passthrough",
    "mask",
    "passthrough-columnar",
    "mask-columnar",
    "mask-functions",
];

/// A language the plugins are written in; Rust's are the bundled plugins in `plugins/`, the
/// others the examples in `examples/plugins/<dir>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    Rust,
    Python,
    JavaScript,
    C,
}

impl Language {
    const ALL: [Language; 4] = [
        Language::Rust,
        Language::Python,
        Language::JavaScript,
        Language::C,
    ];

    fn name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
            Language::JavaScript => "JavaScript",
            Language::C => "C",
        }
    }

    /// Its directory under `examples/plugins/` and the guest plugin directory.
    fn guest_dir(self) -> Option<&'static str> {
        match self {
            Language::Rust => None,
            Language::Python => Some("python"),
            Language::JavaScript => Some("js"),
            Language::C => Some("c"),
        }
    }

    /// Whether its plugins run an interpreter, and so get the smaller workload.
    fn interpreted(self) -> bool {
        matches!(self, Language::Python | Language::JavaScript)
    }

    /// Its plugins: the interpreted languages pay per value crossing the typed boundary, so
    /// their columnar variants are measured beside them.
    fn plugins(self) -> &'static [&'static str] {
        match self.interpreted() {
            true => &WITH_COLUMNAR,
            false => &PLUGINS,
        }
    }
}

/// One consumer of the scenario: the pipeline with no transform, or with one plugin.
#[derive(Debug, Clone, Serialize)]
pub struct LanguageConsumer {
    pub name: String,
    pub language: Option<&'static str>,
    pub plugin: Option<&'static str>,
    pub path: Option<PathBuf>,
    /// Size of the component file.
    pub component_bytes: Option<u64>,
    /// Whether it drains the smaller workload.
    pub interpreted: bool,
    /// Why it was not run: its plugin is not built (and how to build it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Per run: the measurement or why it failed.
    pub runs: Vec<Result<LanguageRun, String>>,
}

impl LanguageConsumer {
    /// The pipeline file's transform, or none.
    fn spec(&self) -> Option<PluginSpec> {
        let path = self.path.clone()?;
        Some(PluginSpec {
            path,
            settings: self
                .plugin
                .is_some_and(|p| p.starts_with("mask"))
                .then(|| format!("columns = {MASKED_COLUMNS:?}, salt = \"bench\"")),
            timeout_ms: Some(CALL_TIMEOUT_MS),
        })
    }
}

/// One run of one consumer.
#[derive(Debug, Clone, Serialize)]
pub struct LanguageRun {
    /// Draining the workload, started with the compile cache filled.
    #[serde(flatten)]
    pub measured: Measured,
    /// Start-up before the first read with an empty compile cache: the plugin is compiled.
    pub first_start_seconds: f64,
    /// The same start-up with the cache that start filled.
    pub cached_start_seconds: f64,
}

/// The scenario's runs.
#[derive(Debug, Clone, Serialize)]
pub struct LanguagesResult {
    /// The workload of no transform, Rust and C.
    pub compiled: Workload,
    /// The workload of Python and JavaScript.
    pub interpreted: Workload,
    /// WAL bytes of each run's workloads.
    pub compiled_wal_bytes: Vec<u64>,
    pub interpreted_wal_bytes: Vec<u64>,
    /// In the order printed: no transform, then passthrough and mask per language.
    pub consumers: Vec<LanguageConsumer>,
}

/// The scenario's consumers, each plugin located: no transform, then `passthrough` and `mask`
/// in every language. `rust` holds the bundled plugins; a guest plugin that is not built is
/// kept, marked skipped with the reason.
pub fn consumers(rust: &BTreeMap<&'static str, PathBuf>) -> Vec<LanguageConsumer> {
    let mut consumers = vec![LanguageConsumer {
        name: NONE_FILE.to_owned(),
        language: None,
        plugin: None,
        path: None,
        component_bytes: None,
        interpreted: false,
        skipped: None,
        runs: Vec::new(),
    }];
    for language in Language::ALL {
        for &plugin in language.plugins() {
            let located = match language.guest_dir() {
                None => Ok(rust[plugin].clone()),
                Some(dir) => locate_guest(dir, plugin),
            };
            let (path, skipped) = match located {
                Ok(path) => (Some(path), None),
                Err(why) => (None, Some(why)),
            };
            consumers.push(LanguageConsumer {
                name: format!("tributary {} {plugin} → file", language.name()),
                language: Some(language.name()),
                plugin: Some(plugin),
                component_bytes: path
                    .as_deref()
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map(|m| m.len()),
                path,
                interpreted: language.interpreted(),
                skipped,
                runs: Vec::new(),
            });
        }
    }
    consumers
}

/// The example plugin `name` of the language in `dir`, or why it cannot be used.
/// `tributary_tests::guest_plugin` panics with the message saying how to build it; that
/// message is kept here, and the panic not reported, so the consumer is skipped instead.
fn locate_guest(dir: &str, name: &str) -> Result<PathBuf, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let found = std::panic::catch_unwind(|| tributary_tests::guest_plugin(dir, name));
    std::panic::set_hook(hook);
    found.map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| format!("the {dir} example plugin {name:?} is not built"));
        format!(
            "{message} (only the example plugins: \
             `bash -c 'source scripts/lib.sh && build_guest_examples'`)"
        )
    })
}

/// The files of a compile cache directory, with their sizes and inodes: a start that compiles
/// (again) writes one, under a temporary name renamed into place, so a new inode. (Not their
/// modification times: a start that loads an entry touches it, for the cache's eviction.)
fn cache_files(dir: &Path) -> anyhow::Result<Vec<(PathBuf, u64, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_file() {
            files.push((entry.path(), meta.len(), meta.ino()));
        }
    }
    files.sort();
    Ok(files)
}

impl Bench {
    pub(crate) async fn languages(&self) -> anyhow::Result<LanguagesResult> {
        let (quick, scale) = (self.args.quick, self.args.scale);
        let mut result = LanguagesResult {
            compiled: Workload::languages(quick, scale, false),
            interpreted: Workload::languages(quick, scale, true),
            compiled_wal_bytes: Vec::new(),
            interpreted_wal_bytes: Vec::new(),
            consumers: self.languages.clone(),
        };
        eprintln!(
            "==> languages: {} for no transform, Rust and C; {} for Python and JavaScript",
            result.compiled.description, result.interpreted.description
        );
        for consumer in &result.consumers {
            if let Some(why) = &consumer.skipped {
                eprintln!("    skipping {}: {why}", consumer.name);
            }
        }
        for run in 0..self.runs() {
            for interpreted in [false, true] {
                let workload = if interpreted {
                    &result.interpreted
                } else {
                    &result.compiled
                };
                let group: Vec<usize> = (0..result.consumers.len())
                    .filter(|&i| {
                        let c = &result.consumers[i];
                        c.interpreted == interpreted && c.skipped.is_none()
                    })
                    .collect();
                if group.is_empty() {
                    continue;
                }
                workload::prepare(&self.client, workload).await?;
                let slots: Vec<String> = group
                    .iter()
                    .map(|i| format!("bench_languages_{run}_{i}"))
                    .collect();
                for slot in &slots {
                    self.create_slot(slot).await?;
                }
                let generated = workload::generate(&self.client, workload).await?;
                self.client.batch_execute("CHECKPOINT").await?;
                eprintln!(
                    "    run {}: {} written in {:.1} s ({:.0} MB of WAL)",
                    run + 1,
                    workload.description,
                    generated.seconds,
                    generated.wal_bytes() as f64 / 1e6
                );
                if interpreted {
                    result.interpreted_wal_bytes.push(generated.wal_bytes());
                } else {
                    result.compiled_wal_bytes.push(generated.wal_bytes());
                }
                for (&i, slot) in group.iter().zip(&slots) {
                    let consumer = &result.consumers[i];
                    let cache = self.dir.0.join(format!("plugin-cache-{run}-{i}"));
                    let measured = self
                        .measure_language(consumer, slot, workload, generated.marker, &cache)
                        .await;
                    let _ = std::fs::remove_dir_all(&cache);
                    match &measured {
                        Ok(m) => eprintln!(
                            "    run {}: {}: {:.2} s, {} rows/s; start-up {:.2} s first, {:.2} s cached",
                            run + 1,
                            consumer.name,
                            m.measured.consumer.seconds,
                            rate(workload.changes as f64 / m.measured.consumer.seconds),
                            m.first_start_seconds,
                            m.cached_start_seconds
                        ),
                        Err(e) => {
                            eprintln!("    run {}: {}: failed: {e:#}", run + 1, consumer.name)
                        }
                    }
                    self.drop_slot(slot).await?;
                    result.consumers[i]
                        .runs
                        .push(measured.map_err(|e| format!("{e:#}")));
                }
            }
        }
        Ok(result)
    }

    /// One run of `consumer`: its first and its cached start-up (compile cache `cache`, empty
    /// before), then draining its workload from `slot` up to `marker`.
    async fn measure_language(
        &self,
        consumer: &LanguageConsumer,
        slot: &str,
        workload: &Workload,
        marker: Lsn,
        cache: &Path,
    ) -> anyhow::Result<LanguageRun> {
        std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
        let spec = consumer.spec();
        let env = [("TRIBUTARY_PLUGIN_CACHE", cache)];
        let first = self
            .start_up(spec.as_ref(), &format!("{slot}_first"), &env)
            .await
            .context("the first start")?;
        let compiled = cache_files(cache)?;
        if spec.is_some() && compiled.is_empty() {
            bail!(
                "the first start left the compile cache (TRIBUTARY_PLUGIN_CACHE) empty, so the \
                 next would compile again"
            );
        }
        let cached = self
            .start_up(spec.as_ref(), &format!("{slot}_cached"), &env)
            .await
            .context("the cached start")?;
        if cache_files(cache)? != compiled {
            bail!(
                "the start with the compile cache filled wrote to it: it compiled the plugin \
                 again instead of loading it"
            );
        }
        let (config, cleanup) = self
            .pipeline_config(slot, spec.as_ref(), Lake::default(), "languages", None)
            .await?;
        let args = [
            "__pipeline".to_owned(),
            config.display().to_string(),
            marker.to_string(),
            workload.changes.to_string(),
        ];
        let measured = consume::measure_child(
            self.client.clone(),
            slot,
            &args,
            self.args.perf.as_deref(),
            &env,
        )
        .await;
        let _ = std::fs::remove_dir_all(&cleanup);
        let measured = measured?;
        // The marker transaction may land with the last of the workload.
        let landed = measured.consumer.changes;
        if landed != workload.changes && landed != workload.changes + 1 {
            bail!("landed {landed} changes, expected {}", workload.changes);
        }
        Ok(LanguageRun {
            measured,
            first_start_seconds: first,
            cached_start_seconds: cached,
        })
    }

    /// The pipeline's start-up before its first read, on a slot of its own created just now
    /// (so it has nothing to read): it stops as soon as it streams.
    async fn start_up(
        &self,
        spec: Option<&PluginSpec>,
        slot: &str,
        env: &[(&str, &Path)],
    ) -> anyhow::Result<f64> {
        self.create_slot(slot).await?;
        let (config, cleanup) = self
            .pipeline_config(slot, spec, Lake::default(), "languages", None)
            .await?;
        let args = ["__pipeline".to_owned(), config.display().to_string()];
        let measured = consume::measure_child(self.client.clone(), slot, &args, None, env).await;
        let _ = std::fs::remove_dir_all(&cleanup);
        self.drop_slot(slot).await?;
        Ok(measured?.consumer.startup_seconds)
    }

    pub(crate) async fn create_slot(&self, slot: &str) -> anyhow::Result<()> {
        self.client
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
            .with_context(|| format!("creating slot {slot}"))?;
        Ok(())
    }
}

impl LanguagesResult {
    /// Measurements that failed (skipped consumers are not measurements).
    pub fn failures(&self) -> usize {
        self.consumers
            .iter()
            .flat_map(|c| &c.runs)
            .filter(|r| r.is_err())
            .count()
    }

    fn rows(&self, consumer: &LanguageConsumer) -> u64 {
        if consumer.interpreted {
            self.interpreted.changes
        } else {
            self.compiled.changes
        }
    }

    pub fn print(&self) -> String {
        let mut out = String::new();
        let wal = |bytes: &[u64]| {
            Spread::of(&bytes.iter().map(|&b| b as f64 / 1e6).collect::<Vec<_>>())
                .map_or("not run".into(), |s| {
                    format!("WAL {} MB", s.show(|v| format!("{v:.0}")))
                })
        };
        let _ = writeln!(
            out,
            "\n== languages: {} ({}) for no transform, Rust and C; {} ({}) for Python and \
             JavaScript",
            self.compiled.description,
            wal(&self.compiled_wal_bytes),
            self.interpreted.description,
            wal(&self.interpreted_wal_bytes)
        );
        let _ = writeln!(
            out,
            "{:<50} {:>8} {:>18} {:>18} {:>18} {:>18} {:>14} {:>10} {:>18} {:>18}",
            "consumer",
            "rows",
            "rows/s",
            "ratio to none",
            "CPU s/M rows",
            "transform s/M",
            "peak RSS MiB",
            "component",
            "first start s",
            "cached start s"
        );
        let none = self.consumers.iter().find(|c| c.plugin.is_none());
        let rows_per_second =
            |c: &LanguageConsumer, m: &Measured| self.rows(c) as f64 / m.consumer.seconds;
        let mut skipped = Vec::new();
        for consumer in &self.consumers {
            let name = &consumer.name;
            if let Some(why) = &consumer.skipped {
                let _ = writeln!(out, "{name:<50} skipped: not built (below)");
                skipped.push((name, why));
                continue;
            }
            let ok: Vec<(usize, &LanguageRun)> = consumer
                .runs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.as_ref().ok().map(|m| (i, m)))
                .collect();
            let failures: Vec<&String> = consumer
                .runs
                .iter()
                .filter_map(|r| r.as_ref().err())
                .collect();
            if ok.is_empty() {
                let _ = writeln!(
                    out,
                    "{name:<50} failed: {}",
                    failures.first().map_or("", |s| s.as_str())
                );
                continue;
            }
            let rows = self.rows(consumer) as f64;
            let col = |f: &dyn Fn(&LanguageRun) -> f64, format: fn(f64) -> String| {
                let values: Vec<f64> = ok.iter().map(|(_, r)| f(r)).collect();
                Spread::of(&values).map_or("-".into(), |s| s.show(format))
            };
            // Within each run: both drained a workload written in that run.
            let ratios: Vec<f64> = ok
                .iter()
                .filter_map(|(i, r)| {
                    let base = none?.runs.get(*i)?.as_ref().ok()?;
                    Some(
                        rows_per_second(consumer, &r.measured)
                            / rows_per_second(none?, &base.measured),
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "{:<50} {:>8} {:>18} {:>18} {:>18} {:>18} {:>14} {:>10} {:>18} {:>18}{}",
                name,
                self.rows(consumer),
                col(&|r| rows_per_second(consumer, &r.measured), rate),
                Spread::of(&ratios).map_or("-".into(), |s| s.show(fixed2)),
                col(&|r| r.measured.consumer.cpu_seconds / rows * 1e6, fixed2),
                col(
                    &|r| r.measured.consumer.stages.transform / rows * 1e6,
                    fixed2
                ),
                col(
                    &|r| r.measured.consumer.max_rss_kib as f64 / 1024.0,
                    |v| format!("{v:.0}")
                ),
                consumer.component_bytes.map_or("-".into(), size),
                col(&|r| r.first_start_seconds, fixed2),
                col(&|r| r.cached_start_seconds, fixed2),
                if failures.is_empty() {
                    String::new()
                } else {
                    format!("  ({} run(s) failed: {})", failures.len(), failures[0])
                }
            );
        }
        let _ = writeln!(
            out,
            "rows/s and CPU from the first read to the last commit landed, started with the \
             compile cache filled; ratio to none: rows/s over that of no transform in the same \
             run; transform: the pipeline's transform stage; first start: start-up before the \
             first read with an empty TRIBUTARY_PLUGIN_CACHE (the plugin is compiled), cached \
             start: the same with the cache filled, both on an idle slot"
        );
        self.print_mask_ratios(&mut out);
        for (name, why) in skipped {
            let _ = writeln!(out, "skipped {name}: {why}");
        }
        out
    }

    /// Each mask's rows/s over the Rust mask's, run by run (both drained workloads written in
    /// the same run, of their own sizes).
    fn print_mask_ratios(&self, out: &mut String) {
        let Some(rust) = self
            .consumers
            .iter()
            .find(|c| c.language == Some(Language::Rust.name()) && c.plugin == Some("mask"))
        else {
            return;
        };
        let rows_per_second = |c: &LanguageConsumer, run: &Result<LanguageRun, String>| {
            let run = run.as_ref().ok()?;
            Some(self.rows(c) as f64 / run.measured.consumer.seconds)
        };
        let _ = writeln!(out, "mask rows/s over the Rust mask's, in the same run:");
        for consumer in &self.consumers {
            if consumer.language == rust.language
                || !consumer.plugin.is_some_and(|p| p.starts_with("mask"))
            {
                continue;
            }
            let ratios: Vec<f64> = consumer
                .runs
                .iter()
                .zip(&rust.runs)
                .filter_map(|(c, r)| {
                    Some(rows_per_second(consumer, c)? / rows_per_second(rust, r)?)
                })
                .collect();
            let shown = Spread::of(&ratios).map_or("-".into(), |s| s.show(fixed2));
            let _ = writeln!(out, "  {:<48} {shown:>18}", consumer.name);
        }
    }
}

/// A file size: KiB under a MiB, else MiB.
fn size(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_kib_or_mib() {
        assert_eq!(size(29_041), "28 KiB");
        assert_eq!(size(18_389_689), "17.5 MiB");
    }

    #[test]
    fn every_plugin_in_every_language_follows_no_transform() {
        let rust: BTreeMap<&'static str, PathBuf> = PLUGINS
            .iter()
            .map(|p| (*p, PathBuf::from(format!("{p}.wasm"))))
            .collect();
        let consumers = consumers(&rust);
        let names: Vec<&str> = consumers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), 1 + 2 * PLUGINS.len() + 2 * WITH_COLUMNAR.len());
        assert_eq!(names[0], NONE_FILE);
        assert_eq!(names[1], "tributary Rust passthrough → file");
        assert_eq!(names[5], "tributary Python passthrough-columnar → file");
        assert_eq!(names[7], "tributary Python mask-functions → file");
        assert_eq!(names[11], "tributary JavaScript mask-columnar → file");
        assert_eq!(names[14], "tributary C mask → file");
        // Every consumer is located or says why not.
        assert!(
            consumers
                .iter()
                .skip(1)
                .all(|c| c.path.is_some() != c.skipped.is_some())
        );
        for python_mask in [&consumers[4], &consumers[6], &consumers[7]] {
            assert!(python_mask.interpreted);
            if python_mask.skipped.is_none() {
                let spec = python_mask.spec().unwrap();
                assert_eq!(
                    spec.settings.as_deref(),
                    Some("columns = \"email,note\", salt = \"bench\"")
                );
            }
        }
    }
}
