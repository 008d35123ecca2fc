//! Arrays in PostgreSQL's text form: `{1,2,3}`, `{{"a b",NULL},{c,""}}`,
//! `[0:1]={x,y}`.
//!
//! [`parse`] splits the text into a shape and element texts; each element is then read as
//! the element type by the caller. `array_out` quotes an element when it is empty, equals
//! `NULL` in any case, or holds braces, quotes, backslashes, the delimiter or white space, and
//! escapes quotes and backslashes inside quotes; an unquoted `NULL` is SQL null.

type Parsed<T> = Result<T, &'static str>;

/// The shape of an array and its elements in row-major order (`None` for null).
#[derive(Debug, PartialEq, Eq)]
pub struct TextArray {
    pub dims: Vec<u32>,
    pub elements: Vec<Option<String>>,
}

/// Most dimensions PostgreSQL allows (`MAXDIM`).
pub const MAX_DIMS: usize = 6;

pub fn parse(text: &[u8], delimiter: u8) -> Parsed<TextArray> {
    let mut parser = Parser {
        s: text,
        pos: 0,
        delimiter,
        dims: [None; MAX_DIMS],
        leaf_depth: None,
        elements: Vec::new(),
    };
    parser.skip_bounds()?;
    if parser.peek() != Some(b'{') {
        return Err("expected '{' to open the array");
    }
    parser.level(0)?;
    if parser.pos != text.len() {
        return Err("unexpected text after the array's closing '}'");
    }
    // `{}` and `{{}}` are both the empty array.
    let dims = match parser.leaf_depth {
        Some(leaf) if !parser.elements.is_empty() => parser.dims[..=leaf]
            .iter()
            .map(|d| d.unwrap_or(0))
            .collect(),
        _ => Vec::new(),
    };
    Ok(TextArray {
        dims,
        elements: parser.elements,
    })
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    delimiter: u8,
    /// Length of each dimension, fixed by the first sub-array closed at that depth.
    dims: [Option<u32>; MAX_DIMS],
    /// The depth that holds elements, fixed by the first one.
    leaf_depth: Option<usize>,
    elements: Vec<Option<String>>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    /// `[lo:hi][lo:hi]=`, printed when a lower bound is not 1. The bounds are checked against
    /// the shape only loosely: positions, not subscripts, are what lands.
    fn skip_bounds(&mut self) -> Parsed<()> {
        if self.peek() != Some(b'[') {
            return Ok(());
        }
        while self.peek() == Some(b'[') {
            let close = self.s[self.pos..]
                .iter()
                .position(|&b| b == b']')
                .ok_or("unclosed '[' in the array bounds")?;
            self.pos += close + 1;
        }
        if self.peek() != Some(b'=') {
            return Err("expected '=' after the array bounds");
        }
        self.pos += 1;
        Ok(())
    }

    /// One `{...}` at nesting `depth`; records or checks the dimension's length.
    fn level(&mut self, depth: usize) -> Parsed<()> {
        if depth >= MAX_DIMS {
            return Err("more than 6 array dimensions");
        }
        self.pos += 1; // '{'
        let mut count: u32 = 0;
        let nested = self.peek() == Some(b'{');
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return self.close_level(depth, 0, false);
        }
        loop {
            if nested {
                if self.peek() != Some(b'{') {
                    return Err("expected '{': sub-arrays and elements are mixed");
                }
                self.level(depth + 1)?;
            } else {
                let element = self.element()?;
                self.elements.push(element);
            }
            count += 1;
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return self.close_level(depth, count, nested);
                }
                Some(b) if b == self.delimiter => self.pos += 1,
                _ => return Err("expected the delimiter or '}' after an element"),
            }
        }
    }

    fn close_level(&mut self, depth: usize, count: u32, nested: bool) -> Parsed<()> {
        match self.dims[depth] {
            None => self.dims[depth] = Some(count),
            Some(n) if n != count => return Err("sub-arrays of different lengths"),
            Some(_) => {}
        }
        if !nested {
            match self.leaf_depth {
                None => self.leaf_depth = Some(depth),
                Some(leaf) if leaf != depth => return Err("sub-arrays of different depths"),
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn element(&mut self) -> Parsed<Option<String>> {
        if self.peek() == Some(b'"') {
            self.quoted_element().map(Some)
        } else {
            self.unquoted_element()
        }
    }

    /// `"..."`, with `\` escaping the next byte: never null, even when it reads `NULL`.
    fn quoted_element(&mut self) -> Parsed<String> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Err("unclosed '\"' in an array element"),
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    let escaped = *self
                        .s
                        .get(self.pos + 1)
                        .ok_or("a '\\' ends the array text")?;
                    out.push(escaped);
                    self.pos += 2;
                }
                Some(b) => {
                    out.push(b);
                    self.pos += 1;
                }
            }
        }
        String::from_utf8(out).map_err(|_| "array element is not valid UTF-8")
    }

    /// Up to the delimiter or `}`; `NULL` in any case is SQL null.
    fn unquoted_element(&mut self) -> Parsed<Option<String>> {
        let start = self.pos;
        while let Some(b) = self.peek() {
            if b == self.delimiter || b == b'}' {
                break;
            }
            if matches!(b, b'{' | b'"' | b'\\') {
                return Err("unexpected character in an unquoted array element");
            }
            self.pos += 1;
        }
        let raw = &self.s[start..self.pos];
        if raw.is_empty() {
            return Err("empty unquoted array element");
        }
        if raw.eq_ignore_ascii_case(b"NULL") {
            return Ok(None);
        }
        std::str::from_utf8(raw)
            .map(|s| Some(s.to_owned()))
            .map_err(|_| "array element is not valid UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (Vec<u32>, Vec<Option<&'static str>>) {
        let parsed = parse(text.as_bytes(), b',').unwrap();
        let elements = parsed
            .elements
            .into_iter()
            .map(|e| e.map(|s| &*Box::leak(s.into_boxed_str())))
            .collect();
        (parsed.dims, elements)
    }

    #[test]
    fn shapes_quotes_and_nulls() {
        assert_eq!(ok("{}"), (vec![], vec![]));
        assert_eq!(ok("{{}}"), (vec![], vec![]));
        assert_eq!(
            ok("{1,2,3}"),
            (vec![3], vec![Some("1"), Some("2"), Some("3")])
        );
        assert_eq!(
            ok("{{1,NULL},{3,4}}"),
            (vec![2, 2], vec![Some("1"), None, Some("3"), Some("4")])
        );
        assert_eq!(
            ok(r#"{"a b","NULL","",null,"q\"\\"}"#),
            (
                vec![5],
                vec![Some("a b"), Some("NULL"), Some(""), None, Some("q\"\\")]
            )
        );
        assert_eq!(ok("[0:1]={x,y}"), (vec![2], vec![Some("x"), Some("y")]));
        assert_eq!(
            ok("{{{1},{2}},{{3},{4}}}"),
            (
                vec![2, 2, 1],
                vec![Some("1"), Some("2"), Some("3"), Some("4")]
            )
        );
        assert_eq!(
            parse(b"{(1,2);(3,4)}", b';').unwrap().elements,
            vec![Some("(1,2)".into()), Some("(3,4)".into())]
        );
    }

    #[test]
    fn malformed_arrays_are_refused() {
        for bad in [
            "",
            "1,2",
            "{1,2",
            "{1,,2}",
            "{{1},2}",
            "{{1,2},{3}}",
            "{1}x",
            "{\"a}",
            "{{1},{{2}}}",
            "{{{{{{{1}}}}}}}",
            "[1:2]{1,2}",
            "{a\"b}",
        ] {
            assert!(parse(bad.as_bytes(), b',').is_err(), "{bad:?} parsed");
        }
    }
}
