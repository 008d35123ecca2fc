//! Dates, times, timestamps and intervals in the forms PostgreSQL prints with
//! `DateStyle=ISO`, `IntervalStyle=postgres`.
//!
//! Day arithmetic is the proleptic Gregorian calendar with astronomical year numbering
//! (1 BC is year 0, 2 BC is year -1), which is what PostgreSQL uses internally; ` BC` in the
//! text is turned into that numbering before any arithmetic. Every parser returns a reason on
//! failure instead of panicking, and all arithmetic that could leave the target
//! representation is checked.

pub(super) const MICROS_PER_SECOND: i64 = 1_000_000;
pub(super) const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

type Parsed<T> = Result<T, &'static str>;

/// Days from 1970-01-01 to `year-month-day` (astronomical year, month 1..=12).
///
/// Works on whole 400-year eras (146 097 days each) so that leap-year rules need no tables,
/// counting years from March so that February's variable length falls at the end of a year.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let month = i64::from(month);
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    // 719 468 is the day of the era-based count that falls on 1970-01-01.
    era * 146_097 + day_of_era - 719_468
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A forward-only reader over ASCII text.
struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a [u8]) -> Self {
        Cursor { s, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8, why: &'static str) -> Parsed<()> {
        if self.eat(b) { Ok(()) } else { Err(why) }
    }

    fn eat_str(&mut self, lit: &[u8]) -> bool {
        if self.s[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            true
        } else {
            false
        }
    }

    fn at_end(&self) -> bool {
        self.pos == self.s.len()
    }

    /// An unsigned decimal of `min..=max` digits.
    fn number(&mut self, min: usize, max: usize, why: &'static str) -> Parsed<u64> {
        let start = self.pos;
        let mut n: u64 = 0;
        while let Some(b @ b'0'..=b'9') = self.peek() {
            if self.pos - start == max {
                return Err(why);
            }
            n = n * 10 + u64::from(b - b'0');
            self.pos += 1;
        }
        if self.pos - start < min {
            Err(why)
        } else {
            Ok(n)
        }
    }

    /// `.f` to `.ffffff` if present, as microseconds.
    fn fraction(&mut self) -> Parsed<i64> {
        if !self.eat(b'.') {
            return Ok(0);
        }
        let start = self.pos;
        let digits = self.number(1, 6, "expected 1 to 6 fractional digits")?;
        let mut micros = digits as i64;
        for _ in self.pos - start..6 {
            micros *= 10;
        }
        Ok(micros)
    }
}

/// `YYYY-MM-DD` as an astronomical year and days since the epoch; ` BC` is read by the caller
/// because it comes after the time and offset in a timestamp.
fn date_fields(c: &mut Cursor<'_>) -> Parsed<(i64, u32, u32)> {
    let year = c.number(4, 9, "expected a year of 4 or more digits")?;
    c.expect(b'-', "expected '-' after the year")?;
    let month = c.number(2, 2, "expected a two-digit month")? as u32;
    c.expect(b'-', "expected '-' after the month")?;
    let day = c.number(2, 2, "expected a two-digit day")? as u32;
    if year == 0 {
        return Err("year 0 does not exist");
    }
    if !(1..=12).contains(&month) {
        return Err("month out of range");
    }
    Ok((year as i64, month, day))
}

/// Applies an optional trailing ` BC`, checks the day of the month, and counts days.
fn finish_date(c: &mut Cursor<'_>, (year, month, day): (i64, u32, u32)) -> Parsed<i64> {
    let year = if c.eat_str(b" BC") { 1 - year } else { year };
    if day == 0 || day > days_in_month(year, month) {
        return Err("day out of range for the month");
    }
    Ok(days_from_civil(year, month, day))
}

/// `HH:MM:SS[.ffffff]` as microseconds; hour 24 is allowed only as `24:00:00`.
fn time_of_day(c: &mut Cursor<'_>) -> Parsed<i64> {
    let hour = c.number(2, 2, "expected a two-digit hour")? as i64;
    c.expect(b':', "expected ':' after the hour")?;
    let minute = c.number(2, 2, "expected two-digit minutes")? as i64;
    c.expect(b':', "expected ':' after the minutes")?;
    let second = c.number(2, 2, "expected two-digit seconds")? as i64;
    let fraction = c.fraction()?;
    if minute > 59 || second > 59 {
        return Err("minutes or seconds out of range");
    }
    let micros = ((hour * 60 + minute) * 60 + second) * MICROS_PER_SECOND + fraction;
    if micros > 24 * 3600 * MICROS_PER_SECOND {
        return Err("time of day out of range");
    }
    Ok(micros)
}

/// `+HH`, `+HH:MM` or `+HH:MM:SS` (or `-`), as seconds east of UTC.
fn utc_offset(c: &mut Cursor<'_>) -> Parsed<i64> {
    let sign = match c.peek() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err("expected a UTC offset like +00"),
    };
    c.pos += 1;
    let hours = c.number(2, 2, "expected two-digit offset hours")? as i64;
    let mut minutes = 0;
    let mut seconds = 0;
    if c.eat(b':') {
        minutes = c.number(2, 2, "expected two-digit offset minutes")? as i64;
        if c.eat(b':') {
            seconds = c.number(2, 2, "expected two-digit offset seconds")? as i64;
        }
    }
    if minutes > 59 || seconds > 59 {
        return Err("offset minutes or seconds out of range");
    }
    Ok(sign * (hours * 3600 + minutes * 60 + seconds))
}

/// A `date` as days since 1970-01-01; infinities are `i32::MAX` / `i32::MIN`.
pub fn parse_date(s: &[u8]) -> Parsed<i32> {
    match s {
        b"infinity" => return Ok(i32::MAX),
        b"-infinity" => return Ok(i32::MIN),
        _ => {}
    }
    let mut c = Cursor::new(s);
    let fields = date_fields(&mut c)?;
    let days = finish_date(&mut c, fields)?;
    if !c.at_end() {
        return Err("unexpected text after the date");
    }
    // Strictly inside the sentinels, so a real date never reads as an infinity.
    i32::try_from(days)
        .ok()
        .filter(|d| *d != i32::MAX && *d != i32::MIN)
        .ok_or("date out of range")
}

/// A `time` as microseconds since midnight.
pub fn parse_time(s: &[u8]) -> Parsed<i64> {
    let mut c = Cursor::new(s);
    let micros = time_of_day(&mut c)?;
    if !c.at_end() {
        return Err("unexpected text after the time");
    }
    Ok(micros)
}

/// A `timetz` as local microseconds since midnight and seconds east of UTC.
pub fn parse_timetz(s: &[u8]) -> Parsed<(i64, i32)> {
    let mut c = Cursor::new(s);
    let micros = time_of_day(&mut c)?;
    let offset = utc_offset(&mut c)?;
    if !c.at_end() {
        return Err("unexpected text after the time zone");
    }
    let offset = i32::try_from(offset).map_err(|_| "time zone out of range")?;
    Ok((micros, offset))
}

/// A `timestamp` (`with_offset == false`) or `timestamptz` as microseconds since
/// 1970-01-01 00:00:00 (UTC for `timestamptz`); infinities are `i64::MAX` / `i64::MIN`.
pub fn parse_timestamp(s: &[u8], with_offset: bool) -> Parsed<i64> {
    match s {
        b"infinity" => return Ok(i64::MAX),
        b"-infinity" => return Ok(i64::MIN),
        _ => {}
    }
    let mut c = Cursor::new(s);
    let fields = date_fields(&mut c)?;
    c.expect(b' ', "expected a space between date and time")?;
    let time = time_of_day(&mut c)?;
    let offset = if with_offset { utc_offset(&mut c)? } else { 0 };
    let days = finish_date(&mut c, fields)?;
    if !c.at_end() {
        return Err("unexpected text after the timestamp");
    }
    days.checked_mul(MICROS_PER_DAY)
        .and_then(|m| m.checked_add(time))
        .and_then(|m| m.checked_sub(offset * MICROS_PER_SECOND))
        .filter(|m| *m != i64::MAX && *m != i64::MIN)
        .ok_or("timestamp out of range: microseconds since 1970 cover years 290308 BC to 294247 AD")
}

/// An `interval` in `IntervalStyle=postgres`: `1 year 2 mons -3 days +04:05:06.5`, any part
/// optional, `00:00:00` for zero. PostgreSQL 17's `infinity` / `-infinity` map to all fields
/// at their maximum / minimum, as the server stores them.
pub fn parse_interval(s: &[u8]) -> Parsed<(i32, i32, i64)> {
    match s {
        b"infinity" => return Ok((i32::MAX, i32::MAX, i64::MAX)),
        b"-infinity" => return Ok((i32::MIN, i32::MIN, i64::MIN)),
        b"" => return Err("empty interval"),
        _ => {}
    }
    let mut months: i64 = 0;
    let mut days: i64 = 0;
    let mut micros: i128 = 0;
    let mut saw_time = false;
    let mut tokens = s.split(|&b| b == b' ');
    while let Some(token) = tokens.next() {
        if saw_time {
            return Err("unexpected text after the time part");
        }
        let mut c = Cursor::new(token);
        let negative = c.eat(b'-');
        if !negative {
            c.eat(b'+');
        }
        let magnitude = c.number(1, 18, "expected a number")?;
        if c.eat(b':') {
            let minutes = c.number(2, 2, "expected two-digit minutes")?;
            c.expect(b':', "expected ':' after the minutes")?;
            let seconds = c.number(2, 2, "expected two-digit seconds")?;
            let fraction = c.fraction()?;
            if !c.at_end() {
                return Err("unexpected text in the time part");
            }
            if minutes > 59 || seconds > 59 {
                return Err("minutes or seconds out of range");
            }
            let total = ((i128::from(magnitude) * 60 + i128::from(minutes)) * 60
                + i128::from(seconds))
                * i128::from(MICROS_PER_SECOND)
                + i128::from(fraction);
            micros = if negative { -total } else { total };
            saw_time = true;
            continue;
        }
        if !c.at_end() {
            return Err("expected a number before the unit");
        }
        let n = if negative {
            -(magnitude as i64)
        } else {
            magnitude as i64
        };
        match tokens.next() {
            Some(b"year" | b"years") => months += n * 12,
            Some(b"mon" | b"mons") => months += n,
            Some(b"day" | b"days") => days += n,
            _ => return Err("expected year(s), mon(s) or day(s) after a number"),
        }
    }
    let months = i32::try_from(months).map_err(|_| "months out of range")?;
    let days = i32::try_from(days).map_err(|_| "days out of range")?;
    let micros = i64::try_from(micros).map_err(|_| "time part out of range")?;
    Ok((months, days, micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_match_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 1, 1), 10_957);
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        // 1 BC (year 0) is a leap year in the proleptic calendar.
        assert_eq!(days_from_civil(0, 3, 1) - days_from_civil(0, 2, 28), 2);
        assert_eq!(days_from_civil(1, 1, 1), -719_162);
        // PostgreSQL's lowest date, 4714-11-24 BC (Gregorian), is Julian day 0.
        assert_eq!(days_from_civil(-4713, 11, 24), -2_440_588);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date(b"1970-01-01"), Ok(0));
        assert_eq!(parse_date(b"2024-02-29"), Ok(19_782));
        assert_eq!(
            parse_date(b"2023-02-29"),
            Err("day out of range for the month")
        );
        assert_eq!(
            parse_date(b"1900-02-29"),
            Err("day out of range for the month")
        );
        assert_eq!(parse_date(b"0001-12-31 BC"), Ok(-719_163));
        assert_eq!(parse_date(b"0001-01-01 BC"), Ok(-719_528));
        assert_eq!(parse_date(b"4714-11-24 BC"), Ok(-2_440_588));
        // Leap years BC are 1, 5, 9 ... BC (astronomical 0, -4, -8).
        assert!(parse_date(b"0005-02-29 BC").is_ok());
        assert!(parse_date(b"0004-02-29 BC").is_err());
        assert_eq!(parse_date(b"294276-12-31"), Ok(106_762_939));
        assert_eq!(parse_date(b"5874897-12-31"), Ok(2_145_042_905));
        assert_eq!(parse_date(b"infinity"), Ok(i32::MAX));
        assert_eq!(parse_date(b"-infinity"), Ok(i32::MIN));
        for bad in [
            &b"2024-1-01"[..],
            b"2024-13-01",
            b"2024-01-00",
            b"0000-01-01",
            b"2024-01-01x",
            b"",
        ] {
            assert!(
                parse_date(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn times() {
        assert_eq!(parse_time(b"00:00:00"), Ok(0));
        assert_eq!(parse_time(b"04:05:06"), Ok(14_706_000_000));
        assert_eq!(parse_time(b"04:05:06.5"), Ok(14_706_500_000));
        assert_eq!(parse_time(b"23:59:59.000001"), Ok(MICROS_PER_DAY - 999_999));
        assert_eq!(parse_time(b"23:59:59.999999"), Ok(MICROS_PER_DAY - 1));
        assert_eq!(parse_time(b"24:00:00"), Ok(MICROS_PER_DAY));
        for bad in [
            &b"24:00:01"[..],
            b"12:60:00",
            b"12:00",
            b"12:00:00.1234567",
            b"12:00:00.",
        ] {
            assert!(
                parse_time(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp(b"1970-01-01 00:00:00", false), Ok(0));
        assert_eq!(
            parse_timestamp(b"2024-02-29 12:34:56.789", false),
            Ok(19_782 * MICROS_PER_DAY + 45_296_789_000)
        );
        assert_eq!(
            parse_timestamp(b"1969-12-31 23:59:59.99", false),
            Ok(-10_000)
        );
        assert_eq!(
            parse_timestamp(b"0001-01-01 00:00:00 BC", false),
            Ok(-719_528 * MICROS_PER_DAY)
        );
        assert_eq!(parse_timestamp(b"infinity", false), Ok(i64::MAX));
        assert_eq!(parse_timestamp(b"-infinity", true), Ok(i64::MIN));
        // The last instant microseconds since 1970 can hold.
        assert_eq!(
            parse_timestamp(b"294247-01-10 04:00:54.775806", false),
            Ok(i64::MAX - 1)
        );
        // PostgreSQL goes up to 294276 AD, past what i64 microseconds since 1970 hold.
        assert!(parse_timestamp(b"294276-12-31 23:59:59.999999", false).is_err());
        assert!(parse_timestamp(b"2024-01-01 00:00:00+00", false).is_err());
    }

    #[test]
    fn timestamps_with_offsets_convert_to_utc() {
        let base = parse_timestamp(b"2024-06-01 12:00:00", false).unwrap();
        assert_eq!(parse_timestamp(b"2024-06-01 12:00:00+00", true), Ok(base));
        assert_eq!(
            parse_timestamp(b"2024-06-01 12:00:00+05:30", true),
            Ok(base - 19_800 * MICROS_PER_SECOND)
        );
        assert_eq!(
            parse_timestamp(b"2024-06-01 12:00:00-03:30:15", true),
            Ok(base + 12_615 * MICROS_PER_SECOND)
        );
        assert_eq!(
            parse_timestamp(b"0044-03-15 12:00:00.5+00 BC", true),
            Ok(days_from_civil(-43, 3, 15) * MICROS_PER_DAY + 43_200_500_000)
        );
        assert!(parse_timestamp(b"2024-06-01 12:00:00", true).is_err());
        assert!(parse_timestamp(b"2024-06-01 12:00:00+5", true).is_err());
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval(b"00:00:00"), Ok((0, 0, 0)));
        assert_eq!(
            parse_interval(b"1 year 2 mons 3 days 04:05:06.5"),
            Ok((14, 3, 14_706_500_000))
        );
        assert_eq!(
            parse_interval(b"-1 days +02:03:00"),
            Ok((0, -1, 7_380_000_000))
        );
        assert_eq!(parse_interval(b"-00:00:00.000001"), Ok((0, 0, -1)));
        assert_eq!(parse_interval(b"1 mon"), Ok((1, 0, 0)));
        assert_eq!(parse_interval(b"-3 years -1 mons"), Ok((-37, 0, 0)));
        assert_eq!(parse_interval(b"1 day -00:00:01"), Ok((0, 1, -1_000_000)));
        assert_eq!(parse_interval(b"838:59:59"), Ok((0, 0, 3_020_399_000_000)));
        // The extremes of the microsecond field.
        assert_eq!(
            parse_interval(b"-2562047788:00:54.775808"),
            Ok((0, 0, i64::MIN))
        );
        assert_eq!(
            parse_interval(b"2562047788:00:54.775807"),
            Ok((0, 0, i64::MAX))
        );
        assert_eq!(
            parse_interval(b"-178956970 years -8 mons -2147483648 days"),
            Ok((i32::MIN, i32::MIN, 0))
        );
        assert_eq!(
            parse_interval(b"infinity"),
            Ok((i32::MAX, i32::MAX, i64::MAX))
        );
        for bad in [
            &b""[..],
            b"1",
            b"1 week",
            b"1 day 2",
            b"00:00:00 1 day",
            b"2562047788:00:54.775808",
            b"178956971 years",
            b"@ 1 day",
        ] {
            assert!(
                parse_interval(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
