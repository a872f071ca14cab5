//! EnergyPlus weather files: the EPW reader, then period finding and sampling on what it accepts.
//!
//! The reader wants a full year (8,760 hourly rows), far more than a fuzz input should hold, so
//! the input is a header and a few data rows, expanded to a year: the input's rows come first,
//! exactly as written (their dates included: duplicates, gaps, Feb 29 and bad dates all reach
//! the reader), then the rest of the year is filled by repeating the input's rows with the
//! month, day and hour fields rewritten to the hour each one stands for.
#![no_main]

use coolplane_core::weather::{HeatBasis, PeriodKind, WeatherSeries, HOURS_PER_YEAR};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const DAYS_IN_MONTH: [usize; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// The reader uses the first 10 fields of a data row; the filled rows keep only those.
const FIELDS_USED: usize = 10;

/// "month,day,hour" (hour 1-24) of every hour of the 365-day year, made once per process.
fn dates() -> &'static [String] {
    static DATES: OnceLock<Vec<String>> = OnceLock::new();
    DATES.get_or_init(|| {
        let mut out = Vec::with_capacity(HOURS_PER_YEAR);
        for (m, &days) in DAYS_IN_MONTH.iter().enumerate() {
            for d in 1..=days {
                for h in 1..=24 {
                    out.push(format!("{},{d},{h}", m + 1));
                }
            }
        }
        assert_eq!(out.len(), HOURS_PER_YEAR);
        out
    })
}

/// The input text expanded to a year of rows (see the module comment).
fn expand(text: &str) -> String {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.by_ref().take(8).collect();
    let rows: Vec<&str> = lines.collect();
    let mut out = String::with_capacity(text.len() + 64 * HOURS_PER_YEAR);
    for line in header.iter().chain(&rows) {
        out.push_str(line);
        out.push('\n');
    }
    // Each template row as (year field, the fields after the hour up to the last one used); a
    // row too short to carry a date is repeated as it is.
    let templates: Vec<Result<(&str, &str), &str>> = rows
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut cuts = l.match_indices(',').map(|(i, _)| i);
            match (cuts.next(), cuts.nth(2)) {
                (Some(year_end), Some(hour_end)) => {
                    let end = cuts.nth(FIELDS_USED - 5).unwrap_or(l.len());
                    Ok((&l[..year_end], &l[hour_end..end]))
                }
                _ => Err(*l),
            }
        })
        .collect();
    if templates.is_empty() {
        return out;
    }
    let dates = dates();
    for hour in templates.len()..HOURS_PER_YEAR {
        match templates[hour % templates.len()] {
            Ok((year, rest)) => {
                out.push_str(year);
                out.push(',');
                out.push_str(&dates[hour]);
                out.push_str(rest);
            }
            Err(line) => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(w) = WeatherSeries::from_epw_str("fuzz.epw", &expand(text)) {
        for kind in [PeriodKind::PeakHeatWeek, PeriodKind::TypicalWeek, PeriodKind::ColdWeek] {
            let p = w.find_period(kind, HeatBasis::DryBulb);
            let s = w.sample(p.start_s);
            assert!(s.dry_bulb_c.is_finite(), "non-finite dry bulb from an accepted file");
        }
    }
});
