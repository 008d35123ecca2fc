//! The host's column functions, `tributary:functions/columns@1.0.0`
//! (`guest-sdk/wit/deps/functions/columns.wit`): digests, redaction by pattern, case,
//! truncation and JSON extraction over whole Arrow columns, one call per table.
//!
//! A plugin hands over the Arrow IPC stream it was given and a list of steps; each step reads a
//! column of the stream (or an earlier step's output) and makes one column, and the answer is
//! one stream of those columns, which the plugin can return as its replacement columns as it
//! is. Everything here is pure: no IO, clock or state but a cache of compiled patterns, which
//! changes no answer.
//!
//! Bounds: a pattern compiles to at most [`PATTERN_BYTES`]; the columns made in one call
//! together hold at most the plugin's memory limit (the plugin must hold them anyway), and
//! the call stops as soon as they would hold more.

mod json_path;
mod ops;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};

use super::columnar::{ipc_bytes, read_ipc};
use super::host::wit::functions as fw;

/// The version of `tributary:functions` this host serves.
pub(super) const FUNCTIONS_PACKAGE: &str = "tributary:functions";
pub(super) const FUNCTIONS_VERSION: (u64, u64, u64) = (1, 0, 0);

/// The largest a compiled pattern may grow (the `regex` crate's size limit).
pub(super) const PATTERN_BYTES: usize = 1 << 20;

/// How many compiled patterns an instance keeps between calls.
const CACHED_PATTERNS: usize = 64;

/// What one instance keeps between calls: compiled patterns, by their text.
#[derive(Default)]
pub(super) struct Functions {
    patterns: HashMap<String, regex::Regex>,
}

/// How many bytes the columns made so far may still take.
pub(super) struct Budget {
    left: usize,
    limit: usize,
}

impl Budget {
    pub(super) fn new(limit: usize) -> Budget {
        Budget { left: limit, limit }
    }

    /// Count `bytes` more, or say that the result outgrew the limit.
    pub(super) fn take(&mut self, bytes: usize) -> Result<(), String> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(self.refusal()),
        }
    }

    /// How many bytes are left.
    pub(super) fn left(&self) -> usize {
        self.left
    }

    /// What to say when the result outgrows the limit.
    pub(super) fn refusal(&self) -> String {
        format!(
            "its result would take more than the plugin's memory limit of {} bytes; apply the \
             step to fewer rows at a time, or raise the plugin's memory_limit_mib",
            self.limit
        )
    }
}

impl Functions {
    /// Run `steps` over the stream `rows`; the columns they make may take at most `limit`
    /// bytes in all.
    pub(super) fn apply(
        &mut self,
        rows: &[u8],
        steps: &[fw::Step],
        limit: usize,
    ) -> Result<fw::Applied, String> {
        let input = read_ipc(rows).map_err(|e| format!("the rows given to apply are {e}"))?;
        let mut budget = Budget::new(limit);
        let mut made: Vec<(String, ArrayRef)> = Vec::with_capacity(steps.len());
        let mut computed = Vec::with_capacity(steps.len());
        for (i, step) in steps.iter().enumerate() {
            let named = |message: String| {
                format!(
                    "step {} ({} of column {:?} into {:?}): {message}",
                    i + 1,
                    operation_name(&step.operation),
                    step.input,
                    step.output
                )
            };
            if let Some(earlier) = made.iter().position(|(name, _)| *name == step.output) {
                return Err(named(format!(
                    "step {} already makes a column of that name; give each step its own output",
                    earlier + 1
                )));
            }
            let column = find_input(&input, &made, &step.input).map_err(named)?;
            let array = self
                .run(&step.operation, &column, &mut budget)
                .map_err(named)?;
            computed.push((array.len() - array.null_count()) as u64);
            made.push((step.output.clone(), array));
        }
        let fields: Vec<Field> = made
            .iter()
            .map(|(name, array)| Field::new(name, array.data_type().clone(), true))
            .collect();
        let arrays = made.into_iter().map(|(_, array)| array).collect();
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(input.num_rows()));
        let record =
            RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), arrays, &options)
                .and_then(|record| ipc_bytes(&record))
                .map_err(|e| format!("cannot write the columns the steps made: {e}"))?;
        Ok(fw::Applied {
            columns: record,
            computed,
        })
    }

    /// One step's column.
    fn run(
        &mut self,
        operation: &fw::Operation,
        column: &ArrayRef,
        budget: &mut Budget,
    ) -> Result<ArrayRef, String> {
        use fw::Operation as Op;
        match operation {
            Op::Sha256(digest) => ops::sha256(column, digest, budget),
            Op::HmacSha256(keyed) => ops::hmac_sha256(column, keyed, budget),
            Op::Replace(replace) => {
                let pattern = self.pattern(&replace.pattern)?;
                ops::replace(column, &pattern, &replace.replacement, budget)
            }
            Op::Lowercase => ops::map_text(column, "lowercase", budget, |s, out| {
                out.push_str(&s.to_lowercase());
                Ok(true)
            }),
            Op::Uppercase => ops::map_text(column, "uppercase", budget, |s, out| {
                out.push_str(&s.to_uppercase());
                Ok(true)
            }),
            Op::Truncate(chars) => ops::truncate(column, *chars, budget),
            Op::JsonPath(path) => {
                let path = json_path::Path::parse(path)?;
                ops::map_text(column, "json-path", budget, |s, out| path.extract(s, out))
            }
        }
    }

    /// The compiled pattern, from the cache or compiled now.
    fn pattern(&mut self, pattern: &str) -> Result<regex::Regex, String> {
        if let Some(regex) = self.patterns.get(pattern) {
            return Ok(regex.clone());
        }
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(PATTERN_BYTES)
            .dfa_size_limit(PATTERN_BYTES)
            .build()
            .map_err(|e| {
                let why = e
                    .to_string()
                    .lines()
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ");
                format!(
                    "the pattern {pattern:?} is not a usable regular expression ({why}); write \
                     it in the syntax of Rust's regex crate, which has no look-around or \
                     back-references, and keep it within {} KiB compiled",
                    PATTERN_BYTES >> 10
                )
            })?;
        if self.patterns.len() >= CACHED_PATTERNS {
            self.patterns.clear();
        }
        self.patterns.insert(pattern.to_owned(), regex.clone());
        Ok(regex)
    }
}

/// The column a step reads: an earlier step's output first, else the stream's.
fn find_input(
    input: &RecordBatch,
    made: &[(String, ArrayRef)],
    name: &str,
) -> Result<ArrayRef, String> {
    if let Some((_, array)) = made.iter().rev().find(|(made, _)| made == name) {
        return Ok(array.clone());
    }
    if let Some(array) = input.column_by_name(name) {
        return Ok(array.clone());
    }
    let names: Vec<&str> = input
        .schema_ref()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .chain(made.iter().map(|(name, _)| name.as_str()))
        .collect();
    Err(format!(
        "no column of that name in the stream or made by an earlier step (there are: {}); \
         name a column the plugin reads (its interest) or an earlier step's output",
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    ))
}

/// The operation's name in the WIT.
fn operation_name(operation: &fw::Operation) -> &'static str {
    use fw::Operation as Op;
    match operation {
        Op::Sha256(_) => "sha256",
        Op::HmacSha256(_) => "hmac-sha256",
        Op::Replace(_) => "replace",
        Op::Lowercase => "lowercase",
        Op::Uppercase => "uppercase",
        Op::Truncate(_) => "truncate",
        Op::JsonPath(_) => "json-path",
    }
}
