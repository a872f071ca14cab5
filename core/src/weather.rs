//! Site weather for the cooling plant: psychrometrics, an EnergyPlus weather
//! file (EPW) reader, an embedded synthetic climate and a design-period finder.
//!
//! The heat-rejection side of a liquid-cooled data centre (dry coolers,
//! adiabatic coolers, cooling towers) is limited by the outdoor dry-bulb or
//! wet-bulb temperature. This module turns a typical-year weather record into
//! a [`WeatherSeries`] of 8,760 hourly values that can be sampled at any
//! simulated time with [`WeatherSeries::sample`], and picks the weeks worth
//! simulating with [`WeatherSeries::find_period`].
//!
//! * Psychrometrics follow the 2017 ASHRAE Handbook - Fundamentals, chapter 1
//!   (SI): the Hyland-Wexler saturation pressure over ice (eq. 5) and over
//!   liquid water (eq. 6), the humidity ratio (eq. 20) and the thermodynamic
//!   wet-bulb equations above (eq. 33) and below (eq. 35) freezing. Vapour
//!   pressure is `p_ws(t_dp)` with the ice formula below 0 °C, as in the
//!   Handbook and EnergyPlus.
//! * [`WeatherSeries::from_epw_str`] parses the text of an `.epw` file;
//!   [`WeatherSeries::synthetic`] builds a year from [`SyntheticClimate`]
//!   sinusoids plus seeded, smooth noise so nothing needs a file.
//!
//! What this module never does: it performs no IO (callers read files and
//! pass their contents as `&str`), never reads a clock, and never touches a
//! global or OS random-number generator (the synthetic climate uses its own
//! seeded SplitMix64). Every result is a pure function of its arguments.
//!
//! Time convention: `t_s` is seconds since 1 January 00:00 of a 365-day
//! typical year. EPW rows are hour-ending: the row for hour `h` (1-24) of day
//! `d` is the value at `d * 86400 + h * 3600` seconds, so the first row of the
//! year is the value at `t = 3600 s` and the last row (31 December hour 24)
//! is the value at `t = 0` of the wrapped year.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Hours in the 365-day typical year.
pub const HOURS_PER_YEAR: usize = DAYS_PER_YEAR * HOURS_PER_DAY;

/// Seconds in one hour.
pub const SECONDS_PER_HOUR: f64 = 3_600.0;

/// Seconds in one day.
pub const SECONDS_PER_DAY: f64 = 86_400.0;

/// Seconds in the 365-day typical year; [`WeatherSeries::sample`] wraps time
/// modulo this.
pub const SECONDS_PER_YEAR: f64 = DAYS_PER_YEAR as f64 * SECONDS_PER_DAY;

/// Standard atmospheric pressure at sea level, Pa.
pub const STANDARD_PRESSURE_PA: f64 = 101_325.0;

const DAYS_PER_YEAR: usize = 365;
const DAYS_PER_WEEK: usize = 7;
const HOURS_PER_DAY: usize = 24;
const ZERO_C_IN_K: f64 = 273.15;
/// Ratio of the molecular masses of water and dry air (ASHRAE 2017 eq. 20).
const MOLAR_MASS_RATIO: f64 = 0.621_945;
const DAYS_IN_MONTH: [u32; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

// ---------------------------------------------------------------------------
// Psychrometrics
// ---------------------------------------------------------------------------

/// Saturation vapour pressure in Pa at `t_c` °C: over liquid water at and
/// above 0 °C, over ice below 0 °C.
///
/// Hyland-Wexler formulation as given in the 2017 ASHRAE Handbook -
/// Fundamentals, ch. 1, eq. 5 (ice, -100 to 0 °C) and eq. 6 (water, 0 to
/// 200 °C). ASHRAE states the formulas agree with its Table 3 to within
/// 300 ppm.
pub fn saturation_vapour_pressure_pa(t_c: f64) -> f64 {
    let t = t_c + ZERO_C_IN_K;
    let ln_p = if t_c >= 0.0 {
        -5.800_220_6e3 / t + 1.391_499_3 - 4.864_023_9e-2 * t + 4.176_476_8e-5 * t * t - 1.445_209_3e-8 * t * t * t
            + 6.545_967_3 * t.ln()
    } else {
        -5.674_535_9e3 / t + 6.392_524_7 - 9.677_843_0e-3 * t + 6.221_570_1e-7 * t * t + 2.074_782_5e-9 * t * t * t
            - 9.484_024_0e-13 * t * t * t * t
            + 4.163_501_9 * t.ln()
    };
    ln_p.exp()
}

/// Humidity ratio W (kg water per kg dry air) of moist air whose water-vapour
/// partial pressure is `vapour_pressure_pa` at total pressure `pressure_pa`
/// (2017 ASHRAE Handbook - Fundamentals, ch. 1, eq. 20:
/// `W = 0.621945 p_w / (p - p_w)`). Meaningful for `0 <= p_w < p`.
pub fn humidity_ratio(vapour_pressure_pa: f64, pressure_pa: f64) -> f64 {
    MOLAR_MASS_RATIO * vapour_pressure_pa / (pressure_pa - vapour_pressure_pa)
}

/// Water-vapour partial pressure in Pa of air with humidity ratio `w` at
/// total pressure `pressure_pa` (inverse of [`humidity_ratio`]).
pub fn vapour_pressure_from_humidity_ratio_pa(w: f64, pressure_pa: f64) -> f64 {
    pressure_pa * w / (MOLAR_MASS_RATIO + w)
}

/// Humidity ratio of air at `dry_bulb_c` whose thermodynamic wet-bulb
/// temperature is `wet_bulb_c`, at `pressure_pa`.
///
/// 2017 ASHRAE Handbook - Fundamentals, ch. 1, eq. 33 when the wet bulb is
/// above 0 °C (wetted with water) and eq. 35 when it is at or below 0 °C
/// (iced bulb), with the saturation humidity ratio at the wet bulb taken over
/// water or ice accordingly.
pub fn humidity_ratio_from_wet_bulb(dry_bulb_c: f64, wet_bulb_c: f64, pressure_pa: f64) -> f64 {
    let t = dry_bulb_c;
    let tw = wet_bulb_c;
    let ws = humidity_ratio(saturation_vapour_pressure_pa(tw), pressure_pa);
    if tw > 0.0 {
        ((2501.0 - 2.326 * tw) * ws - 1.006 * (t - tw)) / (2501.0 + 1.86 * t - 4.186 * tw)
    } else {
        ((2830.0 - 0.24 * tw) * ws - 1.006 * (t - tw)) / (2830.0 + 1.86 * t - 2.1 * tw)
    }
}

/// Thermodynamic wet-bulb temperature in °C of air at `dry_bulb_c` with dew
/// point `dew_point_c` at total pressure `pressure_pa`.
///
/// Solves the ASHRAE psychrometric wet-bulb equation
/// ([`humidity_ratio_from_wet_bulb`]) for the wet bulb whose humidity ratio
/// equals that of the air, `W = W(p_ws(t_dp), p)`, by bisection between the
/// dew point and the dry bulb (the equation gives `W <=` the air's at the dew
/// point and the saturation value at the dry bulb, so the root is bracketed).
/// The result therefore always satisfies `dew_point <= wet_bulb <= dry_bulb`.
/// A dew point above the dry bulb is treated as saturated air (dew point =
/// dry bulb). Below 0 °C the iced-bulb equation and ice saturation pressure
/// are used. Converges to 1e-6 K in at most ~30 iterations; non-finite input
/// gives NaN.
pub fn wet_bulb_c(dry_bulb_c: f64, dew_point_c: f64, pressure_pa: f64) -> f64 {
    if !(dry_bulb_c.is_finite() && dew_point_c.is_finite() && pressure_pa.is_finite()) {
        return f64::NAN;
    }
    let dew = dew_point_c.min(dry_bulb_c);
    let w = humidity_ratio(saturation_vapour_pressure_pa(dew), pressure_pa);
    let (mut lo, mut hi) = (dew, dry_bulb_c);
    for _ in 0..64 {
        if hi - lo <= 1e-6 {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if humidity_ratio_from_wet_bulb(dry_bulb_c, mid, pressure_pa) > w {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Dew point in °C at which the saturation vapour pressure (over water at or
/// above 0 °C, over ice below) equals `vapour_pressure_pa`: the inverse of
/// [`saturation_vapour_pressure_pa`], found by bisection on -100..200 °C to
/// 1e-9 K. Returns NaN for a non-positive or non-finite pressure.
pub fn dew_point_from_vapour_pressure_c(vapour_pressure_pa: f64) -> f64 {
    if !(vapour_pressure_pa.is_finite() && vapour_pressure_pa > 0.0) {
        return f64::NAN;
    }
    let target = vapour_pressure_pa.ln();
    let (mut lo, mut hi) = (-100.0_f64, 200.0_f64);
    for _ in 0..100 {
        if hi - lo <= 1e-9 {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if saturation_vapour_pressure_pa(mid).ln() > target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Dew point in °C of air at `dry_bulb_c` with relative humidity `rh_pct`
/// (percent, 0-100): `p_w = rh / 100 * p_ws(t)`, then
/// [`dew_point_from_vapour_pressure_c`]. `rh_pct` is clamped to 0.001-100 %.
pub fn dew_point_from_rh_c(dry_bulb_c: f64, rh_pct: f64) -> f64 {
    let rh = rh_pct.clamp(1e-3, 100.0) / 100.0;
    if rh >= 1.0 {
        return dry_bulb_c;
    }
    dew_point_from_vapour_pressure_c(rh * saturation_vapour_pressure_pa(dry_bulb_c)).min(dry_bulb_c)
}

/// Relative humidity in percent of air at `dry_bulb_c` with dew point
/// `dew_point_c`: `100 p_ws(t_dp) / p_ws(t)` (ASHRAE 2017 ch. 1 eq. 12 with
/// the same saturation formulas as [`saturation_vapour_pressure_pa`]).
pub fn relative_humidity_pct(dry_bulb_c: f64, dew_point_c: f64) -> f64 {
    100.0 * saturation_vapour_pressure_pa(dew_point_c.min(dry_bulb_c)) / saturation_vapour_pressure_pa(dry_bulb_c)
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// What went wrong reading weather data or parsing a weather-related name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeatherError {
    /// The text ends before the 8 EPW header lines are complete.
    #[error("EPW header is incomplete: expected 8 header lines, the text has only {found} lines")]
    TruncatedHeader {
        /// Number of lines present.
        found: usize,
    },
    /// The first line is not an EPW `LOCATION` header.
    #[error("line 1: expected the EPW LOCATION header, found {text:?}")]
    MissingLocation {
        /// The start of the offending line.
        text: String,
    },
    /// A line has fewer comma-separated fields than needed.
    #[error("line {line}: expected at least {expected} comma-separated fields, found {found}")]
    TooFewFields {
        /// 1-based line number in the text.
        line: usize,
        /// Fields required.
        expected: usize,
        /// Fields present.
        found: usize,
    },
    /// A field that must be a number is not one.
    #[error("line {line}, column `{column}`: cannot parse {text:?} as a number")]
    BadNumber {
        /// 1-based line number in the text.
        line: usize,
        /// Name of the column (EPW field).
        column: &'static str,
        /// The offending field text.
        text: String,
    },
    /// A number lies outside the range valid for its column.
    #[error("line {line}, column `{column}`: value {text:?} is outside the valid range {valid}")]
    OutOfRange {
        /// 1-based line number in the text.
        line: usize,
        /// Name of the column (EPW field).
        column: &'static str,
        /// The offending field text.
        text: String,
        /// The valid range, in words.
        valid: &'static str,
    },
    /// Two rows carry the same month, day and hour.
    #[error("line {line}: duplicate row for {month}/{day} hour {hour} (first seen on line {first_line})")]
    DuplicateHour {
        /// 1-based line number of the repeated row.
        line: usize,
        /// 1-based line number of the first row for that hour.
        first_line: usize,
        /// Month (1-12).
        month: u32,
        /// Day of month.
        day: u32,
        /// Hour (1-24, hour-ending).
        hour: u32,
    },
    /// Fewer than 8,760 distinct hourly rows (Feb 29 excluded).
    #[error(
        "expected {expected} hourly rows (Feb 29 excluded), found {found}; \
         first missing hour is {month}/{day} hour {hour}"
    )]
    TooFewRows {
        /// Rows required (8,760).
        expected: usize,
        /// Distinct hourly rows found.
        found: usize,
        /// Month of the first missing hour.
        month: u32,
        /// Day of the first missing hour.
        day: u32,
        /// Hour (1-24) of the first missing hour.
        hour: u32,
    },
    /// Every value of a column is a missing-value code, so nothing can be
    /// interpolated.
    #[error("column `{column}`: every value is missing, nothing to interpolate from")]
    AllMissing {
        /// Name of the column (EPW field).
        column: &'static str,
    },
    /// Unknown [`PeriodKind`] name.
    #[error("unknown period kind {value:?}; expected one of: peak-heat-week, typical-week, cold-week, year")]
    UnknownPeriodKind {
        /// The rejected text.
        value: String,
    },
    /// Unknown [`HeatBasis`] name.
    #[error("unknown heat basis {value:?}; expected one of: dry-bulb, wet-bulb")]
    UnknownHeatBasis {
        /// The rejected text.
        value: String,
    },
    /// A [`SyntheticClimate`] field has an unusable value.
    #[error("synthetic climate field `{field}` = {value}: {reason}")]
    InvalidClimate {
        /// Name of the field.
        field: &'static str,
        /// The rejected value.
        value: f64,
        /// Why it was rejected.
        reason: &'static str,
    },
}

// ---------------------------------------------------------------------------
// Samples, location, series
// ---------------------------------------------------------------------------

/// Outdoor air state at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WeatherSample {
    /// Dry-bulb temperature, °C.
    pub dry_bulb_c: f64,
    /// Thermodynamic wet-bulb temperature, °C.
    pub wet_bulb_c: f64,
    /// Dew-point temperature, °C (never above the dry bulb).
    pub dew_point_c: f64,
    /// Relative humidity, percent.
    pub rh_pct: f64,
    /// Station (not sea-level) atmospheric pressure, Pa.
    pub pressure_pa: f64,
}

/// The site described by an EPW `LOCATION` header line:
/// `LOCATION,city,state,country,source,WMO,latitude,longitude,time zone,elevation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Location {
    /// City or station name.
    pub city: String,
    /// State or province ("-" when the file has none).
    pub state_province: String,
    /// Country code, e.g. "SGP".
    pub country: String,
    /// WMO station number as written in the file.
    pub wmo_station: String,
    /// Latitude, degrees (north positive).
    pub latitude_deg: f64,
    /// Longitude, degrees (east positive).
    pub longitude_deg: f64,
    /// Time zone, hours relative to UTC.
    pub time_zone_h: f64,
    /// Elevation above sea level, m.
    pub elevation_m: f64,
}

/// Which outdoor temperature a site's heat rejection depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeatBasis {
    /// Dry coolers: sensible heat rejection limited by the dry bulb.
    DryBulb,
    /// Cooling towers and adiabatic coolers: limited by the wet bulb.
    WetBulb,
}

impl HeatBasis {
    /// Every basis, in declaration order.
    pub const ALL: [HeatBasis; 2] = [HeatBasis::DryBulb, HeatBasis::WetBulb];

    /// The kebab-case name used by [`FromStr`], [`fmt::Display`] and serde.
    pub fn as_str(self) -> &'static str {
        match self {
            HeatBasis::DryBulb => "dry-bulb",
            HeatBasis::WetBulb => "wet-bulb",
        }
    }

    /// The temperature of `sample` this basis refers to, °C.
    pub fn temperature_c(self, sample: &WeatherSample) -> f64 {
        match self {
            HeatBasis::DryBulb => sample.dry_bulb_c,
            HeatBasis::WetBulb => sample.wet_bulb_c,
        }
    }
}

impl fmt::Display for HeatBasis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HeatBasis {
    type Err = WeatherError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HeatBasis::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| WeatherError::UnknownHeatBasis { value: s.to_owned() })
    }
}

/// A year of hourly outdoor conditions (365 days, 8,760 hour-ending rows)
/// with wet bulb precomputed, sampled by linear interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct WeatherSeries {
    /// Human-readable name (file or climate description).
    pub name: String,
    /// Site, when the source names one (EPW files do; synthetic climates
    /// don't).
    pub location: Option<Location>,
    /// Exactly [`HOURS_PER_YEAR`] rows; row `i` is the value at
    /// `(i + 1) * 3600` s.
    hours: Vec<WeatherSample>,
}

impl WeatherSeries {
    /// The 8,760 hourly rows in hour-ending order: element `i` is the state
    /// at `t = (i + 1) * 3600` s (element 8,759 is also `t = 0`).
    pub fn hourly(&self) -> &[WeatherSample] {
        &self.hours
    }

    /// Outdoor state at `t_s` seconds since 1 January 00:00, linearly
    /// interpolated between the hour-ending rows. Time wraps modulo
    /// [`SECONDS_PER_YEAR`] (negative times count back from the year end),
    /// so between 31 December hour 24 (= `t` 0) and 1 January hour 1
    /// (`t` = 3600 s) it interpolates across the wrap. Allocation-free and
    /// O(1); a NaN or infinite `t_s` gives NaN fields.
    pub fn sample(&self, t_s: f64) -> WeatherSample {
        let rows = self.hours.as_slice();
        let n = rows.len();
        let pos_h = t_s.rem_euclid(SECONDS_PER_YEAR) / SECONDS_PER_HOUR; // 0..=8760
        let whole = pos_h.floor();
        let frac = pos_h - whole;
        // `as` saturates (NaN -> 0); `min` guards rounding up to exactly 8760.
        let k = (whole as usize).min(n);
        // The value at `k` whole hours is row k-1; hour 0 is the last row.
        let a = &rows[(k + n - 1) % n];
        let b = &rows[k % n];
        let lerp = |x: f64, y: f64| x + (y - x) * frac;
        WeatherSample {
            dry_bulb_c: lerp(a.dry_bulb_c, b.dry_bulb_c),
            wet_bulb_c: lerp(a.wet_bulb_c, b.wet_bulb_c),
            dew_point_c: lerp(a.dew_point_c, b.dew_point_c),
            rh_pct: lerp(a.rh_pct, b.rh_pct),
            pressure_pa: lerp(a.pressure_pa, b.pressure_pa),
        }
    }

    /// Parse the text of an EnergyPlus weather file (`.epw`).
    ///
    /// Layout: 8 header lines (the first must be `LOCATION`, parsed into
    /// [`Location`]), then one row per hour. Only these 0-based columns are
    /// read: 1 month, 2 day, 3 hour (1-24, hour-ending), 6 dry-bulb °C,
    /// 7 dew point °C, 8 relative humidity %, 9 station pressure Pa; the year
    /// (column 0) is ignored because typical-year files splice months from
    /// different years, and the remaining columns are not checked (a row
    /// needs at least 10 fields). Rows are placed by their month, day and
    /// hour, so they may come in any order; blank lines are skipped; `\r\n`
    /// line ends are accepted.
    ///
    /// * Feb 29 rows, if present, are dropped so the year has 8,760 hours.
    /// * Missing-value codes (dry bulb or dew point `>= 99.9`, RH `>= 999`,
    ///   pressure `>= 999999`, or an empty field) are filled by linear
    ///   interpolation between the nearest valid values before and after,
    ///   wrapping around the year end.
    /// * Other values must lie in the EnergyPlus valid ranges (temperatures
    ///   -70..70 °C, RH 0..110 %, pressure 31..120 kPa).
    /// * A dew point above the dry bulb is lowered to the dry bulb.
    ///
    /// Errors name the 1-based line, the column and the offending text; fewer
    /// than 8,760 distinct hours gives [`WeatherError::TooFewRows`] and a
    /// repeated hour gives [`WeatherError::DuplicateHour`].
    pub fn from_epw_str(name: &str, text: &str) -> Result<WeatherSeries, WeatherError> {
        let mut lines = text.lines().enumerate();
        let mut location = None;
        for header_index in 0..8 {
            let Some((_, line)) = lines.next() else {
                return Err(WeatherError::TruncatedHeader { found: header_index });
            };
            if header_index == 0 {
                location = Some(parse_location(line)?);
            }
        }

        let mut slots: Vec<Option<EpwRow>> = vec![None; HOURS_PER_YEAR];
        let mut found = 0usize;
        for (index, line) in lines {
            let line_no = index + 1;
            if line.trim().is_empty() {
                continue;
            }
            let Some(row) = parse_epw_row(line, line_no)? else {
                continue; // Feb 29
            };
            let slot = &mut slots[row.hour_of_year];
            if let Some(first) = slot {
                let (month, day, hour) = calendar_of_hour(row.hour_of_year);
                return Err(WeatherError::DuplicateHour {
                    line: line_no,
                    first_line: first.line,
                    month,
                    day,
                    hour,
                });
            }
            *slot = Some(row);
            found += 1;
        }
        if found < HOURS_PER_YEAR {
            let missing = slots.iter().position(Option::is_none).unwrap_or(0);
            let (month, day, hour) = calendar_of_hour(missing);
            return Err(WeatherError::TooFewRows {
                expected: HOURS_PER_YEAR,
                found,
                month,
                day,
                hour,
            });
        }

        let rows: Vec<EpwRow> = slots.into_iter().flatten().collect();
        let column = |pick: fn(&EpwRow) -> Option<f64>| -> Vec<Option<f64>> { rows.iter().map(pick).collect() };
        let dry = fill_missing(&column(|r| r.dry_bulb_c), COL_DRY_BULB)?;
        let dew = fill_missing(&column(|r| r.dew_point_c), COL_DEW_POINT)?;
        let rh = fill_missing(&column(|r| r.rh_pct), COL_RH)?;
        let pressure = fill_missing(&column(|r| r.pressure_pa), COL_PRESSURE)?;

        let hours = (0..HOURS_PER_YEAR)
            .map(|i| {
                let dew_point_c = dew[i].min(dry[i]);
                WeatherSample {
                    dry_bulb_c: dry[i],
                    wet_bulb_c: wet_bulb_c(dry[i], dew_point_c, pressure[i]),
                    dew_point_c,
                    rh_pct: rh[i],
                    pressure_pa: pressure[i],
                }
            })
            .collect();
        Ok(WeatherSeries {
            name: name.to_owned(),
            location,
            hours,
        })
    }

    /// A synthetic typical year from `climate`, deterministic for a given
    /// `seed` (same seed, same series; different seeds, different noise).
    ///
    /// For the hour-ending row at time `t` (days `d = t / 86400`, local hour
    /// `h`):
    ///
    /// ```text
    /// base     = annual_mean + annual_amplitude * cos(2π (d - (hottest_day - 0.5)) / 365) + n_T(t)
    /// dry_bulb = base + diurnal_amplitude * cos(2π (h - 15) / 24)
    /// dew      = min(dry_bulb, base - mean_dew_depression + n_D(t))
    /// ```
    ///
    /// so the seasonal peak is at noon of day `hottest_day_of_year`
    /// (1 = 1 January), the daily maximum at 15:00 and the minimum at 03:00,
    /// and the dew point follows the daily-mean temperature (the depression
    /// is small at dawn and large in the afternoon; its annual mean is
    /// about `mean_dew_depression_k`, a little more where clipped). `n_T` and
    /// `n_D` are independent smooth AR(1) noises (hour-to-hour
    /// autocorrelation 0.97, i.e. weather anomalies lasting a day or two)
    /// with standard deviations `noise_k` and `noise_k / 2`, made cyclic so
    /// the year wraps without a jump. Pressure is constant; relative
    /// humidity and wet bulb follow from the psychrometric functions.
    ///
    /// Does not fail: non-finite fields fall back to the
    /// [`SyntheticClimate::default`] value, `noise_k` is taken as its
    /// magnitude and the pressure is clamped to 31-120 kPa. Use
    /// [`SyntheticClimate::validate`] to reject such input instead.
    pub fn synthetic(climate: &SyntheticClimate, seed: u64) -> WeatherSeries {
        let c = climate.sanitised();
        let mut rng = SplitMix64::new(seed);
        let temp_noise = cyclic_ar1(&mut rng, HOURS_PER_YEAR, NOISE_AUTOCORRELATION, c.noise_k);
        let dew_noise = cyclic_ar1(&mut rng, HOURS_PER_YEAR, NOISE_AUTOCORRELATION, 0.5 * c.noise_k);
        let tau = std::f64::consts::TAU;
        let peak_day = c.hottest_day_of_year - 0.5;
        let hours = (0..HOURS_PER_YEAR)
            .map(|i| {
                let t_h = (i + 1) as f64;
                let day = t_h / 24.0;
                let hour_of_day = t_h % 24.0;
                let seasonal = c.annual_amplitude_k * (tau * (day - peak_day) / DAYS_PER_YEAR as f64).cos();
                let diurnal = c.diurnal_amplitude_k * (tau * (hour_of_day - 15.0) / 24.0).cos();
                let base = c.annual_mean_c + seasonal + temp_noise[i];
                let dry_bulb_c = base + diurnal;
                let dew_point_c = (base - c.mean_dew_depression_k + dew_noise[i]).min(dry_bulb_c);
                WeatherSample {
                    dry_bulb_c,
                    wet_bulb_c: wet_bulb_c(dry_bulb_c, dew_point_c, c.pressure_pa),
                    dew_point_c,
                    rh_pct: relative_humidity_pct(dry_bulb_c, dew_point_c),
                    pressure_pa: c.pressure_pa,
                }
            })
            .collect();
        WeatherSeries {
            name: format!("synthetic (seed {seed})"),
            location: None,
            hours,
        }
    }

    /// The period of `kind` for a site whose heat rejection follows `basis`.
    ///
    /// Weeks are 7 whole days starting at midnight of day `s`
    /// (`s` = 0..=358, so a week never wraps past 31 December); a week's
    /// temperature is the mean of the basis temperature over its 168
    /// hour-ending rows (`24 s + 1` h to `24 (s + 7)` h).
    ///
    /// * [`PeriodKind::PeakHeatWeek`]: the week with the highest mean.
    /// * [`PeriodKind::ColdWeek`]: the week with the lowest mean.
    /// * [`PeriodKind::TypicalWeek`]: the week minimising
    ///   `((m_w - m_a) / σ_m)² + ((r_w - r_a) / σ_r)²`, where `m_w` is the
    ///   week's mean, `r_w` the week's mean daily range (daily max minus min
    ///   of the basis temperature), `m_a` and `r_a` the annual mean and the
    ///   annual mean daily range, and `σ_m`, `σ_r` the standard deviations of
    ///   `m_w` and `r_w` over all candidate weeks (a term whose σ is zero is
    ///   left out). This is the week closest to the annual average in both
    ///   level and diurnal swing, in the spirit of the EPW "week nearest
    ///   average temperature".
    /// * [`PeriodKind::Year`]: `start_s` 0, 365 days.
    ///
    /// Ties go to the earliest week.
    pub fn find_period(&self, kind: PeriodKind, basis: HeatBasis) -> Period {
        if kind == PeriodKind::Year {
            return Period {
                kind,
                start_s: 0.0,
                duration_s: SECONDS_PER_YEAR,
            };
        }
        let weeks = self.week_stats(basis);
        let start_day = match kind {
            PeriodKind::PeakHeatWeek => argbest(&weeks, |w| w.mean, |a, b| a > b),
            PeriodKind::ColdWeek => argbest(&weeks, |w| w.mean, |a, b| a < b),
            PeriodKind::TypicalWeek => {
                let (annual_mean, annual_range) = self.annual_stats(basis);
                let sd_mean = std_dev(weeks.iter().map(|w| w.mean));
                let sd_range = std_dev(weeks.iter().map(|w| w.mean_daily_range));
                let term = |x: f64, target: f64, sd: f64| {
                    if sd > 1e-12 {
                        ((x - target) / sd).powi(2)
                    } else {
                        0.0
                    }
                };
                argbest(
                    &weeks,
                    |w| term(w.mean, annual_mean, sd_mean) + term(w.mean_daily_range, annual_range, sd_range),
                    |a, b| a < b,
                )
            }
            PeriodKind::Year => 0,
        };
        Period {
            kind,
            start_s: start_day as f64 * SECONDS_PER_DAY,
            duration_s: DAYS_PER_WEEK as f64 * SECONDS_PER_DAY,
        }
    }

    /// Per-day (mean, max - min) of the basis temperature.
    fn daily_stats(&self, basis: HeatBasis) -> Vec<(f64, f64)> {
        self.hours
            .chunks_exact(HOURS_PER_DAY)
            .map(|day| {
                let (mut sum, mut lo, mut hi) = (0.0, f64::INFINITY, f64::NEG_INFINITY);
                for s in day {
                    let t = basis.temperature_c(s);
                    sum += t;
                    lo = lo.min(t);
                    hi = hi.max(t);
                }
                (sum / HOURS_PER_DAY as f64, hi - lo)
            })
            .collect()
    }

    /// Annual mean of the basis temperature and annual mean daily range.
    fn annual_stats(&self, basis: HeatBasis) -> (f64, f64) {
        let days = self.daily_stats(basis);
        let n = days.len() as f64;
        let mean = days.iter().map(|d| d.0).sum::<f64>() / n;
        let range = days.iter().map(|d| d.1).sum::<f64>() / n;
        (mean, range)
    }

    /// Statistics of every candidate week, indexed by start day.
    fn week_stats(&self, basis: HeatBasis) -> Vec<WeekStats> {
        let days = self.daily_stats(basis);
        days.windows(DAYS_PER_WEEK)
            .map(|w| WeekStats {
                mean: w.iter().map(|d| d.0).sum::<f64>() / DAYS_PER_WEEK as f64,
                mean_daily_range: w.iter().map(|d| d.1).sum::<f64>() / DAYS_PER_WEEK as f64,
            })
            .collect()
    }
}

struct WeekStats {
    mean: f64,
    mean_daily_range: f64,
}

/// Index of the first element whose key is best under `better(new, best)`.
fn argbest<T>(items: &[T], key: impl Fn(&T) -> f64, better: impl Fn(f64, f64) -> bool) -> usize {
    let mut best = 0;
    let mut best_key = f64::NAN;
    for (i, item) in items.iter().enumerate() {
        let k = key(item);
        if best_key.is_nan() || better(k, best_key) {
            best = i;
            best_key = k;
        }
    }
    best
}

/// Population standard deviation.
fn std_dev(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let (n, sum) = values.clone().fold((0usize, 0.0), |(n, s), v| (n + 1, s + v));
    if n == 0 {
        return 0.0;
    }
    let mean = sum / n as f64;
    (values.map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64).sqrt()
}

// ---------------------------------------------------------------------------
// Periods
// ---------------------------------------------------------------------------

/// Which stretch of the year to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeriodKind {
    /// The 7-day week with the highest mean basis temperature
    /// (`peak-heat-week`).
    PeakHeatWeek,
    /// The 7-day week closest to the annual mean in level and daily range
    /// (`typical-week`); see [`WeatherSeries::find_period`] for the rule.
    TypicalWeek,
    /// The 7-day week with the lowest mean basis temperature (`cold-week`).
    ColdWeek,
    /// The whole 365-day year (`year`).
    Year,
}

impl PeriodKind {
    /// Every kind, in declaration order.
    pub const ALL: [PeriodKind; 4] = [
        PeriodKind::PeakHeatWeek,
        PeriodKind::TypicalWeek,
        PeriodKind::ColdWeek,
        PeriodKind::Year,
    ];

    /// The kebab-case name used by [`FromStr`], [`fmt::Display`] and serde.
    pub fn as_str(self) -> &'static str {
        match self {
            PeriodKind::PeakHeatWeek => "peak-heat-week",
            PeriodKind::TypicalWeek => "typical-week",
            PeriodKind::ColdWeek => "cold-week",
            PeriodKind::Year => "year",
        }
    }
}

impl fmt::Display for PeriodKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PeriodKind {
    type Err = WeatherError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PeriodKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| WeatherError::UnknownPeriodKind { value: s.to_owned() })
    }
}

/// A stretch of the typical year chosen by [`WeatherSeries::find_period`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Period {
    /// What the period was chosen as.
    pub kind: PeriodKind,
    /// Start, seconds since 1 January 00:00 (always a whole day).
    pub start_s: f64,
    /// Length, s (7 days for weeks, 365 days for the year).
    pub duration_s: f64,
}

impl Period {
    /// End of the period, seconds since 1 January 00:00.
    pub fn end_s(&self) -> f64 {
        self.start_s + self.duration_s
    }

    /// 0-based day of year on which the period starts (0 = 1 January).
    pub fn start_day(&self) -> usize {
        (self.start_s / SECONDS_PER_DAY).round() as usize
    }
}

// ---------------------------------------------------------------------------
// Synthetic climate
// ---------------------------------------------------------------------------

/// Hour-to-hour autocorrelation of the synthetic AR(1) noise (e-folding
/// time about 33 h, the scale of synoptic weather anomalies).
const NOISE_AUTOCORRELATION: f64 = 0.97;

/// Parameters of the embedded synthetic climate (see
/// [`WeatherSeries::synthetic`] for the model). The default resembles a
/// temperate continental site.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyntheticClimate {
    /// Annual mean dry-bulb temperature, °C (default 12).
    pub annual_mean_c: f64,
    /// Amplitude of the seasonal sinusoid, K (default 14: daily means from
    /// about -2 °C in winter to 26 °C in summer).
    pub annual_amplitude_k: f64,
    /// Amplitude of the diurnal sinusoid, K (default 5: a 10 K daily range).
    pub diurnal_amplitude_k: f64,
    /// Day of year (1 = 1 January) whose noon is the seasonal peak
    /// (default 200, 19 July).
    pub hottest_day_of_year: f64,
    /// Mean of daily-mean temperature minus dew point, K (default 7).
    pub mean_dew_depression_k: f64,
    /// Constant station pressure, Pa (default 101,325).
    pub pressure_pa: f64,
    /// Standard deviation of the smooth temperature noise, K (default 1).
    pub noise_k: f64,
}

impl Default for SyntheticClimate {
    fn default() -> Self {
        SyntheticClimate {
            annual_mean_c: 12.0,
            annual_amplitude_k: 14.0,
            diurnal_amplitude_k: 5.0,
            hottest_day_of_year: 200.0,
            mean_dew_depression_k: 7.0,
            pressure_pa: STANDARD_PRESSURE_PA,
            noise_k: 1.0,
        }
    }
}

impl SyntheticClimate {
    /// Check that every field is finite and physically usable: pressure
    /// 31-120 kPa (the EPW valid range), non-negative amplitudes, dew
    /// depression and noise, and `hottest_day_of_year` in 1..=365.
    pub fn validate(&self) -> Result<(), WeatherError> {
        let fields = [
            ("annual_mean_c", self.annual_mean_c),
            ("annual_amplitude_k", self.annual_amplitude_k),
            ("diurnal_amplitude_k", self.diurnal_amplitude_k),
            ("hottest_day_of_year", self.hottest_day_of_year),
            ("mean_dew_depression_k", self.mean_dew_depression_k),
            ("pressure_pa", self.pressure_pa),
            ("noise_k", self.noise_k),
        ];
        for (field, value) in fields {
            if !value.is_finite() {
                return Err(WeatherError::InvalidClimate {
                    field,
                    value,
                    reason: "must be finite",
                });
            }
        }
        let non_negative = [
            ("annual_amplitude_k", self.annual_amplitude_k),
            ("diurnal_amplitude_k", self.diurnal_amplitude_k),
            ("mean_dew_depression_k", self.mean_dew_depression_k),
            ("noise_k", self.noise_k),
        ];
        for (field, value) in non_negative {
            if value < 0.0 {
                return Err(WeatherError::InvalidClimate {
                    field,
                    value,
                    reason: "must not be negative",
                });
            }
        }
        if !(31_000.0..=120_000.0).contains(&self.pressure_pa) {
            return Err(WeatherError::InvalidClimate {
                field: "pressure_pa",
                value: self.pressure_pa,
                reason: "must be within 31,000-120,000 Pa",
            });
        }
        if !(1.0..=365.0).contains(&self.hottest_day_of_year) {
            return Err(WeatherError::InvalidClimate {
                field: "hottest_day_of_year",
                value: self.hottest_day_of_year,
                reason: "must be within 1-365",
            });
        }
        Ok(())
    }

    /// Copy with non-finite fields replaced by the default's, `noise_k` made
    /// non-negative and the pressure clamped to 31-120 kPa.
    fn sanitised(&self) -> SyntheticClimate {
        let d = SyntheticClimate::default();
        let pick = |v: f64, fallback: f64| if v.is_finite() { v } else { fallback };
        SyntheticClimate {
            annual_mean_c: pick(self.annual_mean_c, d.annual_mean_c),
            annual_amplitude_k: pick(self.annual_amplitude_k, d.annual_amplitude_k),
            diurnal_amplitude_k: pick(self.diurnal_amplitude_k, d.diurnal_amplitude_k),
            hottest_day_of_year: pick(self.hottest_day_of_year, d.hottest_day_of_year),
            mean_dew_depression_k: pick(self.mean_dew_depression_k, d.mean_dew_depression_k),
            pressure_pa: pick(self.pressure_pa, d.pressure_pa).clamp(31_000.0, 120_000.0),
            noise_k: pick(self.noise_k, d.noise_k).abs(),
        }
    }
}

/// SplitMix64 (Steele, Lea & Flood 2014): a tiny, well-mixed 64-bit PRNG,
/// ample for weather noise.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller, one of the pair).
    fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// `n` values of a stationary AR(1) process with autocorrelation `phi` and
/// standard deviation `sd`, with a linear correction that makes value `n`
/// (one step past the end) equal value 0, so the series wraps smoothly.
fn cyclic_ar1(rng: &mut SplitMix64, n: usize, phi: f64, sd: f64) -> Vec<f64> {
    let innovation = sd * (1.0 - phi * phi).sqrt();
    let mut x = sd * rng.next_normal();
    let mut out = Vec::with_capacity(n);
    out.push(x);
    for _ in 1..n {
        x = phi * x + innovation * rng.next_normal();
        out.push(x);
    }
    let next = phi * x + innovation * rng.next_normal();
    let gap = out[0] - next;
    for (i, v) in out.iter_mut().enumerate() {
        *v += gap * i as f64 / n as f64;
    }
    out
}

// ---------------------------------------------------------------------------
// EPW parsing helpers
// ---------------------------------------------------------------------------

const COL_MONTH: &str = "month";
const COL_DAY: &str = "day";
const COL_HOUR: &str = "hour";
const COL_DRY_BULB: &str = "dry-bulb temperature";
const COL_DEW_POINT: &str = "dew-point temperature";
const COL_RH: &str = "relative humidity";
const COL_PRESSURE: &str = "atmospheric station pressure";

/// Fields an EPW data row must have for the columns read here (0..=9).
const EPW_FIELDS_NEEDED: usize = 10;

#[derive(Debug, Clone, Copy)]
struct EpwRow {
    line: usize,
    hour_of_year: usize,
    dry_bulb_c: Option<f64>,
    dew_point_c: Option<f64>,
    rh_pct: Option<f64>,
    pressure_pa: Option<f64>,
}

fn parse_location(line: &str) -> Result<Location, WeatherError> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    if !fields[0].eq_ignore_ascii_case("LOCATION") {
        return Err(WeatherError::MissingLocation {
            text: line.chars().take(60).collect(),
        });
    }
    if fields.len() < 10 {
        return Err(WeatherError::TooFewFields {
            line: 1,
            expected: 10,
            found: fields.len(),
        });
    }
    let number = |index: usize, column: &'static str| -> Result<f64, WeatherError> {
        parse_number(fields[index], 1, column)?.ok_or_else(|| WeatherError::BadNumber {
            line: 1,
            column,
            text: fields[index].to_owned(),
        })
    };
    Ok(Location {
        city: fields[1].to_owned(),
        state_province: fields[2].to_owned(),
        country: fields[3].to_owned(),
        wmo_station: fields[5].to_owned(),
        latitude_deg: number(6, "latitude")?,
        longitude_deg: number(7, "longitude")?,
        time_zone_h: number(8, "time zone")?,
        elevation_m: number(9, "elevation")?,
    })
}

/// A finite number, `None` for an empty field, or a [`WeatherError::BadNumber`].
fn parse_number(text: &str, line: usize, column: &'static str) -> Result<Option<f64>, WeatherError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Some(v)),
        _ => Err(WeatherError::BadNumber {
            line,
            column,
            text: text.to_owned(),
        }),
    }
}

fn parse_int_in(
    text: &str,
    line: usize,
    column: &'static str,
    lo: u32,
    hi: u32,
    valid: &'static str,
) -> Result<u32, WeatherError> {
    let v: u32 = text.trim().parse().map_err(|_| WeatherError::BadNumber {
        line,
        column,
        text: text.to_owned(),
    })?;
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(WeatherError::OutOfRange {
            line,
            column,
            text: text.to_owned(),
            valid,
        })
    }
}

/// How one EPW measurement column is read: values at or above
/// `missing_code` (or an empty field) are missing; others must lie in
/// `lo..hi` (exclusive unless `inclusive`).
struct Measure {
    column: &'static str,
    missing_code: f64,
    lo: f64,
    hi: f64,
    inclusive: bool,
    valid: &'static str,
}

const DRY_BULB: Measure = Measure {
    column: COL_DRY_BULB,
    missing_code: 99.9,
    lo: -70.0,
    hi: 70.0,
    inclusive: false,
    valid: "-70 < t < 70 °C (99.9 = missing)",
};
const DEW_POINT: Measure = Measure {
    column: COL_DEW_POINT,
    ..DRY_BULB
};
const RELATIVE_HUMIDITY: Measure = Measure {
    column: COL_RH,
    missing_code: 999.0,
    lo: 0.0,
    hi: 110.0,
    inclusive: true,
    valid: "0-110 % (999 = missing)",
};
const PRESSURE: Measure = Measure {
    column: COL_PRESSURE,
    missing_code: 999_999.0,
    lo: 31_000.0,
    hi: 120_000.0,
    inclusive: false,
    valid: "31,000 < p < 120,000 Pa (999999 = missing)",
};

impl Measure {
    fn parse(&self, text: &str, line: usize) -> Result<Option<f64>, WeatherError> {
        let Some(v) = parse_number(text, line, self.column)? else {
            return Ok(None);
        };
        if v >= self.missing_code {
            return Ok(None);
        }
        let ok = if self.inclusive {
            (self.lo..=self.hi).contains(&v)
        } else {
            v > self.lo && v < self.hi
        };
        if ok {
            Ok(Some(v))
        } else {
            Err(WeatherError::OutOfRange {
                line,
                column: self.column,
                text: text.to_owned(),
                valid: self.valid,
            })
        }
    }
}

/// Parse one data row; `Ok(None)` for a Feb 29 row.
fn parse_epw_row(line: &str, line_no: usize) -> Result<Option<EpwRow>, WeatherError> {
    let mut fields = [""; EPW_FIELDS_NEEDED];
    let mut count = 0;
    for (i, f) in line.split(',').enumerate() {
        if i < EPW_FIELDS_NEEDED {
            fields[i] = f;
        }
        count += 1;
    }
    if count < EPW_FIELDS_NEEDED {
        return Err(WeatherError::TooFewFields {
            line: line_no,
            expected: EPW_FIELDS_NEEDED,
            found: count,
        });
    }
    let month = parse_int_in(fields[1], line_no, COL_MONTH, 1, 12, "1-12")?;
    let days = if month == 2 {
        29
    } else {
        DAYS_IN_MONTH[month as usize - 1]
    };
    let day = parse_int_in(
        fields[2],
        line_no,
        COL_DAY,
        1,
        days,
        "1 to the number of days in the month",
    )?;
    let hour = parse_int_in(fields[3], line_no, COL_HOUR, 1, 24, "1-24")?;
    if month == 2 && day == 29 {
        return Ok(None);
    }
    let day_of_year = DAYS_IN_MONTH[..month as usize - 1].iter().sum::<u32>() + day - 1;
    let hour_of_year = (day_of_year * 24 + hour - 1) as usize;

    Ok(Some(EpwRow {
        line: line_no,
        hour_of_year,
        dry_bulb_c: DRY_BULB.parse(fields[6], line_no)?,
        dew_point_c: DEW_POINT.parse(fields[7], line_no)?,
        rh_pct: RELATIVE_HUMIDITY.parse(fields[8], line_no)?,
        pressure_pa: PRESSURE.parse(fields[9], line_no)?,
    }))
}

/// (month, day, hour 1-24) of a 0-based hour of the 365-day year.
fn calendar_of_hour(hour_of_year: usize) -> (u32, u32, u32) {
    let mut day = (hour_of_year / HOURS_PER_DAY) as u32;
    let hour = (hour_of_year % HOURS_PER_DAY) as u32 + 1;
    for (m, &len) in DAYS_IN_MONTH.iter().enumerate() {
        if day < len {
            return (m as u32 + 1, day + 1, hour);
        }
        day -= len;
    }
    (12, 31, hour)
}

/// Fill `None`s by linear interpolation between the nearest present values
/// before and after, treating the series as cyclic.
fn fill_missing(values: &[Option<f64>], column: &'static str) -> Result<Vec<f64>, WeatherError> {
    let n = values.len();
    let present: Vec<usize> = (0..n).filter(|&i| values[i].is_some()).collect();
    if present.is_empty() {
        return Err(WeatherError::AllMissing { column });
    }
    let mut out: Vec<f64> = values.iter().map(|v| v.unwrap_or(f64::NAN)).collect();
    for (j, &a) in present.iter().enumerate() {
        let b = present[(j + 1) % present.len()];
        let gap = (b + n - a) % n;
        let gap = if gap == 0 { n } else { gap };
        let (va, vb) = (out[a], out[b]);
        for k in 1..gap {
            out[(a + k) % n] = va + (vb - va) * k as f64 / gap as f64;
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, tol: f64, what: &str) {
        assert!(
            (actual - expected).abs() <= tol,
            "{what}: got {actual}, expected {expected} ± {tol}"
        );
    }

    // --- psychrometrics against published values --------------------------

    /// Saturation pressure against Table 3 of 2017 ASHRAE Handbook -
    /// Fundamentals ch. 1, as quoted in PsychroLib's test suite
    /// (psychrometrics/psychrolib, tests/test_psychrolib_si.py,
    /// `test_GetSatVapPres`), at ASHRAE's stated 300 ppm accuracy.
    #[test]
    fn saturation_pressure_matches_ashrae_table_3() {
        for (t, p) in [
            (-20.0, 103.24),
            (-5.0, 401.74),
            (5.0, 872.6),
            (25.0, 3169.7),
            (50.0, 12351.3),
        ] {
            let got = saturation_vapour_pressure_pa(t);
            assert!(((got - p) / p).abs() < 3e-4, "p_ws({t}) = {got}, Table 3 {p}");
        }
        // Table 3 at -60 °C: 1.08 Pa (formula outside 300 ppm there).
        close(saturation_vapour_pressure_pa(-60.0), 1.08, 0.01, "p_ws(-60)");
    }

    /// Saturation humidity ratio against Table 2 of 2017 ASHRAE Handbook -
    /// Fundamentals ch. 1 (same PsychroLib test file, `test_GetSatHumRatio`;
    /// Table 2 includes the enhancement factor, so agreement is ~0.5-1 %).
    #[test]
    fn saturation_humidity_ratio_matches_ashrae_table_2() {
        for (t, ws, rel) in [
            (-20.0, 0.000_637_3, 0.01),
            (-5.0, 0.002_486_3, 0.005),
            (5.0, 0.005_425, 0.005),
            (25.0, 0.020_173, 0.005),
        ] {
            let got = humidity_ratio(saturation_vapour_pressure_pa(t), STANDARD_PRESSURE_PA);
            assert!(((got - ws) / ws).abs() < rel, "W_s({t}) = {got}, Table 2 {ws}");
        }
    }

    /// 2017 ASHRAE Handbook - Fundamentals ch. 1, Example 1: moist air at
    /// 40 °C dry bulb, 20 °C thermodynamic wet bulb, 101.325 kPa has
    /// W = 0.0065 kg/kg and φ = 14 %. (The Handbook's W uses the tabulated
    /// W_s including the enhancement factor; the equations give 0.0064.)
    #[test]
    fn ashrae_example_1() {
        let w = humidity_ratio_from_wet_bulb(40.0, 20.0, STANDARD_PRESSURE_PA);
        close(w, 0.0065, 0.000_15, "W");
        let pw = vapour_pressure_from_humidity_ratio_pa(w, STANDARD_PRESSURE_PA);
        close(
            relative_humidity_pct(40.0, dew_point_from_vapour_pressure_c(pw)),
            14.0,
            0.5,
            "RH",
        );
        // Forward from the published RH: 40 °C, 14 % -> wet bulb 20 °C.
        let dp = dew_point_from_rh_c(40.0, 14.0);
        close(
            wet_bulb_c(40.0, dp, STANDARD_PRESSURE_PA),
            20.0,
            0.2,
            "wet bulb 40 °C / 14 %",
        );
    }

    /// Humidity ratios from the ASHRAE wet-bulb equations as tabulated in
    /// PsychroLib's test suite (tests/test_psychrolib_si.py,
    /// `test_HumRatio_TWetBulb`, computed there in Excel from the 2017
    /// Handbook equations), above freezing (30 °C / 25 °C) and below
    /// (-1 °C / -5 °C), at 95,461 Pa (standard atmosphere at 500 m). The
    /// inverse must recover the wet bulb.
    #[test]
    fn wet_bulb_equation_matches_psychrolib_reference() {
        for (t, twb, w_ref) in [
            (30.0, 25.0, 0.019_228_127_424_109_6),
            (-1.0, -5.0, 0.001_203_998_199_338_44),
        ] {
            let w = humidity_ratio_from_wet_bulb(t, twb, 95_461.0);
            assert!(((w - w_ref) / w_ref).abs() < 3e-4, "W({t}, {twb}) = {w}, ref {w_ref}");
            let dp = dew_point_from_vapour_pressure_c(vapour_pressure_from_humidity_ratio_pa(w_ref, 95_461.0));
            close(wet_bulb_c(t, dp, 95_461.0), twb, 0.01, "inverse wet bulb");
        }
    }

    /// Dry bulb 30 °C, wet bulb 25 °C at 101,325 Pa: the Handbook equations
    /// (eq. 33 -> W = 0.01795, eq. 20 inverted -> p_w = 2,843 Pa, eq. 6
    /// inverted) give a dew point of 23.19 °C; psychrometric charts read
    /// about 23.1-23.2 °C. Both must give a wet bulb within 0.2 K of 25 °C.
    #[test]
    fn thirty_over_twenty_five() {
        let w = humidity_ratio_from_wet_bulb(30.0, 25.0, STANDARD_PRESSURE_PA);
        let dp = dew_point_from_vapour_pressure_c(vapour_pressure_from_humidity_ratio_pa(w, STANDARD_PRESSURE_PA));
        close(dp, 23.19, 0.02, "dew point of 30/25");
        close(wet_bulb_c(30.0, dp, STANDARD_PRESSURE_PA), 25.0, 0.001, "round trip");
        close(wet_bulb_c(30.0, 23.1, STANDARD_PRESSURE_PA), 25.0, 0.2, "chart 23.1");
    }

    /// Chart points at sea level (readings of a standard sea-level
    /// psychrometric chart, e.g. ASHRAE Psychrometric Chart No. 1; the
    /// equations give 13.78 °C and 23.93 °C).
    #[test]
    fn chart_points_at_sea_level() {
        for (t, rh, wb) in [(20.0, 50.0, 13.7), (35.0, 40.0, 24.0)] {
            let dp = dew_point_from_rh_c(t, rh);
            close(wet_bulb_c(t, dp, STANDARD_PRESSURE_PA), wb, 0.2, "chart wet bulb");
        }
    }

    /// PsychroLib's documented example (README / src docstring):
    /// `GetTDewPointFromRelHum(25.0, 0.80)` = 21.3094 °C.
    #[test]
    fn dew_point_from_rh_matches_psychrolib_example() {
        close(
            dew_point_from_rh_c(25.0, 80.0),
            21.3094,
            0.002,
            "dew point 25 °C / 80 %",
        );
        assert_eq!(dew_point_from_rh_c(25.0, 100.0), 25.0);
        assert_eq!(dew_point_from_rh_c(25.0, 150.0), 25.0);
        assert!(dew_point_from_rh_c(-5.0, 50.0) < -5.0);
    }

    /// Below freezing: saturated air has wet bulb = dry bulb; the iced-bulb
    /// equation (ASHRAE eq. 35) round-trips at sea level; and -5 °C air at
    /// 50 % RH has a wet bulb a little over 2 K below the dry bulb (the
    /// equations give -7.25 °C).
    #[test]
    fn below_freezing_cases() {
        close(wet_bulb_c(-5.0, -5.0, STANDARD_PRESSURE_PA), -5.0, 1e-5, "saturated -5");
        let w = humidity_ratio_from_wet_bulb(-5.0, -8.0, STANDARD_PRESSURE_PA);
        let dp = dew_point_from_vapour_pressure_c(vapour_pressure_from_humidity_ratio_pa(w, STANDARD_PRESSURE_PA));
        close(
            wet_bulb_c(-5.0, dp, STANDARD_PRESSURE_PA),
            -8.0,
            0.001,
            "ice round trip",
        );
        let dp = dew_point_from_rh_c(-5.0, 50.0);
        close(wet_bulb_c(-5.0, dp, STANDARD_PRESSURE_PA), -7.25, 0.05, "-5 °C / 50 %");
        // Dry bulb above freezing, wet bulb below: 2 °C / 50 % -> about -1.4 °C.
        let dp = dew_point_from_rh_c(2.0, 50.0);
        let wb = wet_bulb_c(2.0, dp, STANDARD_PRESSURE_PA);
        assert!(wb < 0.0 && wb > dp, "2 °C / 50 %: wb {wb}, dp {dp}");
    }

    #[test]
    fn wet_bulb_bounded_by_dew_point_and_dry_bulb() {
        for t10 in -400..=500 {
            let t = t10 as f64 * 0.1;
            for depression in [0.0, 0.5, 2.0, 5.0, 10.0, 20.0, 40.0] {
                let dp = t - depression;
                for p in [70_000.0, 90_000.0, STANDARD_PRESSURE_PA] {
                    let wb = wet_bulb_c(t, dp, p);
                    assert!(wb <= t + 1e-9 && wb >= dp - 1e-9, "t {t} dp {dp} p {p}: wb {wb}");
                }
            }
        }
        // Dew point above dry bulb is treated as saturated.
        close(
            wet_bulb_c(20.0, 25.0, STANDARD_PRESSURE_PA),
            20.0,
            1e-5,
            "supersaturated",
        );
        assert!(wet_bulb_c(f64::NAN, 1.0, STANDARD_PRESSURE_PA).is_nan());
    }

    #[test]
    fn lower_pressure_gives_lower_wet_bulb() {
        // At altitude the same dew point means less moisture per kg air.
        let sea = wet_bulb_c(35.0, 10.0, STANDARD_PRESSURE_PA);
        let high = wet_bulb_c(35.0, 10.0, 80_000.0);
        assert!(high < sea, "sea {sea} high {high}");
    }

    // --- EPW text built in tests -------------------------------------------

    const TEST_HEADER: [&str; 8] = [
        "LOCATION,Testville,ST,TST,Unit Test,012345,45.50,-93.25,-6.0,250.0",
        "DESIGN CONDITIONS,0",
        "TYPICAL/EXTREME PERIODS,0",
        "GROUND TEMPERATURES,0",
        "HOLIDAYS/DAYLIGHT SAVINGS,No,0,0,0",
        "COMMENTS 1,unit test",
        "COMMENTS 2,unit test",
        "DATA PERIODS,1,1,Data,Sunday, 1/ 1,12/31",
    ];

    fn test_dry_bulb(i: usize) -> f64 {
        10.0 + (i % 24) as f64 * 0.5
    }

    /// Rows for the whole year (and Feb 29 when `leap`), 35 fields each.
    fn test_rows(leap: bool) -> Vec<String> {
        let mut rows = Vec::new();
        let mut i = 0usize;
        for (m, &len) in DAYS_IN_MONTH.iter().enumerate() {
            let len = if leap && m == 1 { 29 } else { len };
            for day in 1..=len {
                for hour in 1..=24 {
                    let is_leap_day = m == 1 && day == 29;
                    let dry = if is_leap_day { 55.0 } else { test_dry_bulb(i) };
                    let mut f = vec![
                        "1999".to_owned(),
                        (m + 1).to_string(),
                        day.to_string(),
                        hour.to_string(),
                        "60".to_owned(),
                        "A7A7".to_owned(),
                        format!("{dry:.1}"),
                        format!("{:.1}", dry - 5.0),
                        "70".to_owned(),
                        "101000".to_owned(),
                    ];
                    f.extend((10..35).map(|_| "0".to_owned()));
                    rows.push(f.join(","));
                    if !is_leap_day {
                        i += 1;
                    }
                }
            }
        }
        rows
    }

    fn epw(rows: &[String], line_end: &str) -> String {
        let mut s = String::new();
        for l in TEST_HEADER.iter().map(|s| s.to_string()).chain(rows.iter().cloned()) {
            s.push_str(&l);
            s.push_str(line_end);
        }
        s
    }

    fn set_field(row: &mut String, col: usize, value: &str) {
        let mut f: Vec<String> = row.split(',').map(str::to_owned).collect();
        f[col] = value.to_owned();
        *row = f.join(",");
    }

    #[test]
    fn epw_parses_location_and_values() {
        let s = WeatherSeries::from_epw_str("test", &epw(&test_rows(false), "\r\n")).unwrap();
        assert_eq!(s.name, "test");
        let loc = s.location.as_ref().unwrap();
        assert_eq!(loc.city, "Testville");
        assert_eq!(loc.state_province, "ST");
        assert_eq!(loc.country, "TST");
        assert_eq!(loc.wmo_station, "012345");
        assert_eq!(
            (loc.latitude_deg, loc.longitude_deg, loc.time_zone_h, loc.elevation_m),
            (45.5, -93.25, -6.0, 250.0)
        );
        assert_eq!(s.hourly().len(), HOURS_PER_YEAR);
        for (i, h) in s.hourly().iter().enumerate() {
            close(h.dry_bulb_c, test_dry_bulb(i), 1e-9, "dry bulb");
            close(h.dew_point_c, test_dry_bulb(i) - 5.0, 1e-9, "dew point");
            assert_eq!((h.rh_pct, h.pressure_pa), (70.0, 101_000.0));
            assert!(h.wet_bulb_c < h.dry_bulb_c && h.wet_bulb_c > h.dew_point_c);
        }
    }

    #[test]
    fn epw_fills_missing_values_by_interpolation() {
        let mut rows = test_rows(false);
        // Hours 100 and 101 missing dry bulb: neighbours 99 and 102.
        set_field(&mut rows[100], 6, "99.9");
        set_field(&mut rows[101], 6, "99.9");
        set_field(&mut rows[200], 7, "99.9");
        set_field(&mut rows[300], 8, "999");
        set_field(&mut rows[400], 9, "999999");
        set_field(&mut rows[500], 9, "");
        // Missing at the very start wraps to the end of the year.
        set_field(&mut rows[0], 6, "99.9");
        rows[401] = rows[401].replace(",101000,", ",102000,");
        let s = WeatherSeries::from_epw_str("gaps", &epw(&rows, "\n")).unwrap();
        let h = s.hourly();
        let (a, b) = (test_dry_bulb(99), test_dry_bulb(102));
        close(h[100].dry_bulb_c, a + (b - a) / 3.0, 1e-9, "gap 1/3");
        close(h[101].dry_bulb_c, a + 2.0 * (b - a) / 3.0, 1e-9, "gap 2/3");
        let expected_dew = 0.5 * (test_dry_bulb(199) + test_dry_bulb(201)) - 5.0;
        close(h[200].dew_point_c, expected_dew, 1e-9, "dew gap");
        close(h[300].rh_pct, 70.0, 1e-9, "rh gap");
        close(h[400].pressure_pa, 0.5 * (101_000.0 + 102_000.0), 1e-9, "pressure gap");
        close(h[500].pressure_pa, 101_000.0, 1e-9, "empty pressure");
        let wrap = 0.5 * (test_dry_bulb(8759) + test_dry_bulb(1));
        close(h[0].dry_bulb_c, wrap, 1e-9, "wrap gap");
    }

    #[test]
    fn epw_malformed_row_names_line_column_and_text() {
        let mut rows = test_rows(false);
        set_field(&mut rows[41], 6, "12.x");
        let err = WeatherSeries::from_epw_str("bad", &epw(&rows, "\n")).unwrap_err();
        assert_eq!(
            err,
            WeatherError::BadNumber {
                line: 8 + 42,
                column: COL_DRY_BULB,
                text: "12.x".to_owned()
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("line 50") && msg.contains("dry-bulb") && msg.contains("12.x"),
            "{msg}"
        );

        let mut rows = test_rows(false);
        set_field(&mut rows[9], 8, "150");
        let err = WeatherSeries::from_epw_str("bad", &epw(&rows, "\n")).unwrap_err();
        assert!(matches!(
            err,
            WeatherError::OutOfRange { line: 18, column: COL_RH, ref text, .. } if text == "150"
        ));

        let mut rows = test_rows(false);
        set_field(&mut rows[0], 1, "13");
        let err = WeatherSeries::from_epw_str("bad", &epw(&rows, "\n")).unwrap_err();
        assert!(matches!(
            err,
            WeatherError::OutOfRange {
                line: 9,
                column: COL_MONTH,
                ..
            }
        ));

        let mut rows = test_rows(false);
        rows[5] = "1999,1,1,6,60".to_owned();
        let err = WeatherSeries::from_epw_str("bad", &epw(&rows, "\n")).unwrap_err();
        assert_eq!(
            err,
            WeatherError::TooFewFields {
                line: 14,
                expected: 10,
                found: 5
            }
        );

        let mut rows = test_rows(false);
        set_field(&mut rows[7], 9, "NaN");
        let err = WeatherSeries::from_epw_str("bad", &epw(&rows, "\n")).unwrap_err();
        assert!(matches!(
            err,
            WeatherError::BadNumber {
                line: 16,
                column: COL_PRESSURE,
                ..
            }
        ));
    }

    #[test]
    fn epw_drops_leap_day() {
        let leap = test_rows(true);
        assert_eq!(leap.len(), 8_784);
        let a = WeatherSeries::from_epw_str("leap", &epw(&leap, "\n")).unwrap();
        let b = WeatherSeries::from_epw_str("leap", &epw(&test_rows(false), "\n")).unwrap();
        assert_eq!(a.hourly(), b.hourly());
        assert!(a.hourly().iter().all(|h| h.dry_bulb_c < 50.0));
    }

    #[test]
    fn epw_row_count_and_duplicates_are_errors() {
        let mut rows = test_rows(false);
        rows.truncate(8_000);
        let err = WeatherSeries::from_epw_str("short", &epw(&rows, "\n")).unwrap_err();
        assert!(matches!(
            err,
            WeatherError::TooFewRows {
                found: 8_000,
                expected: 8_760,
                ..
            }
        ));
        assert!(err.to_string().contains("8000"), "{err}");

        let mut rows = test_rows(false);
        rows[3] = rows[2].clone();
        let err = WeatherSeries::from_epw_str("dup", &epw(&rows, "\n")).unwrap_err();
        assert_eq!(
            err,
            WeatherError::DuplicateHour {
                line: 12,
                first_line: 11,
                month: 1,
                day: 1,
                hour: 3
            }
        );

        let err = WeatherSeries::from_epw_str("hdr", "LOCATION,a,b,c,d,e,1,2,3,4\nX\n").unwrap_err();
        assert_eq!(err, WeatherError::TruncatedHeader { found: 2 });

        let err = WeatherSeries::from_epw_str("hdr", &epw(&[], "\n").replacen("LOCATION", "PLACE", 1)).unwrap_err();
        assert!(matches!(err, WeatherError::MissingLocation { .. }));

        let mut rows = test_rows(false);
        for r in &mut rows {
            set_field(r, 8, "999");
        }
        let err = WeatherSeries::from_epw_str("rh", &epw(&rows, "\n")).unwrap_err();
        assert_eq!(err, WeatherError::AllMissing { column: COL_RH });
    }

    #[test]
    fn epw_rows_may_come_in_any_order() {
        let mut rows = test_rows(false);
        rows.reverse();
        let a = WeatherSeries::from_epw_str("rev", &epw(&rows, "\n")).unwrap();
        let b = WeatherSeries::from_epw_str("rev", &epw(&test_rows(false), "\n")).unwrap();
        assert_eq!(a.hourly(), b.hourly());
    }

    #[test]
    fn calendar_round_trip() {
        assert_eq!(calendar_of_hour(0), (1, 1, 1));
        assert_eq!(calendar_of_hour(23), (1, 1, 24));
        assert_eq!(calendar_of_hour(24 * 59), (3, 1, 1));
        assert_eq!(calendar_of_hour(8_759), (12, 31, 24));
    }

    // --- sampling -----------------------------------------------------------

    fn ramp_series() -> WeatherSeries {
        WeatherSeries::from_epw_str("ramp", &epw(&test_rows(false), "\n")).unwrap()
    }

    #[test]
    fn sample_uses_hour_ending_rows_and_wraps() {
        let s = ramp_series();
        let h = s.hourly();
        assert_eq!(s.sample(3_600.0), h[0]);
        assert_eq!(s.sample(7_200.0), h[1]);
        assert_eq!(s.sample(0.0), h[8_759]);
        assert_eq!(s.sample(SECONDS_PER_YEAR), h[8_759]);
        assert_eq!(s.sample(SECONDS_PER_YEAR + 3_600.0), h[0]);
        assert_eq!(s.sample(-SECONDS_PER_YEAR + 7_200.0), h[1]);
        assert_eq!(s.sample(SECONDS_PER_YEAR - 3_600.0), h[8_758]);
        // Half way between 1 Jan hour 1 and hour 2.
        close(
            s.sample(5_400.0).dry_bulb_c,
            0.5 * (h[0].dry_bulb_c + h[1].dry_bulb_c),
            1e-12,
            "mid",
        );
        // Across the wrap: 00:30 on 1 January.
        let across = s.sample(1_800.0);
        close(
            across.dry_bulb_c,
            0.5 * (h[8_759].dry_bulb_c + h[0].dry_bulb_c),
            1e-12,
            "wrap",
        );
        close(
            across.wet_bulb_c,
            0.5 * (h[8_759].wet_bulb_c + h[0].wet_bulb_c),
            1e-12,
            "wrap wb",
        );
        // 23:30 on 31 December, between hours ending 23:00 and 24:00.
        close(
            s.sample(-1_800.0).dry_bulb_c,
            0.5 * (h[8_758].dry_bulb_c + h[8_759].dry_bulb_c),
            1e-12,
            "neg",
        );
        assert!(s.sample(f64::NAN).dry_bulb_c.is_nan());
        assert!(s.sample(f64::INFINITY).dry_bulb_c.is_nan());
        // A tiny negative time rounds onto the year end without panicking.
        let _ = s.sample(-1e-300);
    }

    // --- synthetic climate -------------------------------------------------

    #[test]
    fn synthetic_is_deterministic_and_seed_dependent() {
        let c = SyntheticClimate::default();
        let a = WeatherSeries::synthetic(&c, 42);
        let b = WeatherSeries::synthetic(&c, 42);
        let d = WeatherSeries::synthetic(&c, 43);
        assert_eq!(a, b);
        assert_ne!(a.hourly(), d.hourly());
        assert_eq!(a.hourly().len(), HOURS_PER_YEAR);
    }

    #[test]
    fn synthetic_statistics_follow_the_climate() {
        let c = SyntheticClimate::default();
        let s = WeatherSeries::synthetic(&c, 7);
        let h = s.hourly();
        let n = h.len() as f64;
        let mean = h.iter().map(|x| x.dry_bulb_c).sum::<f64>() / n;
        close(mean, c.annual_mean_c, 1.0, "annual mean");
        let depression = h.iter().map(|x| x.dry_bulb_c - x.dew_point_c).sum::<f64>() / n;
        close(depression, c.mean_dew_depression_k, 1.0, "mean dew depression");
        for x in h {
            assert!(x.dew_point_c <= x.dry_bulb_c);
            assert!(x.wet_bulb_c <= x.dry_bulb_c && x.wet_bulb_c >= x.dew_point_c);
            assert!((0.0..=100.0 + 1e-9).contains(&x.rh_pct));
            assert_eq!(x.pressure_pa, c.pressure_pa);
        }
        // Mean diurnal profile peaks at 15:00 (row index 14 of each day).
        let mut by_hour = [0.0; 24];
        for (i, x) in h.iter().enumerate() {
            by_hour[i % 24] += x.dry_bulb_c;
        }
        let peak = argbest(&by_hour[..], |v| *v, |a, b| a > b);
        assert_eq!(peak + 1, 15, "diurnal maximum at hour ending {}", peak + 1);
        // Smooth: hour-to-hour steps stay small, including across the wrap.
        let max_step = (0..h.len())
            .map(|i| (h[(i + 1) % h.len()].dry_bulb_c - h[i].dry_bulb_c).abs())
            .fold(0.0, f64::max);
        assert!(max_step < 3.0, "max hourly step {max_step}");
    }

    #[test]
    fn synthetic_without_noise_is_exact_sinusoid() {
        let c = SyntheticClimate {
            noise_k: 0.0,
            ..SyntheticClimate::default()
        };
        let s = WeatherSeries::synthetic(&c, 0);
        // Noon... 15:00 on the hottest day: mean + seasonal (≈ amplitude) + diurnal.
        let t = (c.hottest_day_of_year - 1.0) * SECONDS_PER_DAY + 15.0 * SECONDS_PER_HOUR;
        close(
            s.sample(t).dry_bulb_c,
            c.annual_mean_c + c.annual_amplitude_k + c.diurnal_amplitude_k,
            0.01,
            "peak",
        );
        let constant = SyntheticClimate {
            annual_amplitude_k: 0.0,
            diurnal_amplitude_k: 0.0,
            noise_k: 0.0,
            ..SyntheticClimate::default()
        };
        let s = WeatherSeries::synthetic(&constant, 0);
        assert!(s.hourly().iter().all(|x| x.dry_bulb_c == 12.0 && x.dew_point_c == 5.0));
    }

    #[test]
    fn synthetic_peak_week_is_near_hottest_day() {
        let c = SyntheticClimate::default();
        for seed in 0..4 {
            let s = WeatherSeries::synthetic(&c, seed);
            for basis in HeatBasis::ALL {
                let p = s.find_period(PeriodKind::PeakHeatWeek, basis);
                let centre_day = p.start_day() as f64 + 3.5;
                assert!(
                    (centre_day - c.hottest_day_of_year).abs() < 25.0,
                    "seed {seed} {basis}: peak week centred on day {centre_day}"
                );
                let cold = s.find_period(PeriodKind::ColdWeek, basis);
                let coldest = c.hottest_day_of_year - 182.5;
                assert!(
                    (cold.start_day() as f64 + 3.5 - coldest).abs() < 25.0,
                    "seed {seed} {basis}: cold week starts day {}",
                    cold.start_day()
                );
                let typical = s.find_period(PeriodKind::TypicalWeek, basis);
                let week_mean = mean_over(&s, &typical, basis);
                let (annual, _) = s.annual_stats(basis);
                close(week_mean, annual, 2.0, "typical week mean");
            }
        }
    }

    #[test]
    fn synthetic_climate_validation_and_sanitising() {
        assert!(SyntheticClimate::default().validate().is_ok());
        let bad = SyntheticClimate {
            pressure_pa: 0.0,
            ..SyntheticClimate::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(WeatherError::InvalidClimate {
                field: "pressure_pa",
                ..
            })
        ));
        let nan = SyntheticClimate {
            annual_mean_c: f64::NAN,
            noise_k: -1.0,
            ..bad
        };
        assert!(nan.validate().is_err());
        let s = WeatherSeries::synthetic(&nan, 3);
        assert!(s
            .hourly()
            .iter()
            .all(|x| x.dry_bulb_c.is_finite() && x.pressure_pa == 31_000.0));
    }

    // --- periods -----------------------------------------------------------

    fn mean_over(s: &WeatherSeries, p: &Period, basis: HeatBasis) -> f64 {
        let start = p.start_day() * 24;
        let end = start + (p.duration_s / SECONDS_PER_HOUR) as usize;
        let rows = &s.hourly()[start..end];
        rows.iter().map(|x| basis.temperature_c(x)).sum::<f64>() / rows.len() as f64
    }

    #[test]
    fn period_kind_names_round_trip() {
        for k in PeriodKind::ALL {
            assert_eq!(k.to_string().parse::<PeriodKind>().unwrap(), k);
        }
        assert_eq!("peak-heat-week".parse(), Ok(PeriodKind::PeakHeatWeek));
        assert_eq!("typical-week".parse(), Ok(PeriodKind::TypicalWeek));
        assert_eq!("cold-week".parse(), Ok(PeriodKind::ColdWeek));
        assert_eq!("year".parse(), Ok(PeriodKind::Year));
        let err = "hot-week".parse::<PeriodKind>().unwrap_err();
        let msg = err.to_string();
        for needle in ["hot-week", "peak-heat-week", "typical-week", "cold-week", "year"] {
            assert!(msg.contains(needle), "{msg}");
        }
        for b in HeatBasis::ALL {
            assert_eq!(b.to_string().parse::<HeatBasis>().unwrap(), b);
        }
        assert!("wetbulb"
            .parse::<HeatBasis>()
            .unwrap_err()
            .to_string()
            .contains("wet-bulb"));
    }

    #[test]
    fn year_period_and_week_bounds() {
        let s = WeatherSeries::synthetic(&SyntheticClimate::default(), 5);
        let y = s.find_period(PeriodKind::Year, HeatBasis::DryBulb);
        assert_eq!((y.start_s, y.duration_s), (0.0, SECONDS_PER_YEAR));
        assert_eq!(y.end_s(), SECONDS_PER_YEAR);
        for kind in [PeriodKind::PeakHeatWeek, PeriodKind::TypicalWeek, PeriodKind::ColdWeek] {
            let p = s.find_period(kind, HeatBasis::WetBulb);
            assert_eq!(p.kind, kind);
            assert_eq!(p.duration_s, 7.0 * SECONDS_PER_DAY);
            assert!(p.start_day() <= 358 && p.start_s % SECONDS_PER_DAY == 0.0);
        }
        // Peak is the maximum over all candidate weeks.
        let peak = s.find_period(PeriodKind::PeakHeatWeek, HeatBasis::DryBulb);
        let best = mean_over(&s, &peak, HeatBasis::DryBulb);
        for d in 0..=358 {
            let p = Period {
                kind: PeriodKind::PeakHeatWeek,
                start_s: d as f64 * SECONDS_PER_DAY,
                duration_s: 7.0 * SECONDS_PER_DAY,
            };
            assert!(mean_over(&s, &p, HeatBasis::DryBulb) <= best + 1e-9);
        }
    }

    // --- serde ---------------------------------------------------------------

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Wrapper {
        kind: PeriodKind,
        basis: HeatBasis,
        climate: SyntheticClimate,
        sample: WeatherSample,
        location: Location,
        period: Period,
    }

    #[test]
    fn serde_round_trip_and_names() {
        let w = Wrapper {
            kind: PeriodKind::PeakHeatWeek,
            basis: HeatBasis::WetBulb,
            climate: SyntheticClimate::default(),
            sample: WeatherSample {
                dry_bulb_c: 30.0,
                wet_bulb_c: 25.0,
                dew_point_c: 23.19,
                rh_pct: 66.0,
                pressure_pa: 101_325.0,
            },
            location: Location {
                city: "X".into(),
                state_province: "-".into(),
                country: "Y".into(),
                wmo_station: "1".into(),
                latitude_deg: 1.0,
                longitude_deg: 2.0,
                time_zone_h: 8.0,
                elevation_m: 16.0,
            },
            period: Period {
                kind: PeriodKind::ColdWeek,
                start_s: 0.0,
                duration_s: 604_800.0,
            },
        };
        let text = toml::to_string(&w).unwrap();
        assert!(text.contains("kind = \"peak-heat-week\""), "{text}");
        assert!(text.contains("basis = \"wet-bulb\""), "{text}");
        assert!(text.contains("kind = \"cold-week\""), "{text}");
        let back: Wrapper = toml::from_str(&text).unwrap();
        assert_eq!(back, w);
    }

    #[test]
    fn synthetic_climate_serde_defaults_and_unknown_fields() {
        let c: SyntheticClimate = toml::from_str("annual_mean_c = 20.0\nnoise_k = 0.5\n").unwrap();
        assert_eq!(
            c,
            SyntheticClimate {
                annual_mean_c: 20.0,
                noise_k: 0.5,
                ..SyntheticClimate::default()
            }
        );
        let err = toml::from_str::<SyntheticClimate>("annual_mean = 20.0\n").unwrap_err();
        assert!(err.to_string().contains("annual_mean"), "{err}");
        let empty: SyntheticClimate = toml::from_str("").unwrap();
        assert_eq!(empty, SyntheticClimate::default());
    }

    // --- real EPW files (shared/data) -------------------------------------

    const DATA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

    /// Load a real EPW from shared/data; `None` (with a note) if absent,
    /// unless COOLPLANE_REQUIRE_DATA is set, in which case a missing file
    /// fails the test.
    fn load_real(file: &str) -> Option<WeatherSeries> {
        let path = format!("{DATA_DIR}{file}");
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(WeatherSeries::from_epw_str(file, &text).unwrap_or_else(|e| panic!("{path}: {e}"))),
            Err(e) => {
                if std::env::var_os("COOLPLANE_REQUIRE_DATA").is_some() {
                    panic!(
                        "weather fixture {path} is required because COOLPLANE_REQUIRE_DATA is set, \
                         but it cannot be read: {e}"
                    );
                }
                eprintln!("note: skipping test, weather fixture {path} not available ({e})");
                None
            }
        }
    }

    const BEIJING: &str = "CHN_Beijing.Beijing.545110_IWEC.epw";
    const SINGAPORE: &str = "SGP_Singapore.486980_IWEC.epw";
    const TUCSON: &str = "USA_AZ_Davis-Monthan.AFB.722745_TMY3.epw";
    const STOCKHOLM: &str = "SWE_Stockholm.Arlanda.024600_IWEC.epw";

    fn mean_of(rows: &[WeatherSample], f: impl Fn(&WeatherSample) -> f64) -> f64 {
        rows.iter().map(f).sum::<f64>() / rows.len() as f64
    }

    fn max_of(rows: &[WeatherSample], f: impl Fn(&WeatherSample) -> f64) -> f64 {
        rows.iter().map(f).fold(f64::NEG_INFINITY, f64::max)
    }

    /// 0-based month (0 = January) containing 0-based day of year `day`.
    fn month_of_day(day: usize) -> usize {
        calendar_of_hour(day * 24).0 as usize - 1
    }

    #[test]
    fn real_files_are_physically_consistent() {
        for file in [BEIJING, SINGAPORE, TUCSON, STOCKHOLM] {
            let Some(s) = load_real(file) else { continue };
            assert_eq!(s.hourly().len(), HOURS_PER_YEAR, "{file}");
            for (i, h) in s.hourly().iter().enumerate() {
                assert!(
                    h.wet_bulb_c <= h.dry_bulb_c + 1e-9 && h.wet_bulb_c >= h.dew_point_c - 1e-9,
                    "{file} row {i}: {h:?}"
                );
                assert!(h.pressure_pa > 80_000.0 && h.pressure_pa < 110_000.0, "{file} {h:?}");
            }
        }
    }

    #[test]
    fn real_singapore() {
        let Some(s) = load_real(SINGAPORE) else {
            return;
        };
        let loc = s.location.as_ref().unwrap();
        assert_eq!((loc.city.as_str(), loc.country.as_str()), ("SINGAPORE", "SGP"));
        assert_eq!((loc.latitude_deg, loc.longitude_deg), (1.37, 103.98));
        assert_eq!((loc.time_zone_h, loc.elevation_m), (8.0, 16.0));
        let h = s.hourly();
        close(mean_of(h, |x| x.dry_bulb_c), 27.0, 1.0, "Singapore mean dry bulb");
        let max_wb = max_of(h, |x| x.wet_bulb_c);
        assert!((26.5..=29.5).contains(&max_wb), "Singapore max wet bulb {max_wb}");
        let mean_wb = mean_of(h, |x| x.wet_bulb_c);
        assert!((23.5..=26.5).contains(&mean_wb), "Singapore mean wet bulb {mean_wb}");
        let peak = s.find_period(PeriodKind::PeakHeatWeek, HeatBasis::WetBulb);
        let peak_mean = mean_over(&s, &peak, HeatBasis::WetBulb);
        assert!(
            (25.0..=28.0).contains(&peak_mean) && peak_mean > mean_wb,
            "Singapore peak wet-bulb week mean {peak_mean}"
        );
    }

    #[test]
    fn real_beijing() {
        let Some(s) = load_real(BEIJING) else { return };
        let loc = s.location.as_ref().unwrap();
        assert_eq!((loc.city.as_str(), loc.country.as_str()), ("BEIJING", "CHN"));
        let january = &s.hourly()[..31 * 24];
        let jan_mean = mean_of(january, |x| x.dry_bulb_c);
        assert!(jan_mean < 0.0, "Beijing January mean {jan_mean}");
        for basis in HeatBasis::ALL {
            let peak = s.find_period(PeriodKind::PeakHeatWeek, basis);
            let month = month_of_day(peak.start_day() + 3);
            assert!(
                (5..=7).contains(&month),
                "Beijing {basis} peak week in month {}",
                month + 1
            );
            let cold = s.find_period(PeriodKind::ColdWeek, basis);
            let month = month_of_day(cold.start_day() + 3);
            assert!(
                month <= 1 || month == 11,
                "Beijing {basis} cold week in month {}",
                month + 1
            );
        }
    }

    #[test]
    fn real_stockholm() {
        let Some(s) = load_real(STOCKHOLM) else {
            return;
        };
        assert_eq!(s.location.as_ref().unwrap().country, "SWE");
        for basis in HeatBasis::ALL {
            let cold = s.find_period(PeriodKind::ColdWeek, basis);
            let month = month_of_day(cold.start_day() + 3);
            assert!(
                month <= 1 || month == 11,
                "Stockholm {basis} cold week in month {}",
                month + 1
            );
        }
        let peak = s.find_period(PeriodKind::PeakHeatWeek, HeatBasis::DryBulb);
        let month = month_of_day(peak.start_day() + 3);
        assert!((5..=7).contains(&month), "Stockholm peak week in month {}", month + 1);
    }

    #[test]
    fn real_tucson() {
        let Some(s) = load_real(TUCSON) else { return };
        let loc = s.location.as_ref().unwrap();
        assert_eq!((loc.state_province.as_str(), loc.elevation_m), ("AZ", 809.0));
        let h = s.hourly();
        // Hot-dry: large wet-bulb depression, hottest hours near 40 °C.
        let depression = mean_of(h, |x| x.dry_bulb_c - x.wet_bulb_c);
        assert!(depression > 7.0, "Tucson mean wet-bulb depression {depression}");
        let max_db = max_of(h, |x| x.dry_bulb_c);
        assert!((38.0..=46.0).contains(&max_db), "Tucson max dry bulb {max_db}");
        let peak = s.find_period(PeriodKind::PeakHeatWeek, HeatBasis::DryBulb);
        let month = month_of_day(peak.start_day() + 3);
        assert!(
            (5..=7).contains(&month),
            "Tucson peak dry-bulb week in month {}",
            month + 1
        );
        let typical = s.find_period(PeriodKind::TypicalWeek, HeatBasis::DryBulb);
        let (annual, _) = s.annual_stats(HeatBasis::DryBulb);
        close(
            mean_over(&s, &typical, HeatBasis::DryBulb),
            annual,
            2.0,
            "Tucson typical week",
        );
    }
}
