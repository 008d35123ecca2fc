//! Where the log goes and how it reads: stderr, one line per event, as text for a person
//! (coloured only on a terminal) or as one JSON object per line for a log pipeline
//! (`--log-format json`, or `TRIBUTARY_LOG_FORMAT=json`). `RUST_LOG` filters both.
//!
//! A JSON line carries the event's time, level, target, message and fields, and the slot of
//! the pipeline the command works on, so that one log store can hold many pipelines. The slot
//! is named once its pipeline file is read, before anything is logged about the pipeline.
//! tracing-subscriber's own JSON formatter adds fields only through spans, which tasks spawned
//! without them would not carry; this formatter adds the slot to every event instead.

use std::fmt;
use std::io::IsTerminal;
use std::sync::OnceLock;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// The slot every JSON line names, once a pipeline file named it.
static SLOT: OnceLock<String> = OnceLock::new();

/// Name the pipeline's slot in every line from now on.
pub fn name_slot(slot: &str) {
    let _ = SLOT.set(slot.to_owned());
}

/// Send the log to stderr in `format`, filtered by `RUST_LOG` or else `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr);
    match format {
        // Colours only for a person at a terminal, never in a log file or a journal.
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .event_format(JsonLines { slot: &SLOT })
            .init(),
    }
}

/// Formats an event as one JSON object on one line.
struct JsonLines {
    slot: &'static OnceLock<String>,
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut time = String::new();
        SystemTime.format_time(&mut Writer::new(&mut time))?;
        let line = json_line(&time, event, self.slot.get().map(String::as_str));
        writeln!(writer, "{line}")
    }
}

/// The keys every line starts with, in this order; an event's own field of the same name is
/// left out rather than hide them.
const LINE_KEYS: [&str; 5] = ["timestamp", "level", "slot", "target", "message"];

/// The JSON object of `event` logged at `time`, naming `slot` when there is one: the line's
/// own keys first, then the event's fields in the order it gave them.
fn json_line(time: &str, event: &Event<'_>, slot: Option<&str>) -> String {
    let meta = event.metadata();
    let mut fields = Fields(Vec::new());
    event.record(&mut fields);
    let message = fields
        .0
        .iter()
        .position(|(name, _)| name == "message")
        .map(|i| fields.0.remove(i).1);
    let mut object = JsonObject::default();
    object.put("timestamp", &time.into());
    object.put("level", &meta.level().as_str().into());
    if let Some(slot) = slot {
        object.put("slot", &slot.into());
    }
    object.put("target", &meta.target().into());
    if let Some(message) = &message {
        object.put("message", message);
    }
    for (name, value) in &fields.0 {
        if !LINE_KEYS.contains(&name.as_str()) {
            object.put(name, value);
        }
    }
    object.finish()
}

/// A JSON object written key by key, in the order given. serde_json escapes control
/// characters, so a multi-line message stays on one line.
#[derive(Default)]
struct JsonObject(String);

impl JsonObject {
    fn put(&mut self, key: &str, value: &Value) {
        self.0.push(if self.0.is_empty() { '{' } else { ',' });
        self.0.push_str(&Value::from(key).to_string());
        self.0.push(':');
        self.0.push_str(&value.to_string());
    }

    fn finish(mut self) -> String {
        if self.0.is_empty() {
            self.0.push('{');
        }
        self.0.push('}');
        self.0
    }
}

/// An event's fields as JSON values: numbers and booleans as themselves, the rest as text.
struct Fields(Vec<(String, Value)>);

impl Fields {
    fn add(&mut self, field: &Field, value: Value) {
        self.0.push((field.name().to_owned(), value));
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let value = serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number);
        self.add(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.add(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.add(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.add(field, value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.add(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.add(field, tributary::error_chain(value).into());
    }

    /// `?value` fields: a string's Debug form is quoted, and is logged as the string itself.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        let value = match text.starts_with('"') {
            true => serde_json::from_str::<String>(&text).unwrap_or(text),
            false => text,
        };
        self.add(field, value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// What a subscriber with this formatter writes for the events `log` emits, line by line.
    fn lines_of(slot: &'static OnceLock<String>, log: impl FnOnce()) -> Vec<Value> {
        lines_text(slot, log)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The text a subscriber with this formatter writes for the events `log` emits.
    fn lines_text(slot: &'static OnceLock<String>, log: impl FnOnce()) -> String {
        let written = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = Arc::clone(&written);
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .event_format(JsonLines { slot })
            .with_writer(move || Captured(Arc::clone(&sink)));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, log);
        String::from_utf8(written.lock().unwrap().clone()).unwrap()
    }

    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_event_is_one_json_object_with_its_fields_typed_and_the_slot() {
        static SLOT: OnceLock<String> = OnceLock::new();
        SLOT.set("orders_slot".into()).unwrap();
        let lines = lines_of(&SLOT, || {
            tracing::info!(
                sequence = 3u64,
                bytes = 4096u64,
                lag_seconds = 0.25,
                confirmed = %"0/16B3748",
                "committed"
            );
            tracing::warn!(level = "mine", "two\nlines \"quoted\"");
        });
        assert_eq!(lines.len(), 2, "{lines:?}");
        let committed = &lines[0];
        assert_eq!(committed["message"], "committed");
        assert_eq!(committed["level"], "INFO");
        assert_eq!(committed["slot"], "orders_slot");
        assert_eq!(committed["sequence"], 3);
        assert_eq!(committed["bytes"], 4096);
        assert_eq!(committed["lag_seconds"], 0.25);
        assert_eq!(committed["confirmed"], "0/16B3748");
        assert!(
            committed["target"]
                .as_str()
                .unwrap()
                .starts_with("tributary")
        );
        assert!(committed["timestamp"].as_str().unwrap().contains('T'));
        let warned = &lines[1];
        assert_eq!(warned["message"], "two\nlines \"quoted\"");
        // The line's own keys win over an event's field of the same name.
        assert_eq!(warned["level"], "WARN");
    }

    #[test]
    fn the_lines_own_keys_come_first_and_debug_strings_are_unquoted() {
        static SLOT: OnceLock<String> = OnceLock::new();
        SLOT.set("s".into()).unwrap();
        let written = lines_text(&SLOT, || {
            let tables = "public.orders".to_owned();
            tracing::info!(zeta = 1u64, tables = ?tables, list = ?["a", "b"], "streaming");
        });
        let line = written.lines().next().unwrap();
        let at = |key: &str| {
            line.find(&format!("\"{key}\":"))
                .unwrap_or_else(|| panic!("no {key} in {line}"))
        };
        let keys = [
            "timestamp",
            "level",
            "slot",
            "target",
            "message",
            "zeta",
            "tables",
        ];
        assert!(keys.map(at).is_sorted(), "{line}");
        let value: Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["tables"], "public.orders");
        assert_eq!(value["list"], "[\"a\", \"b\"]");
    }

    #[test]
    fn before_a_slot_is_named_lines_carry_none() {
        static UNNAMED: OnceLock<String> = OnceLock::new();
        let lines = lines_of(&UNNAMED, || tracing::info!("starting"));
        assert_eq!(lines.len(), 1);
        assert!(lines[0].get("slot").is_none(), "{:?}", lines[0]);
    }
}
