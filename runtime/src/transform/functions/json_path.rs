//! The JSON paths of `json-path`: `$`, then any of `.name`, `["name"]` and `[index]`.
//!
//! That is the part of JSONPath (RFC 9535) that names one value; wildcards, slices, filters
//! and recursive descent, which name several, are refused with a message saying so.

/// One step into a JSON value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Segment {
    /// A member of an object.
    Name(String),
    /// An element of an array, from the start (or from the end when negative: -1 is the last).
    Index(i64),
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Path(pub(super) Vec<Segment>);

const SYNTAX: &str = "write a path like $.a.b[0]: `$`, then any of `.name`, `[\"name\"]` and \
                      `[index]` (from 0; -1 is the last)";

impl Path {
    pub(super) fn parse(text: &str) -> Result<Path, String> {
        let bad = |at: usize, what: &str| {
            format!("the JSON path {text:?} does not parse: {what} at character {at}; {SYNTAX}")
        };
        let Some(mut rest) = text.strip_prefix('$') else {
            return Err(bad(0, "it does not start with `$`"));
        };
        let mut segments = Vec::new();
        while !rest.is_empty() {
            let at = text.len() - rest.len();
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                let name = &after[..end];
                if name.is_empty() || name == "*" || name.starts_with('.') {
                    return Err(bad(at + 1, "expected a member name after `.`"));
                }
                segments.push(Segment::Name(name.to_owned()));
                rest = &after[end..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let end = bracket_end(after).ok_or_else(|| bad(at, "an unclosed `[`"))?;
                let inside = after[..end].trim();
                segments.push(bracket(inside).ok_or_else(|| {
                    bad(
                        at + 1,
                        "expected a quoted name or an integer index inside `[]`",
                    )
                })?);
                rest = &after[end + 1..];
            } else {
                return Err(bad(at, "expected `.` or `[`"));
            }
        }
        Ok(Path(segments))
    }

    /// The value at this path in the JSON text `json`, written into `out` (a string as its
    /// text, anything else as JSON); `false` when there is none or it is JSON `null`.
    pub(super) fn extract(&self, json: &str, out: &mut String) -> Result<bool, String> {
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| {
            format!("the value is not JSON ({e}); apply json-path to a json or jsonb column")
        })?;
        let mut at = &value;
        for segment in &self.0 {
            let next = match (segment, at) {
                (Segment::Name(name), serde_json::Value::Object(map)) => map.get(name),
                (Segment::Index(i), serde_json::Value::Array(items)) => {
                    let i = if *i < 0 { items.len() as i64 + i } else { *i };
                    usize::try_from(i).ok().and_then(|i| items.get(i))
                }
                _ => None,
            };
            match next {
                Some(value) => at = value,
                None => return Ok(false),
            }
        }
        match at {
            serde_json::Value::Null => Ok(false),
            serde_json::Value::String(s) => {
                out.push_str(s);
                Ok(true)
            }
            other => {
                out.push_str(&other.to_string());
                Ok(true)
            }
        }
    }
}

/// Where the `]` that closes a bracket is, skipping one inside a quoted name.
fn bracket_end(after: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in after.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// What is inside a bracket: a JSON string (a name) or an integer (an index).
fn bracket(inside: &str) -> Option<Segment> {
    if inside.starts_with('"') {
        return serde_json::from_str::<String>(inside)
            .ok()
            .map(Segment::Name);
    }
    let digits = inside.strip_prefix('-').unwrap_or(inside);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    inside.parse().ok().map(Segment::Index)
}
