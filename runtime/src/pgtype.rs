//! PostgreSQL types: built-in OIDs, names, and decoding of text output into [`Value`]s.
//! (Being written.)

use crate::change::Value;

/// A column value that does not parse as its declared type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {text:?} as {type_name}: {reason}")]
pub struct ValueError {
    pub type_name: String,
    pub text: String,
    pub reason: String,
}

/// Decode the text output of a value of type `type_oid`.
pub fn decode_text(_type_oid: u32, _type_modifier: i32, text: &[u8]) -> Result<Value, ValueError> {
    Ok(Value::Other(String::from_utf8_lossy(text).into_owned()))
}

/// The name of a built-in type, as `pg_type.typname` spells it.
pub fn type_name(_type_oid: u32) -> Option<&'static str> {
    None
}
