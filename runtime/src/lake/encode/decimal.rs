//! Exact decimal text to Arrow's scaled integers.
//!
//! PostgreSQL has already rounded a `numeric(p,s)` value to `s` fractional digits, so the
//! parse is exact: the digits are shifted to the scale, never rounded. A value with more
//! fractional digits than the scale, or more integer digits than `p - s`, does not belong to
//! the column and is refused.

/// The digits of `text` laid out for `scale`: sign, integer digits without leading zeros,
/// fractional digits, and how many zeros pad the fraction up to the scale.
struct Scaled<'a> {
    negative: bool,
    whole: &'a [u8],
    fraction: &'a [u8],
    padding: u32,
}

fn scaled(text: &str, precision: u8, scale: i8) -> Result<Scaled<'_>, String> {
    let fits = || format!("{text:?} does not fit numeric({precision},{scale})");
    if matches!(text, "NaN" | "Infinity" | "-Infinity") {
        return Err(format!(
            "{text} has no decimal representation in numeric({precision},{scale})"
        ));
    }
    let bytes = text.as_bytes();
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    let (whole, fraction) = match digits.iter().position(|&b| b == b'.') {
        Some(point) if point + 1 < digits.len() => (&digits[..point], &digits[point + 1..]),
        Some(_) => return Err(format!("{text:?} is not a decimal number")),
        None => (digits, &digits[digits.len()..]),
    };
    if whole.is_empty() || !whole.iter().chain(fraction).all(u8::is_ascii_digit) {
        return Err(format!("{text:?} is not a decimal number"));
    }
    let first_significant = whole.iter().position(|&b| b != b'0').unwrap_or(whole.len());
    let whole = &whole[first_significant..];
    let scale = scale.max(0) as usize;
    if fraction.len() > scale || whole.len() > usize::from(precision).saturating_sub(scale) {
        return Err(fits());
    }
    Ok(Scaled {
        negative,
        whole,
        fraction,
        padding: (scale - fraction.len()) as u32,
    })
}

/// `text` as an `i128` scaled by `10^scale`, for `precision <= 38`.
pub(super) fn parse_i128(text: &str, precision: u8, scale: i8) -> Result<i128, String> {
    let s = scaled(text, precision, scale)?;
    // At most 38 digits in all, so the accumulator cannot overflow.
    let mut n: i128 = 0;
    for &d in s.whole.iter().chain(s.fraction) {
        n = n * 10 + i128::from(d - b'0');
    }
    n *= 10i128.pow(s.padding);
    Ok(if s.negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_exactly() {
        assert_eq!(parse_i128("12.34", 12, 2), Ok(1234));
        assert_eq!(parse_i128("-12.3", 12, 2), Ok(-1230));
        assert_eq!(parse_i128("12", 12, 2), Ok(1200));
        assert_eq!(parse_i128("0.00", 12, 2), Ok(0));
        assert_eq!(parse_i128("-0.01", 12, 2), Ok(-1));
        assert_eq!(parse_i128("0009999999999.99", 15, 2), Ok(999_999_999_999));
        assert_eq!(parse_i128("42", 5, 0), Ok(42));
        let max38 = "9".repeat(38);
        assert_eq!(parse_i128(&max38, 38, 0), Ok(10i128.pow(38) - 1));
        assert_eq!(
            parse_i128(&format!("-0.{max38}"), 38, 38),
            Ok(1 - 10i128.pow(38))
        );
    }

    #[test]
    fn refuses_what_does_not_fit() {
        assert!(
            parse_i128("1.234", 12, 2)
                .unwrap_err()
                .contains("does not fit numeric(12,2)")
        );
        assert!(parse_i128("12345678901", 12, 2).is_err());
        assert!(parse_i128("1234567890", 12, 2).is_ok());
        assert!(parse_i128("NaN", 12, 2).unwrap_err().contains("NaN"));
        for bad in ["", "-", "1.", ".5", "1e5", "1.2.3", "+1", "--1", "1 "] {
            assert!(parse_i128(bad, 12, 2).is_err(), "{bad:?}");
        }
    }
}
