//! `inet`, `cidr`, `macaddr` and `macaddr8` from their binary form to the text PostgreSQL
//! prints, so that binary and text tuples land the same string.

use std::fmt::Write;

type Parsed<T> = Result<T, &'static str>;

const FAMILY_V4: u8 = 2;
const FAMILY_V6: u8 = 3;

/// `inet_send`/`cidr_send` bytes (family, mask bits, is-cidr flag, address length, address)
/// to `inet_out`/`cidr_out` text: all four IPv4 octets, IPv6 with its longest run of two or
/// more zero groups shortened to `::` and an embedded IPv4 tail where PostgreSQL prints one,
/// then `/bits` unless the mask covers the whole address of an `inet`.
pub fn inet_text(bytes: &[u8]) -> Parsed<String> {
    let [family, bits, is_cidr, len, address @ ..] = bytes else {
        return Err("inet shorter than its 4-byte header");
    };
    let (max_bits, expected_len) = match *family {
        FAMILY_V4 => (32, 4),
        FAMILY_V6 => (128, 16),
        _ => return Err("unknown inet address family"),
    };
    if usize::from(*len) != expected_len || address.len() != expected_len {
        return Err("inet address length does not match its family");
    }
    if *bits > max_bits {
        return Err("inet mask longer than the address");
    }
    let mut out = if *family == FAMILY_V4 {
        let a = address;
        format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
    } else {
        ipv6_text(address.try_into().expect("16 bytes"))
    };
    if *is_cidr != 0 || *bits != max_bits {
        write!(out, "/{bits}").expect("writing to a String");
    }
    Ok(out)
}

fn ipv6_text(address: &[u8; 16]) -> String {
    let words: Vec<u16> = address
        .chunks_exact(2)
        .map(|p| u16::from_be_bytes([p[0], p[1]]))
        .collect();
    // The longest run of zero words, the first one on a tie; runs of one are not shortened.
    let (mut best_start, mut best_len) = (0, 0);
    let mut i = 0;
    while i < 8 {
        if words[i] == 0 {
            let start = i;
            while i < 8 && words[i] == 0 {
                i += 1;
            }
            if i - start > best_len {
                (best_start, best_len) = (start, i - start);
            }
        } else {
            i += 1;
        }
    }
    let run = if best_len >= 2 {
        Some(best_start..best_start + best_len)
    } else {
        None
    };
    // `::a.b.c.d`, `::ffff:a.b.c.d`: PostgreSQL keeps the IPv4-compatible and IPv4-mapped
    // forms (but `::1` stays `::1`).
    let ipv4_tail = best_start == 0
        && (best_len == 6
            || (best_len == 7 && words[7] != 1)
            || (best_len == 5 && words[5] == 0xffff));
    let mut out = String::with_capacity(40);
    for (i, word) in words.iter().enumerate() {
        if let Some(run) = &run
            && run.contains(&i)
        {
            if i == run.start {
                out.push(':');
            }
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6 && ipv4_tail {
            let a = &address[12..];
            write!(out, "{}.{}.{}.{}", a[0], a[1], a[2], a[3]).expect("writing to a String");
            return out;
        }
        write!(out, "{word:x}").expect("writing to a String");
    }
    if run.is_some_and(|r| r.end == 8) {
        out.push(':');
    }
    out
}

/// Lower-case hex pairs joined by colons, as `macaddr_out` and `macaddr8_out` print them.
pub fn mac_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        write!(out, "{b:02x}").expect("writing to a String");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(text: &str, bits: u8, cidr: bool) -> String {
        let addr: std::net::Ipv6Addr = text.parse().unwrap();
        let mut b = vec![FAMILY_V6, bits, u8::from(cidr), 16];
        b.extend(addr.octets());
        inet_text(&b).unwrap()
    }

    #[test]
    fn addresses_print_like_postgres() {
        assert_eq!(
            inet_text(&[FAMILY_V4, 32, 0, 4, 192, 168, 0, 1]).unwrap(),
            "192.168.0.1"
        );
        assert_eq!(
            inet_text(&[FAMILY_V4, 24, 0, 4, 192, 168, 0, 1]).unwrap(),
            "192.168.0.1/24"
        );
        assert_eq!(
            inet_text(&[FAMILY_V4, 32, 1, 4, 10, 0, 0, 0]).unwrap(),
            "10.0.0.0/32"
        );
        assert_eq!(v6("::", 128, false), "::");
        assert_eq!(v6("::1", 128, false), "::1");
        assert_eq!(v6("2001:db8::1", 64, false), "2001:db8::1/64");
        assert_eq!(v6("2001:db8:0:1:0:0:0:1", 128, false), "2001:db8:0:1::1");
        assert_eq!(v6("1:0:1:0:1:0:1:0", 128, false), "1:0:1:0:1:0:1:0");
        assert_eq!(v6("::ffff:1.2.3.4", 128, false), "::ffff:1.2.3.4");
        assert_eq!(v6("::1.2.3.4", 128, false), "::1.2.3.4");
        assert_eq!(v6("fe80::", 10, true), "fe80::/10");
        assert!(inet_text(&[FAMILY_V4, 33, 0, 4, 1, 2, 3, 4]).is_err());
        assert!(inet_text(&[FAMILY_V6, 0, 0, 4, 1, 2, 3, 4]).is_err());
        assert!(inet_text(&[9]).is_err());
        assert_eq!(mac_text(&[8, 0, 0x2b, 1, 2, 3]), "08:00:2b:01:02:03");
    }
}
