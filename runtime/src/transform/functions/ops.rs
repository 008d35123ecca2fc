//! The kernels: each makes one column from one, a value at a time, nulls staying null.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, StringArray};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::Budget;
use crate::transform::host::wit::functions as fw;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The values of a column a digest takes: its text's UTF-8, or its bytes.
enum Bytes<'a> {
    Text(&'a StringArray),
    Binary(&'a arrow_array::BinaryArray),
}

impl Bytes<'_> {
    fn len(&self) -> usize {
        match self {
            Bytes::Text(a) => a.len(),
            Bytes::Binary(a) => a.len(),
        }
    }

    fn get(&self, i: usize) -> Option<&[u8]> {
        match self {
            Bytes::Text(a) => a.is_valid(i).then(|| a.value(i).as_bytes()),
            Bytes::Binary(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }
}

fn bytes_of(column: &ArrayRef) -> Result<Bytes<'_>, String> {
    if let Some(text) = column.as_string_opt::<i32>() {
        return Ok(Bytes::Text(text));
    }
    if let Some(binary) = column.as_binary_opt::<i32>() {
        return Ok(Bytes::Binary(binary));
    }
    Err(format!(
        "the column is {}, but a digest takes text (Utf8) or bytes (Binary); apply it to a \
         text or bytea column, or leave this column out of the steps",
        column.data_type()
    ))
}

fn text_of<'a>(column: &'a ArrayRef, operation: &str) -> Result<&'a StringArray, String> {
    column.as_string_opt::<i32>().ok_or_else(|| {
        format!(
            "the column is {}, but {operation} takes text (Utf8); apply it to a text column, \
             or leave this column out of the steps",
            column.data_type()
        )
    })
}

/// How many digest bytes to keep: 0 means all 32.
fn kept(digest: &fw::Digest) -> Result<usize, String> {
    match digest.keep {
        0 => Ok(32),
        n @ 1..=32 => Ok(usize::from(n)),
        n => Err(format!(
            "keep is {n}, but a SHA-256 digest has 32 bytes; keep 1 to 32 of them (0 keeps all)"
        )),
    }
}

/// A digest column: `hash` gives each value's 32 bytes.
fn digests(
    column: &ArrayRef,
    spec: &fw::Digest,
    budget: &mut Budget,
    mut hash: impl FnMut(&[u8]) -> [u8; 32],
) -> Result<ArrayRef, String> {
    let values = bytes_of(column)?;
    let keep = kept(spec)?;
    let n = values.len();
    match &spec.encoding {
        fw::Encoding::Hex(prefix) => {
            let each = prefix.len() + 2 * keep;
            budget.take(each.saturating_mul(n))?;
            let mut out = StringBuilder::with_capacity(n, each * n);
            let mut text = String::with_capacity(each);
            for i in 0..n {
                let Some(value) = values.get(i) else {
                    out.append_null();
                    continue;
                };
                let hash = hash(value);
                text.clear();
                text.push_str(prefix);
                for byte in &hash[..keep] {
                    text.push(char::from(HEX[usize::from(byte >> 4)]));
                    text.push(char::from(HEX[usize::from(byte & 0xf)]));
                }
                out.append_value(&text);
            }
            Ok(Arc::new(out.finish()))
        }
        fw::Encoding::Binary => {
            budget.take(keep.saturating_mul(n))?;
            let mut out = BinaryBuilder::with_capacity(n, keep * n);
            for i in 0..n {
                match values.get(i) {
                    Some(value) => out.append_value(&hash(value)[..keep]),
                    None => out.append_null(),
                }
            }
            Ok(Arc::new(out.finish()))
        }
    }
}

/// SHA-256 of the prefix and each value.
pub(super) fn sha256(
    column: &ArrayRef,
    spec: &fw::Digest,
    budget: &mut Budget,
) -> Result<ArrayRef, String> {
    let mut salted = Sha256::new();
    salted.update(&spec.prefix);
    digests(column, spec, budget, |value| {
        salted.clone().chain_update(value).finalize().into()
    })
}

/// HMAC-SHA-256 under the key of the prefix and each value.
pub(super) fn hmac_sha256(
    column: &ArrayRef,
    keyed: &fw::Keyed,
    budget: &mut Budget,
) -> Result<ArrayRef, String> {
    // An HMAC takes a key of any length (a long one is hashed first), so this cannot fail.
    let mut keyed_mac = <Hmac<Sha256> as Mac>::new_from_slice(&keyed.key)
        .map_err(|e| format!("cannot use the key: {e}"))?;
    keyed_mac.update(&keyed.digest.prefix);
    digests(column, &keyed.digest, budget, |value| {
        let mut mac = keyed_mac.clone();
        mac.update(value);
        mac.finalize().into_bytes().into()
    })
}

/// A text column made by `f` from each text: it writes the new text into its second argument
/// and says whether there is one (`false` lands null).
pub(super) fn map_text(
    column: &ArrayRef,
    operation: &str,
    budget: &mut Budget,
    mut f: impl FnMut(&str, &mut String) -> Result<bool, String>,
) -> Result<ArrayRef, String> {
    let input = text_of(column, operation)?;
    let mut out = StringBuilder::with_capacity(input.len(), input.value_data().len());
    let mut text = String::new();
    for i in 0..input.len() {
        if input.is_null(i) {
            out.append_null();
            continue;
        }
        text.clear();
        if f(input.value(i), &mut text).map_err(|e| format!("row {i}: {e}"))? {
            budget.take(text.len())?;
            out.append_value(&text);
        } else {
            out.append_null();
        }
    }
    Ok(Arc::new(out.finish()))
}

/// At most `chars` characters of each text.
pub(super) fn truncate(
    column: &ArrayRef,
    chars: u32,
    budget: &mut Budget,
) -> Result<ArrayRef, String> {
    let chars = usize::try_from(chars).unwrap_or(usize::MAX);
    map_text(column, "truncate", budget, |s, out| {
        let end = s.char_indices().nth(chars).map_or(s.len(), |(at, _)| at);
        out.push_str(&s[..end]);
        Ok(true)
    })
}

/// Every match of `pattern` in each text replaced. The text is built match by match and given
/// up as soon as it outgrows what the budget has left, so one value whose replacements multiply
/// it cannot take more memory than the whole result may.
pub(super) fn replace(
    column: &ArrayRef,
    pattern: &regex::Regex,
    replacement: &str,
    budget: &mut Budget,
) -> Result<ArrayRef, String> {
    let (cap, refusal) = (budget.left(), budget.refusal());
    map_text(column, "replace", budget, |s, out| {
        let mut last = 0;
        for captures in pattern.captures_iter(s) {
            let whole = captures.get_match();
            out.push_str(&s[last..whole.start()]);
            captures.expand(replacement, out);
            last = whole.end();
            if out.len() > cap {
                return Err(refusal.clone());
            }
        }
        out.push_str(&s[last..]);
        Ok(true)
    })
}
