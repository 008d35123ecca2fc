//! Scalar values in PostgreSQL's binary send format (`binary 'true'` tuples).
//!
//! Each decoder produces exactly the [`Value`] that the text form of the same value decodes
//! to, so a pipeline lands the same Parquet whichever format it asked for. Where the value is
//! text (`numeric`, `inet`, `money`), the text is rebuilt the way the type's output function
//! prints it.

use super::Value;
use super::net;
use super::oid;

type Parsed<T> = Result<T, &'static str>;

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS as i64 * 86_400_000_000;

/// Whether [`decode`] reads values of the built-in scalar `type_oid`.
pub fn supports(type_oid: u32) -> bool {
    matches!(
        type_oid,
        oid::BOOL
            | oid::INT2
            | oid::INT4
            | oid::INT8
            | oid::OID
            | oid::FLOAT4
            | oid::FLOAT8
            | oid::NUMERIC
            | oid::MONEY
            | oid::TEXT
            | oid::VARCHAR
            | oid::BPCHAR
            | oid::NAME
            | oid::XML
            | oid::BYTEA
            | oid::DATE
            | oid::TIME
            | oid::TIMETZ
            | oid::TIMESTAMP
            | oid::TIMESTAMPTZ
            | oid::INTERVAL
            | oid::UUID
            | oid::JSON
            | oid::JSONB
            | oid::INET
            | oid::CIDR
            | oid::MACADDR
            | oid::MACADDR8
    )
}

fn fixed<const N: usize>(bytes: &[u8]) -> Parsed<[u8; N]> {
    bytes.try_into().map_err(|_| match N {
        1 => "expected 1 byte",
        2 => "expected 2 bytes",
        4 => "expected 4 bytes",
        6 => "expected 6 bytes",
        8 => "expected 8 bytes",
        12 => "expected 12 bytes",
        16 => "expected 16 bytes",
        _ => "wrong length",
    })
}

fn utf8(bytes: &[u8]) -> Parsed<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "not valid UTF-8")
}

/// Decode the binary form of a value of the built-in scalar `type_oid`; `modifier` is the
/// column's (for `money`, its fraction digits).
pub fn decode(type_oid: u32, modifier: i32, bytes: &[u8]) -> Parsed<Value> {
    let value = match type_oid {
        oid::BOOL => match bytes {
            [0] => Value::Bool(false),
            [1] => Value::Bool(true),
            _ => return Err("expected one byte, 0 or 1"),
        },
        oid::INT2 => Value::Int2(i16::from_be_bytes(fixed(bytes)?)),
        oid::INT4 => Value::Int4(i32::from_be_bytes(fixed(bytes)?)),
        oid::INT8 => Value::Int8(i64::from_be_bytes(fixed(bytes)?)),
        oid::OID => Value::Int8(i64::from(u32::from_be_bytes(fixed(bytes)?))),
        oid::FLOAT4 => Value::Float4(f32::from_be_bytes(fixed(bytes)?)),
        oid::FLOAT8 => Value::Float8(f64::from_be_bytes(fixed(bytes)?)),
        oid::NUMERIC => Value::Numeric(numeric(bytes)?),
        oid::MONEY => Value::Numeric(super::money_text(
            i128::from(i64::from_be_bytes(fixed(bytes)?)),
            modifier,
        )),
        oid::TEXT | oid::VARCHAR | oid::BPCHAR | oid::NAME | oid::XML => Value::Text(utf8(bytes)?),
        oid::BYTEA => Value::Bytea(bytes.to_vec()),
        oid::DATE => Value::Date(match i32::from_be_bytes(fixed(bytes)?) {
            i32::MAX => i32::MAX,
            i32::MIN => i32::MIN,
            days => days
                .checked_add(PG_EPOCH_DAYS)
                .filter(|d| *d != i32::MAX && *d != i32::MIN)
                .ok_or("date out of range")?,
        }),
        oid::TIME => Value::Time(i64::from_be_bytes(fixed(bytes)?)),
        oid::TIMETZ => {
            let b: [u8; 12] = fixed(bytes)?;
            let micros = i64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
            // The zone is stored in seconds west of UTC; the value carries seconds east.
            let zone = i32::from_be_bytes(b[8..].try_into().expect("4 bytes"));
            Value::TimeTz {
                micros,
                offset: zone.checked_neg().ok_or("time zone out of range")?,
            }
        }
        oid::TIMESTAMP => Value::Timestamp(timestamp(bytes)?),
        oid::TIMESTAMPTZ => Value::TimestampTz(timestamp(bytes)?),
        oid::INTERVAL => {
            let b: [u8; 16] = fixed(bytes)?;
            Value::Interval {
                micros: i64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
                days: i32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
                months: i32::from_be_bytes(b[12..].try_into().expect("4 bytes")),
            }
        }
        oid::UUID => Value::Uuid(fixed(bytes)?),
        oid::JSON => Value::Json(utf8(bytes)?),
        oid::JSONB => match bytes.split_first() {
            Some((1, text)) => Value::Json(utf8(text)?),
            _ => return Err("expected jsonb format version 1"),
        },
        oid::INET | oid::CIDR => Value::Text(net::inet_text(bytes)?),
        oid::MACADDR => Value::Text(net::mac_text(&fixed::<6>(bytes)?)),
        oid::MACADDR8 => Value::Text(net::mac_text(&fixed::<8>(bytes)?)),
        _ => return Err("no binary decoder for this type"),
    };
    Ok(value)
}

/// Microseconds since 2000 to microseconds since 1970, keeping the infinities.
fn timestamp(bytes: &[u8]) -> Parsed<i64> {
    match i64::from_be_bytes(fixed(bytes)?) {
        i64::MAX => Ok(i64::MAX),
        i64::MIN => Ok(i64::MIN),
        micros => micros
            .checked_add(PG_EPOCH_MICROS)
            .filter(|m| *m != i64::MAX && *m != i64::MIN)
            .ok_or(
                "timestamp out of range: microseconds since 1970 cover years 290308 BC to 294247 AD",
            ),
    }
}

const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;

/// `numeric_send`'s base-10000 digits to the text `numeric_out` prints: every integer digit,
/// and exactly `dscale` fraction digits.
fn numeric(bytes: &[u8]) -> Parsed<String> {
    if bytes.len() < 8 {
        return Err("numeric shorter than its 8-byte header");
    }
    let word = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
    let ndigits = usize::from(word(0));
    let weight = i16::from_be_bytes([bytes[2], bytes[3]]) as i32;
    let sign = word(4);
    let dscale = usize::from(word(6));
    if bytes.len() != 8 + 2 * ndigits {
        return Err("numeric length does not match its digit count");
    }
    match sign {
        NUMERIC_NAN => return Ok("NaN".into()),
        NUMERIC_PINF => return Ok("Infinity".into()),
        NUMERIC_NINF => return Ok("-Infinity".into()),
        NUMERIC_POS | NUMERIC_NEG => {}
        _ => return Err("unknown numeric sign"),
    }
    if dscale > 0x3FFF {
        return Err("numeric display scale out of range");
    }
    let digits: Vec<u16> = (0..ndigits).map(|i| word(8 + 2 * i)).collect();
    if digits.iter().any(|&d| d >= 10_000) {
        return Err("numeric digit out of range");
    }
    // Digit i has weight `weight - i`: it stands for d * 10000^(weight - i).
    let digit_at = |w: i32| -> u16 {
        let index = weight - w;
        if index < 0 {
            0
        } else {
            digits.get(index as usize).copied().unwrap_or(0)
        }
    };
    let mut out = String::with_capacity(8 + 4 * ndigits + dscale);
    if sign == NUMERIC_NEG {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    } else {
        for w in (0..=weight).rev() {
            let d = digit_at(w);
            if w == weight {
                out.push_str(&d.to_string());
            } else {
                out.push_str(&format!("{d:04}"));
            }
        }
    }
    if dscale > 0 {
        out.push('.');
        let mut fraction = String::with_capacity(dscale + 4);
        let mut w = -1;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", digit_at(w)));
            w -= 1;
        }
        fraction.truncate(dscale);
        out.push_str(&fraction);
    }
    Ok(out)
}

/// One-dimensional or multi-dimensional arrays in `array_send` form: the shape, then each
/// element with its length (-1 for null).
pub struct BinaryArray<'a> {
    pub element_oid: u32,
    pub dims: Vec<u32>,
    pub elements: Vec<Option<&'a [u8]>>,
}

pub fn array(bytes: &[u8]) -> Parsed<BinaryArray<'_>> {
    let mut pos = 0;
    let header = "array shorter than its header";
    let ndim = read_i32(bytes, &mut pos, header)?;
    let _has_nulls = read_i32(bytes, &mut pos, header)?;
    let element_oid = read_i32(bytes, &mut pos, header)? as u32;
    if !(0..=super::array::MAX_DIMS as i32).contains(&ndim) {
        return Err("array dimension count out of range");
    }
    let mut dims = Vec::with_capacity(ndim as usize);
    let mut total: usize = 1;
    for _ in 0..ndim {
        let short = "array shorter than its dimensions";
        let len = read_i32(bytes, &mut pos, short)?;
        let _lower_bound = read_i32(bytes, &mut pos, short)?;
        let len = u32::try_from(len).map_err(|_| "negative array dimension")?;
        // Every element takes at least its 4-byte length, which bounds a forged shape.
        total = total
            .checked_mul(len as usize)
            .filter(|t| t.saturating_mul(4) <= bytes.len())
            .ok_or("array dimensions larger than the data")?;
        dims.push(len);
    }
    if ndim == 0 || total == 0 {
        return Ok(BinaryArray {
            element_oid,
            dims: Vec::new(),
            elements: Vec::new(),
        });
    }
    let mut elements = Vec::with_capacity(total);
    for _ in 0..total {
        let len = read_i32(bytes, &mut pos, "array shorter than its elements")?;
        if len == -1 {
            elements.push(None);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| "negative array element length")?;
        let element = bytes
            .get(pos..pos + len)
            .ok_or("array element runs past the end")?;
        pos += len;
        elements.push(Some(element));
    }
    if pos != bytes.len() {
        return Err("unexpected bytes after the array's last element");
    }
    Ok(BinaryArray {
        element_oid,
        dims,
        elements,
    })
}

fn read_i32(bytes: &[u8], pos: &mut usize, short: &'static str) -> Parsed<i32> {
    let b = bytes.get(*pos..*pos + 4).ok_or(short)?;
    *pos += 4;
    Ok(i32::from_be_bytes(b.try_into().expect("4 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_bytes(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend((digits.len() as u16).to_be_bytes());
        b.extend(weight.to_be_bytes());
        b.extend(sign.to_be_bytes());
        b.extend(dscale.to_be_bytes());
        for d in digits {
            b.extend(d.to_be_bytes());
        }
        b
    }

    #[test]
    fn numerics_print_like_numeric_out() {
        let n = |w, s, d, digits: &[u16]| numeric(&numeric_bytes(w, s, d, digits)).unwrap();
        assert_eq!(n(0, NUMERIC_POS, 0, &[]), "0");
        assert_eq!(n(0, NUMERIC_POS, 2, &[]), "0.00");
        assert_eq!(n(0, NUMERIC_POS, 0, &[12]), "12");
        assert_eq!(n(1, NUMERIC_NEG, 3, &[1, 2345, 6700]), "-12345.670");
        assert_eq!(n(-1, NUMERIC_POS, 6, &[12]), "0.001200");
        assert_eq!(n(-2, NUMERIC_POS, 5, &[1000]), "0.00001");
        assert_eq!(n(2, NUMERIC_POS, 0, &[1]), "100000000");
        assert_eq!(n(0, NUMERIC_NAN, 0, &[]), "NaN");
        assert_eq!(n(0, NUMERIC_PINF, 0, &[]), "Infinity");
        assert_eq!(n(0, NUMERIC_NINF, 0, &[]), "-Infinity");
        assert!(numeric(&numeric_bytes(0, 0x1234, 0, &[])).is_err());
        assert!(numeric(&numeric_bytes(0, NUMERIC_POS, 0, &[10_000])).is_err());
        assert!(numeric(&[0, 1, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn dates_and_timestamps_move_to_the_unix_epoch() {
        assert_eq!(
            decode(oid::DATE, -1, &0i32.to_be_bytes()),
            Ok(Value::Date(10_957))
        );
        assert_eq!(
            decode(oid::DATE, -1, &i32::MAX.to_be_bytes()),
            Ok(Value::Date(i32::MAX))
        );
        assert_eq!(
            decode(oid::TIMESTAMPTZ, -1, &0i64.to_be_bytes()),
            Ok(Value::TimestampTz(PG_EPOCH_MICROS))
        );
        assert_eq!(
            decode(oid::TIMESTAMP, -1, &i64::MIN.to_be_bytes()),
            Ok(Value::Timestamp(i64::MIN))
        );
        assert!(decode(oid::TIMESTAMP, -1, &(i64::MAX - 1).to_be_bytes()).is_err());
        let mut timetz = 3_600_000_000i64.to_be_bytes().to_vec();
        timetz.extend((-19_800i32).to_be_bytes());
        assert_eq!(
            decode(oid::TIMETZ, -1, &timetz),
            Ok(Value::TimeTz {
                micros: 3_600_000_000,
                offset: 19_800
            })
        );
    }

    #[test]
    fn wrong_lengths_are_refused_not_misread() {
        assert!(decode(oid::INT4, -1, &[0, 0, 1]).is_err());
        assert!(decode(oid::BOOL, -1, &[2]).is_err());
        assert!(decode(oid::UUID, -1, &[0; 15]).is_err());
        assert!(decode(oid::JSONB, -1, b"\x02{}").is_err());
        assert!(decode(oid::TEXT, -1, &[0xff]).is_err());
        assert!(decode(oid::POINT, -1, &[0; 16]).is_err());
    }

    #[test]
    fn arrays_split_into_shape_and_elements() {
        let mut b = Vec::new();
        for n in [2i32, 1, oid::INT4 as i32, 2, 1, 1, 0] {
            b.extend(n.to_be_bytes());
        }
        b.extend(4i32.to_be_bytes());
        b.extend(7i32.to_be_bytes());
        b.extend((-1i32).to_be_bytes());
        let a = array(&b).unwrap();
        assert_eq!(a.element_oid, oid::INT4);
        assert_eq!(a.dims, vec![2, 1]);
        assert_eq!(a.elements, vec![Some(&7i32.to_be_bytes()[..]), None]);
        assert!(array(&b[..b.len() - 1]).is_err());
        let mut empty = Vec::new();
        for n in [0i32, 0, oid::INT4 as i32] {
            empty.extend(n.to_be_bytes());
        }
        assert!(array(&empty).unwrap().dims.is_empty());
    }
}
