//! Fit of the performance-versus-power-cap exponent α from measured power-limit sweeps.
//!
//! The plant models a power-capped GPU as `perf = (P / P_dem)^α` for `P < P_dem`, where `P` is
//! the power the GPU draws under the cap and `P_dem` the power it would draw uncapped (perf is the
//! throughput relative to the uncapped run). This module fits α from the Zeus power-limit sweeps
//! (You et al., NSDI'23; files `summary_power_a40.csv` and `summary_power_v100.csv` from
//! `ml-energy/zeus`, see `shared/data/SOURCES.md`): for six training workloads and many batch
//! sizes, time per epoch and average power at GPU power limits in 25 W steps.
//!
//! # Method
//!
//! * A *workload* is one `(dataset, network, batch_size, optimizer)` combination of one file (one
//!   GPU model). Its uncapped reference is the row with the highest power limit (300 W on the A40,
//!   250 W on the V100, the boards' default limits): `P_dem` = that row's average power.
//! * For every other row: `perf = time_per_epoch(ref) / time_per_epoch(row)` and power ratio
//!   `x = average_power(row) / P_dem`. The measured average power is used, not the limit: at its
//!   lowest limit (100 W) the A40 draws up to 107 W, above the limit it was given.
//! * A point is used only where the cap binds, by two rules:
//!   1. `x < 0.99` ([`BINDING_POWER_RATIO`]): the cap visibly lowered the drawn power;
//!   2. `power_limit < P_dem`: the limit lies below the workload's uncapped average draw. This is
//!      the regime the model describes (it predicts no slowdown for a cap at or above `P_dem`),
//!      and it removes the noise-dominated rows. Small models (NCF on MovieLens, ShuffleNet with
//!      batch 8–64) draw 40–100 W uncapped, below every settable limit; their sweeps only show
//!      run-to-run noise (time per epoch scattering ±15 % with "perf" up to 1.18 at a lower limit,
//!      per-workload "α" from −13 to +2.8). Rule 2 drops them without looking at the outcome.
//!      It also drops rows whose limit only clips short power peaks above the average draw.
//! * α is the least-squares slope through the origin of `ln(perf)` on `ln(x)`:
//!   `α = Σ ln x · ln perf / Σ (ln x)²`.
//!
//! # Result (both files as published, `fit_zeus_models`)
//!
//! | data | α | points | workloads | RMSE perf | RMSE ln perf | max abs err perf |
//! |---|---|---|---|---|---|---|
//! | A40 (100–300 W) | 1.148 | 186 | 38 | 0.156 | 0.240 | 0.301 |
//! | V100 (100–250 W) | 0.504 | 203 | 47 | 0.075 | 0.102 | 0.200 |
//! | combined | **0.825** | 389 | 85 | 0.145 | 0.243 | 0.325 |
//!
//! [`DEFAULT_PERF_ALPHA`] = 0.82, the combined fit rounded to two decimals. Without rule 2 (all
//! points with `x < 0.99`, 620 points) the combined α would be 0.814, so the filter hardly moves
//! the exponent; it removes noise, not signal.
//!
//! A single exponent is a compromise: in log–log space the measured curve is convex (little
//! slowdown for the first 10–20 % of power removed, then a steep fall as clocks approach their
//! floor), and the A40 throttles much harder at 100 W than the V100. Per-workload exponents range
//! from about 0 (ShuffleNet at batch 64–128, input-bound: one or two points, the A40 batch-64 point
//! even giving −0.23) through 0.2–0.8 (V100) to 1.9 (A40, DeepSpeech2). The combined RMSE of
//! 0.145 in perf is the price; against the two trivial exponents it is the better model
//! (α = 0, "capping costs nothing": RMSE 0.317; α = 1, "perf proportional to power": 0.169).
//!
//! The module does no IO: callers hand in the CSV text.

use std::collections::HashMap;

use thiserror::Error;

/// Exponent α of `perf = (P/P_dem)^α`: the combined least-squares fit of the A40 and V100 Zeus
/// sweeps (α = 0.825, 389 points), rounded to two decimals. See the module documentation.
pub const DEFAULT_PERF_ALPHA: f64 = 0.82;

/// A point is used in the fit only if its power ratio `P/P_dem` is below this (the cap binds).
pub const BINDING_POWER_RATIO: f64 = 0.99;

/// The columns a Zeus summary file must have (in any order; extra columns are ignored).
pub const ZEUS_COLUMNS: [&str; 7] = [
    "dataset",
    "network",
    "batch_size",
    "optimizer",
    "power_limit",
    "time_per_epoch",
    "average_power",
];

/// Errors of parsing and fitting.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PerfFitError {
    /// A malformed line of the CSV text (1-based line number, column name).
    #[error("line {line}, column `{column}`: {message}")]
    Parse {
        /// 1-based line number in the text.
        line: usize,
        /// Name of the offending column (or `header`).
        column: String,
        /// What was wrong.
        message: String,
    },
    /// Nothing left to fit after filtering.
    #[error("no usable points: {0}")]
    NoUsablePoints(String),
}

/// One measured row of a power-limit sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerSweepPoint {
    /// Workload key `dataset/network/batch_size/optimizer`, optionally prefixed `TAG:` (GPU model).
    pub workload: String,
    /// Power limit set on the GPU, W.
    pub power_limit_w: f64,
    /// Measured time per epoch, s.
    pub time_per_epoch_s: f64,
    /// Measured average power over the epoch, W.
    pub average_power_w: f64,
}

/// Result of [`fit_alpha`].
#[derive(Debug, Clone, PartialEq)]
pub struct PerfFit {
    /// Fitted exponent α.
    pub alpha: f64,
    /// Number of points used (cap binding, see the module documentation).
    pub points: usize,
    /// Root-mean-square error of the predicted perf `x^α` against the measured perf.
    pub rmse_perf: f64,
    /// Root-mean-square error in log space, `α·ln x − ln perf`.
    pub rmse_ln_perf: f64,
    /// Largest absolute error of the predicted perf.
    pub max_abs_err_perf: f64,
    /// Exponent fitted to each workload alone (workloads with at least one usable point, in order
    /// of first appearance).
    pub per_workload: Vec<(String, f64)>,
}

/// Per-GPU-model and combined fits, see [`fit_zeus_models`].
#[derive(Debug, Clone, PartialEq)]
pub struct ZeusFitReport {
    /// `(model tag, fit)` for each input file, in input order.
    pub per_model: Vec<(String, PerfFit)>,
    /// Fit over the points of all files together.
    pub combined: PerfFit,
    /// Knee curve of each file (GPU type), in input order.
    pub per_model_knee: Vec<(String, KneeFit)>,
    /// Knee curve over all files together.
    pub combined_knee: KneeFit,
}

/// Relative performance `(P/P_dem)^α` of a GPU drawing `power_w` whose uncapped demand is
/// `demand_w`; 1 when the cap does not bind (`power_w ≥ demand_w`) or `demand_w ≤ 0`.
pub fn capped_perf(power_w: f64, demand_w: f64, alpha: f64) -> f64 {
    if demand_w.is_nan() || power_w.is_nan() || demand_w <= 0.0 || power_w >= demand_w {
        return 1.0;
    }
    (power_w.max(0.0) / demand_w).powf(alpha)
}

/// Splits one CSV line into fields (no quoting is used by the Zeus files; a field wrapped in
/// double quotes has them removed).
fn split_fields(line: &str) -> Vec<&str> {
    line.split(',')
        .map(|f| {
            let f = f.trim();
            f.strip_prefix('"').and_then(|g| g.strip_suffix('"')).unwrap_or(f)
        })
        .collect()
}

fn parse_err(line: usize, column: &str, message: impl Into<String>) -> PerfFitError {
    PerfFitError::Parse {
        line,
        column: column.to_string(),
        message: message.into(),
    }
}

/// Parses a Zeus `summary_power_*.csv` text (header
/// `dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power`).
///
/// Blank lines are skipped. Errors name the 1-based line number and the column: a missing
/// column in the header, a row with too few fields, an empty key field, or a number that is not
/// finite and positive.
pub fn parse_zeus_summary(csv: &str) -> Result<Vec<PowerSweepPoint>, PerfFitError> {
    parse_zeus_summary_tagged(csv, "")
}

/// As [`parse_zeus_summary`], with every workload key prefixed `tag:` (unless `tag` is empty),
/// so that sweeps of several GPU models can be fitted together without their workloads merging.
pub fn parse_zeus_summary_tagged(csv: &str, tag: &str) -> Result<Vec<PowerSweepPoint>, PerfFitError> {
    let mut lines = csv
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_start_matches('\u{feff}').trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty());
    let (hline, header) = lines.next().ok_or_else(|| parse_err(1, "header", "empty input"))?;
    let names = split_fields(header);
    let mut idx = [0usize; 7];
    for (k, col) in ZEUS_COLUMNS.iter().enumerate() {
        idx[k] = names
            .iter()
            .position(|n| n == col)
            .ok_or_else(|| parse_err(hline, col, "column missing from the header"))?;
    }
    let need = idx.iter().copied().max().unwrap_or(0) + 1;
    let mut out = Vec::new();
    for (ln, line) in lines {
        let f = split_fields(line);
        if f.len() < need {
            let missing = (0..7)
                .find(|&k| idx[k] >= f.len())
                .map(|k| ZEUS_COLUMNS[k])
                .unwrap_or("header");
            return Err(parse_err(
                ln,
                missing,
                format!("row has {} fields, the header needs {need}", f.len()),
            ));
        }
        let mut key = String::new();
        if !tag.is_empty() {
            key.push_str(tag);
            key.push(':');
        }
        for k in 0..4 {
            let v = f[idx[k]];
            if v.is_empty() {
                return Err(parse_err(ln, ZEUS_COLUMNS[k], "empty field"));
            }
            if k > 0 {
                key.push('/');
            }
            key.push_str(v);
        }
        let mut num = [0.0f64; 3];
        for (j, k) in (4..7).enumerate() {
            let raw = f[idx[k]];
            let v: f64 = raw
                .parse()
                .map_err(|_| parse_err(ln, ZEUS_COLUMNS[k], format!("`{raw}` is not a number")))?;
            if !(v.is_finite() && v > 0.0) {
                return Err(parse_err(
                    ln,
                    ZEUS_COLUMNS[k],
                    format!("`{raw}` must be finite and positive"),
                ));
            }
            num[j] = v;
        }
        out.push(PowerSweepPoint {
            workload: key,
            power_limit_w: num[0],
            time_per_epoch_s: num[1],
            average_power_w: num[2],
        });
    }
    Ok(out)
}

/// The `(workload, ln x, ln perf)` points of the fit, after the reference and filter rules of the
/// module documentation, grouped by workload in order of first appearance.
fn usable_points(points: &[PowerSweepPoint]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut order: Vec<(String, Vec<usize>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, p) in points.iter().enumerate() {
        let g = *index.entry(p.workload.as_str()).or_insert_with(|| {
            order.push((p.workload.clone(), Vec::new()));
            order.len() - 1
        });
        order[g].1.push(i);
    }
    let mut out = Vec::new();
    for (name, members) in order {
        let mut reference = members[0];
        for &i in &members {
            if points[i].power_limit_w > points[reference].power_limit_w {
                reference = i;
            }
        }
        let r = &points[reference];
        let (p_dem, t_ref) = (r.average_power_w, r.time_per_epoch_s);
        let mut xy = Vec::new();
        for &i in &members {
            let p = &points[i];
            let x = p.average_power_w / p_dem;
            let binding = x < BINDING_POWER_RATIO && p.power_limit_w < p_dem;
            if i == reference || !binding {
                continue;
            }
            let perf = t_ref / p.time_per_epoch_s;
            if x > 0.0 && perf > 0.0 && x.is_finite() && perf.is_finite() {
                xy.push((x.ln(), perf.ln()));
            }
        }
        if !xy.is_empty() {
            out.push((name, xy));
        }
    }
    out
}

fn slope(xy: &[(f64, f64)]) -> Option<f64> {
    let sxx: f64 = xy.iter().map(|(x, _)| x * x).sum();
    let sxy: f64 = xy.iter().map(|(x, y)| x * y).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Fits α by least squares through the origin in log space over the points where the cap binds
/// (see the module documentation for the reference and filter rules).
///
/// Errors with [`PerfFitError::NoUsablePoints`] if no point passes the filter.
pub fn fit_alpha(points: &[PowerSweepPoint]) -> Result<PerfFit, PerfFitError> {
    let groups = usable_points(points);
    let all: Vec<(f64, f64)> = groups.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    let alpha = slope(&all).ok_or_else(|| {
        PerfFitError::NoUsablePoints(format!(
            "none of {} rows has a binding cap (power ratio < {BINDING_POWER_RATIO} and limit below the uncapped draw)",
            points.len()
        ))
    })?;
    let n = all.len() as f64;
    let mut se = 0.0;
    let mut se_ln = 0.0;
    let mut max_abs: f64 = 0.0;
    for &(lx, lp) in &all {
        let e = (alpha * lx).exp() - lp.exp();
        se += e * e;
        se_ln += (alpha * lx - lp).powi(2);
        max_abs = max_abs.max(e.abs());
    }
    let per_workload = groups
        .iter()
        .filter_map(|(name, xy)| slope(xy).map(|a| (name.clone(), a)))
        .collect();
    Ok(PerfFit {
        alpha,
        points: all.len(),
        rmse_perf: (se / n).sqrt(),
        rmse_ln_perf: (se_ln / n).sqrt(),
        max_abs_err_perf: max_abs,
        per_workload,
    })
}

/// The knee curve of performance under a power cap: with `x = P/P_dem` the drawn over the
/// uncapped power,
/// `perf = 1 − s₁·(1 − x)` for `x ≥ x_k` (shallow caps: clocks fall, throughput hardly) and
/// `perf = max(0, 1 − s₁·(1 − x_k) − s₂·(x_k − x))` below the knee (deep caps).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeCurve {
    /// Slope above the knee (performance lost per unit of power ratio removed).
    pub shallow_slope: f64,
    /// Power ratio of the knee.
    pub knee: f64,
    /// Slope below the knee.
    pub deep_slope: f64,
}

impl KneeCurve {
    /// Relative performance at power ratio `x` (1 at `x ≥ 1`).
    pub fn perf(&self, x: f64) -> f64 {
        let x = x.min(1.0);
        if x >= self.knee {
            1.0 - self.shallow_slope * (1.0 - x)
        } else {
            (1.0 - self.shallow_slope * (1.0 - self.knee) - self.deep_slope * (self.knee - x)).max(0.0)
        }
    }
}

/// Power ratio from which a cap counts as shallow in the knee fit's report (removes ≤ 20 %).
pub const SHALLOW_RATIO: f64 = 0.8;

/// Result of [`fit_knee`].
#[derive(Debug, Clone, PartialEq)]
pub struct KneeFit {
    /// The fitted curve.
    pub curve: KneeCurve,
    /// Points used (the same filter as [`fit_alpha`]).
    pub points: usize,
    /// RMSE of performance over all points.
    pub rmse_perf: f64,
    /// RMSE of performance over the shallow caps (`x ≥` [`SHALLOW_RATIO`]).
    pub rmse_shallow: f64,
    /// Points with a shallow cap.
    pub shallow_points: usize,
    /// Largest absolute error.
    pub max_abs_err_perf: f64,
    /// RMSE of every point against the mean of its neighbours within ±0.025 of power ratio: the
    /// scatter between workloads at the same power ratio, which no curve of `x` alone can remove.
    pub noise_floor_rmse: f64,
}

/// Fits a [`KneeCurve`] by least squares of performance (grid search, then a finer grid around
/// the best point) over the points [`fit_alpha`] uses.
pub fn fit_knee(points: &[PowerSweepPoint]) -> Result<KneeFit, PerfFitError> {
    let pts: Vec<(f64, f64)> = usable_points(points)
        .iter()
        .flat_map(|(_, v)| v.iter().map(|&(lx, lp)| (lx.exp(), lp.exp())))
        .collect();
    if pts.is_empty() {
        return Err(PerfFitError::NoUsablePoints(format!(
            "none of {} rows has a binding cap",
            points.len()
        )));
    }
    let sse = |c: &KneeCurve| pts.iter().map(|&(x, p)| (c.perf(x) - p).powi(2)).sum::<f64>();
    let mut best = (
        f64::INFINITY,
        KneeCurve {
            shallow_slope: 0.0,
            knee: 1.0,
            deep_slope: 1.0,
        },
    );
    // Coarse grid, then two refinements around the best point.
    let (mut s1_0, mut s1_w, mut k_0, mut k_w, mut s2_0, mut s2_w) = (0.0, 1.0, 0.4, 0.6, 0.0, 4.0);
    for _ in 0..3 {
        let n = 24;
        for i in 0..=n {
            for j in 0..=n {
                for l in 0..=n {
                    let c = KneeCurve {
                        shallow_slope: (s1_0 + s1_w * i as f64 / n as f64).max(0.0),
                        knee: (k_0 + k_w * j as f64 / n as f64).clamp(0.05, 1.0),
                        deep_slope: (s2_0 + s2_w * l as f64 / n as f64).max(0.0),
                    };
                    let e = sse(&c);
                    if e < best.0 {
                        best = (e, c);
                    }
                }
            }
        }
        let c = best.1;
        (s1_w, k_w, s2_w) = (s1_w / 6.0, k_w / 6.0, s2_w / 6.0);
        (s1_0, k_0, s2_0) = (
            c.shallow_slope - s1_w / 2.0,
            c.knee - k_w / 2.0,
            c.deep_slope - s2_w / 2.0,
        );
    }
    let c = best.1;
    let n = pts.len() as f64;
    let shallow: Vec<f64> = pts
        .iter()
        .filter(|(x, _)| *x >= SHALLOW_RATIO)
        .map(|&(x, p)| c.perf(x) - p)
        .collect();
    let floor: f64 = pts
        .iter()
        .map(|&(x, p)| {
            let (sum, k) = pts
                .iter()
                .filter(|(y, _)| (y - x).abs() < 0.025)
                .fold((0.0, 0usize), |(s, k), (_, q)| (s + q, k + 1));
            (p - sum / k as f64).powi(2)
        })
        .sum();
    Ok(KneeFit {
        curve: c,
        points: pts.len(),
        rmse_perf: (best.0 / n).sqrt(),
        rmse_shallow: if shallow.is_empty() {
            f64::NAN
        } else {
            (shallow.iter().map(|e| e * e).sum::<f64>() / shallow.len() as f64).sqrt()
        },
        shallow_points: shallow.len(),
        max_abs_err_perf: pts.iter().map(|&(x, p)| (c.perf(x) - p).abs()).fold(0.0, f64::max),
        noise_floor_rmse: (floor / n).sqrt(),
    })
}

/// Parses several Zeus summaries, given as `(model tag, csv text)`, and fits each alone and all
/// together (workload keys are prefixed with the tag so that models never merge).
pub fn fit_zeus_models(models: &[(&str, &str)]) -> Result<ZeusFitReport, PerfFitError> {
    let mut all = Vec::new();
    let mut per_model = Vec::new();
    for (tag, csv) in models {
        let pts = parse_zeus_summary_tagged(csv, tag)?;
        per_model.push((tag.to_string(), fit_alpha(&pts)?));
        all.extend(pts);
    }
    let combined = fit_alpha(&all)?;
    let mut per_model_knee = Vec::new();
    for (tag, csv) in models {
        per_model_knee.push((tag.to_string(), fit_knee(&parse_zeus_summary_tagged(csv, tag)?)?));
    }
    let combined_knee = fit_knee(&all)?;
    Ok(ZeusFitReport {
        per_model,
        combined,
        per_model_knee,
        combined_knee,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n\
        d,n,32,adam,100,20.0,100.0\n\
        d,n,32,adam,150,12.0,150.0\n\
        d,n,32,adam,200,10.0,200.0\n\
        d,n,32,adam,250,10.0,200.5\n";

    fn require_data() -> bool {
        std::env::var_os("COOLPLANE_REQUIRE_DATA").is_some()
    }

    fn read_data(file: &str, path: &str) -> Option<String> {
        match std::fs::read_to_string(path) {
            Ok(s) => Some(s),
            Err(e) => {
                if require_data() {
                    panic!("COOLPLANE_REQUIRE_DATA is set but {file} could not be read at {path}: {e}");
                }
                println!("note: {file} not found at {path} ({e}); skipping the real-data check");
                None
            }
        }
    }

    /// The two Zeus sweep files from `../shared/data` (None, with a note, when absent and not
    /// required).
    fn zeus_files() -> Option<(String, String)> {
        let a40_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/summary_power_a40.csv");
        let v100_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/summary_power_v100.csv");
        Some((
            read_data("summary_power_a40.csv", a40_path)?,
            read_data("summary_power_v100.csv", v100_path)?,
        ))
    }

    #[test]
    fn parses_inline_sample() {
        let pts = parse_zeus_summary(SAMPLE).unwrap();
        assert_eq!(pts.len(), 4);
        assert_eq!(pts[0].workload, "d/n/32/adam");
        assert_eq!(pts[1].power_limit_w, 150.0);
        assert_eq!(pts[1].time_per_epoch_s, 12.0);
        assert_eq!(pts[3].average_power_w, 200.5);
        let tagged = parse_zeus_summary_tagged(SAMPLE, "A40").unwrap();
        assert_eq!(tagged[0].workload, "A40:d/n/32/adam");
    }

    #[test]
    fn header_order_is_free_and_crlf_is_accepted() {
        let csv = "power_limit,dataset,network,batch_size,optimizer,average_power,time_per_epoch,extra\r\n\
                   100,d,n,8,sgd,90,5,x\r\n\r\n";
        let pts = parse_zeus_summary(csv).unwrap();
        assert_eq!(pts.len(), 1);
        assert_eq!(pts[0].average_power_w, 90.0);
        assert_eq!(pts[0].time_per_epoch_s, 5.0);
    }

    #[test]
    fn malformed_number_names_line_and_column() {
        let bad = SAMPLE.replace("150,12.0,150.0", "150,twelve,150.0");
        let err = parse_zeus_summary(&bad).unwrap_err();
        assert_eq!(
            err,
            PerfFitError::Parse {
                line: 3,
                column: "time_per_epoch".into(),
                message: "`twelve` is not a number".into()
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("line 3") && msg.contains("time_per_epoch"), "{msg}");
    }

    #[test]
    fn short_row_negative_value_and_missing_column_are_errors() {
        let short = SAMPLE.replace("d,n,32,adam,200,10.0,200.0", "d,n,32,adam,200");
        match parse_zeus_summary(&short).unwrap_err() {
            PerfFitError::Parse { line, column, .. } => {
                assert_eq!(line, 4);
                assert_eq!(column, "time_per_epoch");
            }
            e => panic!("unexpected {e:?}"),
        }
        let neg = SAMPLE.replace("100,20.0,100.0", "100,20.0,-1");
        match parse_zeus_summary(&neg).unwrap_err() {
            PerfFitError::Parse { line, column, .. } => {
                assert_eq!((line, column.as_str()), (2, "average_power"));
            }
            e => panic!("unexpected {e:?}"),
        }
        let nan = SAMPLE.replace("100,20.0,100.0", "NaN,20.0,100");
        assert!(matches!(
            parse_zeus_summary(&nan),
            Err(PerfFitError::Parse { line: 2, .. })
        ));
        let nohdr = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch\n";
        match parse_zeus_summary(nohdr).unwrap_err() {
            PerfFitError::Parse { line, column, .. } => {
                assert_eq!((line, column.as_str()), (1, "average_power"))
            }
            e => panic!("unexpected {e:?}"),
        }
        let empty_key = SAMPLE.replace("d,n,32,adam,150", "d,,32,adam,150");
        assert!(matches!(
            parse_zeus_summary(&empty_key),
            Err(PerfFitError::Parse { line: 3, ref column, .. }) if column == "network"
        ));
        assert!(parse_zeus_summary("").is_err());
    }

    #[test]
    fn fit_recovers_a_known_exponent() {
        // Exact power law perf = x^0.7 with P_dem = 300 W; limits below the demand.
        let mut pts = Vec::new();
        for (w, p_dem) in [("a", 300.0), ("b", 250.0)] {
            pts.push(PowerSweepPoint {
                workload: w.into(),
                power_limit_w: 400.0,
                time_per_epoch_s: 10.0,
                average_power_w: p_dem,
            });
            for lim in [100.0, 150.0, 200.0] {
                let x: f64 = lim / p_dem;
                pts.push(PowerSweepPoint {
                    workload: w.into(),
                    power_limit_w: lim,
                    time_per_epoch_s: 10.0 / x.powf(0.7),
                    average_power_w: lim,
                });
            }
        }
        let fit = fit_alpha(&pts).unwrap();
        assert!((fit.alpha - 0.7).abs() < 1e-12, "{}", fit.alpha);
        assert_eq!(fit.points, 6);
        assert!(fit.rmse_perf < 1e-12 && fit.rmse_ln_perf < 1e-12);
        assert_eq!(fit.per_workload.len(), 2);
        assert!((fit.per_workload[1].1 - 0.7).abs() < 1e-12);
    }

    #[test]
    fn filter_drops_non_binding_points() {
        let pts = parse_zeus_summary(SAMPLE).unwrap();
        // Reference: 250 W limit, 200.5 W. The 200 W row has x = 0.9975 (not binding) and is
        // dropped; the 100 W and 150 W rows are used.
        let fit = fit_alpha(&pts).unwrap();
        assert_eq!(fit.points, 2);
        // A workload that never draws near any limit gives nothing to fit.
        let idle = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n\
                    d,n,8,adam,100,11,40\nd,n,8,adam,150,10,41\n";
        assert!(matches!(
            fit_alpha(&parse_zeus_summary(idle).unwrap()),
            Err(PerfFitError::NoUsablePoints(_))
        ));
        assert!(fit_alpha(&[]).is_err());
    }

    #[test]
    fn capped_perf_behaves() {
        assert_eq!(capped_perf(300.0, 250.0, 0.8), 1.0);
        assert_eq!(capped_perf(100.0, 0.0, 0.8), 1.0);
        assert!((capped_perf(125.0, 250.0, 1.0) - 0.5).abs() < 1e-12);
        assert_eq!(capped_perf(-5.0, 250.0, 0.8), 0.0);
    }

    /// The knee curve per GPU type captures the flat region of shallow caps: on the caps that
    /// remove ≤ 20 % of power its RMSE is ≤ 0.05 for both GPU types, and over all caps it is within
    /// 0.01 of the scatter between workloads at the same power ratio (the noise floor that no curve
    /// of the power ratio alone can beat), and better than the single exponent.
    #[test]
    fn real_zeus_files_knee_fits_the_flat_region() {
        let Some((a40, v100)) = zeus_files() else {
            return;
        };
        let report = fit_zeus_models(&[("A40", &a40), ("V100", &v100)]).unwrap();
        for ((tag, k), (_, a)) in report.per_model_knee.iter().zip(&report.per_model) {
            println!("{tag}: {k:?}");
            assert!(k.rmse_shallow <= 0.05, "{tag}: shallow RMSE {}", k.rmse_shallow);
            assert!(k.shallow_points >= 20, "{tag}");
            assert!(
                k.rmse_perf <= k.noise_floor_rmse + 0.01,
                "{tag}: {} vs floor {}",
                k.rmse_perf,
                k.noise_floor_rmse
            );
            assert!(
                k.rmse_perf < a.rmse_perf,
                "{tag}: knee {} vs power law {}",
                k.rmse_perf,
                a.rmse_perf
            );
            // The flat region: a cap that removes 16 % of power costs a few % of performance.
            let p84 = k.curve.perf(0.84);
            assert!(p84 > 0.93 && p84 < 1.0, "{tag}: perf at 0.84 = {p84}");
        }
    }

    #[test]
    fn knee_curve_is_continuous_and_monotone() {
        let c = KneeCurve {
            shallow_slope: 0.2,
            knee: 0.75,
            deep_slope: 1.8,
        };
        let mut last = 0.0;
        for i in 0..=100 {
            let x = i as f64 / 100.0;
            let p = c.perf(x);
            assert!(p >= last - 1e-12 && (0.0..=1.0).contains(&p), "x {x} p {p}");
            last = p;
        }
        assert!((c.perf(0.75 - 1e-9) - c.perf(0.75)).abs() < 1e-6);
        assert_eq!(c.perf(1.0), 1.0);
    }

    /// On the published Zeus sweeps the combined fit reproduces [`DEFAULT_PERF_ALPHA`].
    ///
    /// RMSE bound 0.16 in perf: a one-parameter power law cannot follow the convex measured curve
    /// (see the module docs), so the error is dominated by model form, not noise; the bound is
    /// the observed 0.145 plus 10 % and must also be less than half the error of the "capping is
    /// free" model (α = 0: 0.317), i.e. the exponent must explain most of the slowdown.
    #[test]
    fn real_zeus_files_reproduce_default_alpha() {
        let Some((a40, v100)) = zeus_files() else {
            return;
        };
        let report = fit_zeus_models(&[("A40", &a40), ("V100", &v100)]).unwrap();
        let c = &report.combined;
        for (tag, f) in &report.per_model {
            println!(
                "{tag}: alpha {:.3}, points {}, workloads {}, rmse perf {:.3}, rmse ln {:.3}, max err {:.3}",
                f.alpha,
                f.points,
                f.per_workload.len(),
                f.rmse_perf,
                f.rmse_ln_perf,
                f.max_abs_err_perf
            );
        }
        println!(
            "combined: alpha {:.3}, points {}, workloads {}, rmse perf {:.3}, rmse ln {:.3}, max err {:.3}",
            c.alpha,
            c.points,
            c.per_workload.len(),
            c.rmse_perf,
            c.rmse_ln_perf,
            c.max_abs_err_perf
        );
        let (lo, hi) = c
            .per_workload
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), (_, a)| (lo.min(*a), hi.max(*a)));
        println!("per-workload alpha range {lo:.2} .. {hi:.2}");
        assert!((c.alpha - DEFAULT_PERF_ALPHA).abs() <= 0.01, "alpha {}", c.alpha);
        assert!(c.rmse_perf < 0.16, "rmse {}", c.rmse_perf);
        let all: Vec<PowerSweepPoint> = parse_zeus_summary_tagged(&a40, "A40")
            .unwrap()
            .into_iter()
            .chain(parse_zeus_summary_tagged(&v100, "V100").unwrap())
            .collect();
        let groups = usable_points(&all);
        let free_rmse = (groups
            .iter()
            .flat_map(|(_, v)| v.iter())
            .map(|(_, lp)| (1.0 - lp.exp()).powi(2))
            .sum::<f64>()
            / c.points as f64)
            .sqrt();
        assert!(c.rmse_perf < 0.5 * free_rmse, "{} vs {}", c.rmse_perf, free_rmse);
        assert_eq!(report.per_model.len(), 2);
        assert!(report.per_model[0].1.alpha > report.per_model[1].1.alpha);
        assert_eq!(report.per_model[0].1.points + report.per_model[1].1.points, c.points);
        // The two files parse completely.
        assert_eq!(parse_zeus_summary(&a40).unwrap().len(), 453);
        assert_eq!(parse_zeus_summary(&v100).unwrap().len(), 476);
    }
}
