//! RFC 3339 UTC times for the API: plant seconds ↔ `2026-12-01T04:00:00Z`.
//!
//! The API shows plant time as UTC: `epoch_unix_s` (the wall-clock time at which plant time was
//! zero) plus plant seconds. In production the plant clock runs at real speed, so these are the
//! real UTC times; against a simulated plant at N× they run N times faster.

/// Days since 1970-01-01 → (year, month, day) (proleptic Gregorian, H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Format Unix seconds as RFC 3339 UTC with millisecond precision.
pub fn format_unix(unix_s: f64) -> String {
    let ms = (unix_s * 1000.0).round() as i64;
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Parse an RFC 3339 time (`Z` or `±hh:mm` offset, optional fraction) to Unix seconds.
pub fn parse_rfc3339(s: &str) -> Result<f64, String> {
    let bad = || format!("`{s}` is not an RFC 3339 time such as 2026-12-01T04:00:00Z");
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let t = s.get(r).ok_or_else(bad)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse::<i64>().map_err(|_| bad())
    };
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return Err(bad());
    }
    let mut i = 19;
    let mut frac = 0.0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
        frac = format!("0.{}", &s[start..i]).parse::<f64>().map_err(|_| bad())?;
    }
    let offset_s = match b.get(i) {
        Some(b'Z') | Some(b'z') if i + 1 == b.len() => 0,
        Some(&c @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
                return Err(bad());
            }
            let o = oh * 3600 + om * 60;
            if c == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    if civil_from_days(days) != (y, mo as u32, d as u32) {
        return Err(bad());
    }
    Ok((days * 86_400 + h * 3600 + mi * 60 + se - offset_s) as f64 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        assert_eq!(format_unix(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_unix(1_796_097_600.0), "2026-12-01T04:00:00.000Z");
        assert_eq!(parse_rfc3339("2026-12-01T04:00:00Z").unwrap(), 1_796_097_600.0);
        assert_eq!(parse_rfc3339("2026-12-01T05:00:00+01:00").unwrap(), 1_796_097_600.0);
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00.250Z").unwrap(), 1_709_164_800.25);
        for t in [
            "2026-02-30T00:00:00Z",
            "2026-12-01 04:00",
            "yesterday",
            "2026-12-01T04:00:00",
            "2026-13-01T00:00:00Z",
        ] {
            assert!(parse_rfc3339(t).is_err(), "{t}");
        }
        for x in [0.0, 1e9, 1.7e9 + 0.123, 4e9] {
            assert!((parse_rfc3339(&format_unix(x)).unwrap() - x).abs() < 1e-3);
        }
    }
}
