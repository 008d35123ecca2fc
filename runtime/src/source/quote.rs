//! SQL text from configuration: names and values are always quoted, never pasted. Both the
//! replication grammar and ordinary SQL read them this way.

/// `"name"`, with embedded double quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'value'`, with embedded single quotes doubled. The replication grammar treats backslashes
/// literally, and so does SQL with `standard_conforming_strings` (on since PostgreSQL 9.1), so
/// nothing else needs escaping.
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(quote_ident("slot"), "\"slot\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b"), "'a\\b'");
    }
}
