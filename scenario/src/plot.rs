//! PNG plots of a recorded scenario run, laid out for an operator.
//!
//! [`write_plots`] renders the standard charts of a [`TimeSeries`] into a
//! directory:
//!
//! * `power_stack.png`: IT power, the cooling loads and the electrical losses
//!   stacked, with the metered facility total and the site budget on top;
//! * `pue.png`: instantaneous PUE, with the energy-weighted PUE of the scored
//!   window;
//! * `hottest_gpu.png`: the hottest GPU die against the slowdown limit and the
//!   near-throttle line;
//! * `temperatures_flows.png`: supply temperatures, setpoints and weather
//!   (top) and the total CDU flow (bottom).
//!
//! The warm-up (t < 0 h, not scored) is shaded grey and the start of scoring is
//! marked by a vertical line. Text uses the DejaVu Sans Mono font shipped in
//! `assets/`, so rendering does not depend on the fonts of the host.

use crate::series::{SeriesRow, TimeSeries};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The font every text of the plots is drawn with.
const FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
/// Family name the embedded font is registered under.
pub(crate) const FONT: &str = "sans-serif";

/// Size of the single-panel plots, px.
const SIZE: (u32, u32) = (1200, 700);
/// Size of the two-panel temperature and flow plot, px.
const SIZE_TWO_PANELS: (u32, u32) = (1200, 900);
/// Width of the legend column at the right of every chart, px.
const LEGEND_W: u32 = 320;
/// Above this peak, power is shown in MW rather than kW.
const MW_ABOVE_KW: f64 = 10_000.0;
/// How far below the slowdown temperature "near-throttle" starts, K.
const NEAR_THROTTLE_K: f64 = 5.0;

const IT_C: RGBColor = RGBColor(160, 174, 192);
const CDU_PUMPS_C: RGBColor = RGBColor(0, 114, 178);
const FACILITY_PUMPS_C: RGBColor = RGBColor(86, 180, 233);
const REJECTION_FANS_C: RGBColor = RGBColor(0, 158, 115);
const CHILLER_C: RGBColor = RGBColor(213, 94, 0);
const AIR_HANDLER_C: RGBColor = RGBColor(230, 159, 0);
const ELEC_ROOM_C: RGBColor = RGBColor(240, 228, 66);
const OTHER_COOLING_C: RGBColor = RGBColor(120, 120, 120);
const LOSSES_C: RGBColor = RGBColor(204, 121, 167);
const BUDGET_C: RGBColor = RGBColor(200, 0, 0);
const SLOWDOWN_C: RGBColor = RGBColor(215, 0, 0);
const NEAR_THROTTLE_C: RGBColor = RGBColor(235, 130, 0);
const MAIN_C: RGBColor = RGBColor(0, 90, 170);
const PURPLE_C: RGBColor = RGBColor(117, 60, 170);
const WARMUP_C: RGBColor = RGBColor(150, 150, 150);
const TEXT_C: RGBColor = RGBColor(30, 30, 30);

/// Plots could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The series has no rows, so there is nothing to plot.
    #[error("cannot plot: the time series is empty (no rows)")]
    EmptySeries,
    /// No row has a finite time stamp.
    #[error("cannot plot: none of the {rows} rows has a finite time t_h")]
    NoFiniteTime {
        /// Rows in the series.
        rows: usize,
    },
    /// The output directory does not exist (or is not a directory).
    #[error("cannot write plots into {}: not an existing directory", dir.display())]
    NoDirectory {
        /// The directory asked for.
        dir: PathBuf,
    },
    /// The embedded font could not be registered with the plotting library.
    #[error("cannot load the embedded plot font: {0}")]
    Font(String),
    /// Drawing or encoding one of the PNG files failed.
    #[error("cannot write plot {}: {message}", path.display())]
    Draw {
        /// The PNG file being written.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// What the plots are about, printed as their title.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlotMeta {
    /// Title at the top of every plot, e.g.
    /// `"hall-10k · trim-respond · Beijing typical-week · seed 1"`.
    pub title: String,
}

/// Write the standard plots into `dir` (which must exist) and return the
/// paths written, in this order: `power_stack.png`, `pue.png`,
/// `hottest_gpu.png`, `temperatures_flows.png`.
///
/// Rows whose time is not finite are skipped; other non-finite values leave
/// gaps in their lines. An empty series is an error.
pub fn write_plots(series: &TimeSeries, meta: &PlotMeta, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if series.rows.is_empty() {
        return Err(PlotError::EmptySeries);
    }
    let p = Prepared::new(series, meta).ok_or(PlotError::NoFiniteTime {
        rows: series.rows.len(),
    })?;
    if !dir.is_dir() {
        return Err(PlotError::NoDirectory { dir: dir.to_path_buf() });
    }
    ensure_font()?;
    Ok(vec![
        write_one(dir, "power_stack.png", SIZE, |root| draw_power(&p, root))?,
        write_one(dir, "pue.png", SIZE, |root| draw_pue(&p, root))?,
        write_one(dir, "hottest_gpu.png", SIZE, |root| draw_hottest_gpu(&p, root))?,
        write_one(dir, "temperatures_flows.png", SIZE_TWO_PANELS, |root| {
            draw_temperatures_flows(&p, root)
        })?,
    ])
}

/// Register the embedded font once per process.
pub(crate) fn ensure_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(FONT, FontStyle::Normal, FONT_BYTES)
                .map_err(|_| "DejaVuSansMono.ttf is not a usable font".to_string())
        })
        .clone()
        .map_err(PlotError::Font)
}

/// Result of the drawing functions, generic over the backend.
type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A chart with hours on x and a value on y.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<KeyedAxis, KeyedAxis>>;

/// A linear axis labelled (and gridded) at the values we choose.
struct KeyedAxis {
    linear: RangedCoordf64,
    keys: Vec<f64>,
}

impl Ranged for KeyedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.linear.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.linear.range()
    }
}

/// Render one PNG file with `draw` and save it.
fn write_one<F>(dir: &Path, name: &str, size: (u32, u32), draw: F) -> Result<PathBuf, PlotError>
where
    F: FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> DrawResult<BitMapBackend<'static>>,
{
    let path = dir.join(name);
    let result = {
        let root = BitMapBackend::new(&path, size).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
    };
    match result {
        Ok(()) => Ok(path),
        Err(e) => Err(PlotError::Draw {
            message: e.to_string(),
            path,
        }),
    }
}

/// The rows to plot and the time axis shared by all charts.
struct Prepared<'m> {
    /// Rows with a finite time, in the recorded order.
    rows: Vec<SeriesRow>,
    /// Title of every plot.
    title: &'m str,
    /// Time axis range, h.
    x: (f64, f64),
    /// Labelled time ticks, h.
    x_keys: Vec<f64>,
    /// Decimals of the time tick labels.
    x_decimals: usize,
    /// Part of the time axis that is warm-up, h.
    warmup: Option<(f64, f64)>,
    /// Whether t = 0 lies on the axis after some warm-up.
    scoring_marker: bool,
    /// Width of the display buckets, h; `None` when every row is drawn.
    bucket_h: Option<f64>,
    /// Rows grouped for drawing, in order (one row each when `bucket_h` is
    /// `None`).
    buckets: Vec<Bucket>,
}

/// Consecutive rows drawn as one point.
struct Bucket {
    /// Mean time of the rows, h.
    t: f64,
    /// The rows, indices into [`Prepared::rows`].
    rows: Range<usize>,
}

/// One column over one bucket.
#[derive(Clone, Copy)]
struct Stat {
    t: f64,
    mean: f64,
    lo: f64,
    hi: f64,
}

/// Runs of consecutive `(t, low, high)` points of a min-max envelope.
type Envelope = Vec<Vec<(f64, f64, f64)>>;

impl<'m> Prepared<'m> {
    /// `None` when no row has a finite time.
    fn new(series: &TimeSeries, meta: &'m PlotMeta) -> Option<Self> {
        let rows: Vec<SeriesRow> = series.rows.iter().filter(|r| r.t_h.is_finite()).copied().collect();
        let (t0, t1) = finite_min_max(rows.iter().map(|r| r.t_h))?;
        let x = if t1 - t0 < 1.0 {
            let mid = 0.5 * (t0 + t1);
            (mid - 0.5, mid + 0.5)
        } else {
            (t0, t1)
        };
        let (x_keys, step) = time_key_points(x);
        let warmup = (t0 < 0.0).then(|| (x.0, x.1.min(0.0)));
        let bucket_h = bucket_width_h(&rows, x);
        let buckets = make_buckets(&rows, bucket_h);
        Some(Self {
            rows,
            title: &meta.title,
            x,
            x_keys,
            x_decimals: if step < 1.0 { 2 } else { 0 },
            warmup,
            scoring_marker: t0 < 0.0 && x.1 >= 0.0,
            bucket_h,
            buckets,
        })
    }

    /// Mean, lowest and highest finite value of a column in every bucket;
    /// `None` where the bucket has no finite value.
    fn column(&self, f: impl Fn(&SeriesRow) -> f64) -> Vec<Option<Stat>> {
        self.buckets
            .iter()
            .map(|b| {
                let rows = self.rows.get(b.rows.clone()).unwrap_or(&[]);
                let (mut n, mut sum, mut lo, mut hi) = (0usize, 0.0, f64::INFINITY, f64::NEG_INFINITY);
                for v in rows.iter().map(&f).filter(|v| v.is_finite()) {
                    n += 1;
                    sum += v;
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
                (n > 0).then(|| Stat {
                    t: b.t,
                    mean: sum / n as f64,
                    lo,
                    hi,
                })
            })
            .collect()
    }

    /// The line of one column (bucket means), scaled, split where the value
    /// is missing or outside `y`.
    fn segments(&self, f: impl Fn(&SeriesRow) -> f64, scale: f64, y: (f64, f64)) -> Segments {
        self.stat_segments(f, scale, y, |s| s.mean)
    }

    /// Like [`Prepared::segments`], of the bucket statistic `pick`.
    fn stat_segments(
        &self,
        f: impl Fn(&SeriesRow) -> f64,
        scale: f64,
        y: (f64, f64),
        pick: fn(&Stat) -> f64,
    ) -> Segments {
        let points = self
            .column(f)
            .into_iter()
            .map(|s| s.map_or((f64::NAN, f64::NAN), |s| (s.t, pick(&s) / scale)));
        segments(points, y)
    }

    /// The min-max envelope of one column over the buckets, scaled and
    /// clipped to `y`; empty when rows are drawn one by one.
    fn envelope(&self, f: impl Fn(&SeriesRow) -> f64, scale: f64, y: (f64, f64)) -> Envelope {
        if self.bucket_h.is_none() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut run = Vec::new();
        for stat in self.column(f) {
            match stat {
                Some(s) => run.push((s.t, (s.lo / scale).max(y.0).min(y.1), (s.hi / scale).max(y.0).min(y.1))),
                None if !run.is_empty() => out.push(std::mem::take(&mut run)),
                None => {}
            }
        }
        if !run.is_empty() {
            out.push(run);
        }
        out
    }

    /// Bucket means of per-row `values` (all finite), with the bucket times.
    fn bucket_means(&self, values: &[f64]) -> Vec<(f64, f64)> {
        self.buckets
            .iter()
            .map(|b| {
                let v = values.get(b.rows.clone()).unwrap_or(&[]);
                let mean = if v.is_empty() {
                    0.0
                } else {
                    v.iter().sum::<f64>() / v.len() as f64
                };
                (b.t, mean)
            })
            .collect()
    }

    /// Legend lines that say how dense data were reduced, if they were.
    fn reduction_legend(&self, what: &str, stat: &str, envelope: bool) -> Vec<LegendItem> {
        let Some(width) = self.bucket_h else {
            return Vec::new();
        };
        let per = fmt_duration(width);
        let mut items = vec![LegendItem::new(format!("{what}: {stat} per {per}"), Swatch::Note)];
        if envelope {
            items.push(LegendItem::new(
                format!("shaded: min-max per {per}"),
                Swatch::Area(BLACK.mix(0.15)),
            ));
        }
        items
    }
}

/// Plot width the data are reduced to, px (a little less than the real one).
const DATA_PX: f64 = 780.0;

/// Width of the display buckets for `rows` over the time axis `x`: a round
/// duration giving about 2 px a bucket, or `None` when the rows are sparse
/// enough to be drawn one by one.
fn bucket_width_h(rows: &[SeriesRow], x: (f64, f64)) -> Option<f64> {
    const WIDTHS_MIN: [f64; 13] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 180.0, 360.0, 720.0, 1440.0,
    ];
    let wanted_h = (x.1 - x.0) / (DATA_PX / 2.0);
    let width_h = WIDTHS_MIN
        .iter()
        .map(|m| m / 60.0)
        .find(|w| *w >= wanted_h)
        .unwrap_or_else(|| (wanted_h / 24.0).ceil() * 24.0);
    let mut steps: Vec<f64> = rows
        .windows(2)
        .filter_map(|w| match w {
            [a, b] => Some(b.t_h - a.t_h),
            _ => None,
        })
        .filter(|d| d.is_finite() && *d > 0.0)
        .collect();
    steps.sort_by(f64::total_cmp);
    let typical_step_h = *steps.get(steps.len() / 2)?;
    (width_h.is_finite() && width_h >= 1.5 * typical_step_h).then_some(width_h)
}

/// Group consecutive rows falling in the same bucket of `width_h` (aligned
/// on t = 0); one row a bucket without a width.
fn make_buckets(rows: &[SeriesRow], width_h: Option<f64>) -> Vec<Bucket> {
    let Some(width) = width_h else {
        return rows
            .iter()
            .enumerate()
            .map(|(i, r)| Bucket {
                t: r.t_h,
                rows: i..i + 1,
            })
            .collect();
    };
    let key = |t: f64| (t / width).floor();
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=rows.len() {
        let same = match (rows.get(i), rows.get(start)) {
            (Some(r), Some(s)) => key(r.t_h) == key(s.t_h),
            _ => false,
        };
        if !same {
            let group = rows.get(start..i).unwrap_or(&[]);
            if !group.is_empty() {
                let t = group.iter().map(|r| r.t_h).sum::<f64>() / group.len() as f64;
                out.push(Bucket { t, rows: start..i });
            }
            start = i;
        }
    }
    out
}

/// "30 min", "2 h".
fn fmt_duration(hours: f64) -> String {
    if hours < 1.0 {
        format!("{:.0} min", hours * 60.0)
    } else {
        format!("{} h", fmt_num(hours, if hours.fract() == 0.0 { 0 } else { 1 }))
    }
}

/// Runs of consecutive plottable points.
type Segments = Vec<Vec<(f64, f64)>>;

/// For a limit or budget line: a lone sample is held across the whole time
/// axis `x`, so that a one-row series still shows the line.
fn hold_lone_point(segs: Segments, x: (f64, f64)) -> Segments {
    match segs.as_slice() {
        [only] => match only.as_slice() {
            [(_, v)] => vec![vec![(x.0, *v), (x.1, *v)]],
            _ => segs,
        },
        _ => segs,
    }
}

/// Split `points` into runs of finite points within `y`.
fn segments(points: impl IntoIterator<Item = (f64, f64)>, y: (f64, f64)) -> Segments {
    let mut out = Vec::new();
    let mut run = Vec::new();
    for (t, v) in points {
        if t.is_finite() && v.is_finite() && v >= y.0 && v <= y.1 {
            run.push((t, v));
        } else if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
    out
}

/// Smallest and largest finite value.
fn finite_min_max(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// A y range showing all finite `values` with some head room, at least
/// `min_span` tall; starting at 0 when `include_zero` and the data allow.
fn value_range(values: impl IntoIterator<Item = f64>, include_zero: bool, min_span: f64) -> (f64, f64) {
    let Some((mut lo, mut hi)) = finite_min_max(values) else {
        return (0.0, min_span.max(1.0));
    };
    if include_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    let zero_floor = include_zero && lo >= 0.0;
    if hi - lo < min_span {
        if zero_floor {
            hi = lo + min_span;
        } else {
            let mid = 0.5 * (lo + hi);
            lo = mid - 0.5 * min_span;
            hi = mid + 0.5 * min_span;
        }
    }
    // More room at the top, for the labels drawn there.
    let span = hi - lo;
    if !zero_floor {
        lo -= 0.06 * span;
    }
    hi += 0.13 * span;
    if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (-f64::MAX / 4.0, f64::MAX / 4.0)
    }
}

/// Labelled times for the axis `x`: multiples of a round number of hours.
/// Also returns the step, h.
fn time_key_points(x: (f64, f64)) -> (Vec<f64>, f64) {
    const STEPS_H: [f64; 13] = [
        0.25, 0.5, 1.0, 2.0, 3.0, 6.0, 12.0, 24.0, 48.0, 72.0, 168.0, 336.0, 720.0,
    ];
    const MAX_TICKS: f64 = 14.0;
    let span = x.1 - x.0;
    let step = STEPS_H
        .iter()
        .copied()
        .find(|s| span / s <= MAX_TICKS)
        .unwrap_or_else(|| (span / MAX_TICKS / 720.0).ceil() * 720.0);
    let first = (x.0 / step).ceil() as i64;
    let last = (x.1 / step).floor() as i64;
    let keys = (first..=last).map(|k| k as f64 * step).collect();
    (keys, step)
}

/// Labelled values for the axis `y`: multiples of 1, 2 or 5 times a power
/// of ten, at most about 11 of them. Also returns the step.
fn nice_key_points(y: (f64, f64)) -> (Vec<f64>, f64) {
    const MAX_TICKS: f64 = 11.0;
    let span = y.1 - y.0;
    if !(span.is_finite() && span > 0.0) {
        return (Vec::new(), 1.0);
    }
    let raw = span / MAX_TICKS;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (y.0 / step).ceil();
    let last = (y.1 / step).floor();
    if !(first.is_finite() && last.is_finite()) || last - first > 4.0 * MAX_TICKS {
        return (Vec::new(), step);
    }
    let keys = (first as i64..=last as i64).map(|k| k as f64 * step).collect();
    (keys, step)
}

/// Decimals that tell apart labels `step` apart.
fn decimals_for_step(step: f64) -> usize {
    let d = (-step.log10() - 1e-9).ceil();
    if d.is_finite() && d > 0.0 {
        d.min(6.0) as usize
    } else {
        0
    }
}

/// `v` with `decimals`, never "-0".
fn fmt_num(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

/// Text in the embedded font.
fn text_style(size: u32, pos: Pos) -> TextStyle<'static> {
    (FONT, size).into_font().color(&TEXT_C).pos(pos)
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Swatch {
    /// A filled box.
    Area(RGBAColor),
    /// A line.
    Line { color: RGBColor, width: u32, dashed: bool },
    /// A marker.
    Dot(RGBColor),
    /// Text only.
    Note,
}

/// One row of a legend.
struct LegendItem {
    label: String,
    swatch: Swatch,
    /// Shift to the right, px (members of a group).
    indent: i32,
}

impl LegendItem {
    fn new(label: impl Into<String>, swatch: Swatch) -> Self {
        Self {
            label: label.into(),
            swatch,
            indent: 0,
        }
    }

    fn indented(mut self) -> Self {
        self.indent = 18;
        self
    }
}

/// Style of a line.
#[derive(Clone, Copy)]
struct LineSpec {
    color: RGBColor,
    width: u32,
    dashed: bool,
}

impl LineSpec {
    fn solid(color: RGBColor, width: u32) -> Self {
        Self {
            color,
            width,
            dashed: false,
        }
    }

    fn dashed(color: RGBColor, width: u32) -> Self {
        Self {
            color,
            width,
            dashed: true,
        }
    }

    fn swatch(self) -> Swatch {
        Swatch::Line {
            color: self.color,
            width: self.width,
            dashed: self.dashed,
        }
    }
}

/// Legend entries for the warm-up shading and the scoring marker.
fn warmup_legend(p: &Prepared<'_>) -> Vec<LegendItem> {
    let mut items = Vec::new();
    if p.warmup.is_some() {
        items.push(LegendItem::new("warm-up (not scored)", Swatch::Area(WARMUP_C.mix(0.3))));
    }
    if p.scoring_marker {
        items.push(LegendItem::new(
            "scoring starts (t = 0 h)",
            Swatch::Line {
                color: BLACK,
                width: 2,
                dashed: false,
            },
        ));
    }
    items
}

/// Draw a legend column into `area`, entries from `top` px down.
fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, items: &[LegendItem], top: i32) -> DrawResult<DB> {
    const ROW: i32 = 24;
    const X0: i32 = 8;
    const X1: i32 = 44;
    let label = text_style(14, Pos::new(HPos::Left, VPos::Center));
    if items.is_empty() {
        return Ok(());
    }
    let (w, _) = area.dim_in_pixel();
    let bottom = top + ROW * items.len() as i32;
    area.draw(&Rectangle::new(
        [(0, top - ROW / 2 - 4), (w as i32 - 8, bottom - ROW / 2 + 4)],
        BLACK.mix(0.25).stroke_width(1),
    ))?;
    for (i, item) in items.iter().enumerate() {
        let y = top + ROW * i as i32;
        let (x0, x1) = (X0 + item.indent, X1 + item.indent);
        let text_x = match item.swatch {
            Swatch::Area(c) => {
                area.draw(&Rectangle::new([(x0, y - 7), (x1, y + 7)], c.filled()))?;
                x1 + 8
            }
            Swatch::Line { color, width, dashed } => {
                let style = color.stroke_width(width);
                if dashed {
                    for x in [x0, x0 + 14, x0 + 28] {
                        area.draw(&PathElement::new(vec![(x, y), (x + 8, y)], style))?;
                    }
                } else {
                    area.draw(&PathElement::new(vec![(x0, y), (x1, y)], style))?;
                }
                x1 + 8
            }
            Swatch::Dot(c) => {
                area.draw(&Circle::new(((x0 + x1) / 2, y), 5, c.filled()))?;
                x1 + 8
            }
            Swatch::Note => x0,
        };
        area.draw(&Text::new(item.label.as_str(), (text_x, y), label.clone()))?;
    }
    Ok(())
}

/// A chart over the time axis in `area`, with its mesh and the warm-up
/// shading drawn.
fn build_chart<'a, DB: DrawingBackend>(
    p: &Prepared<'_>,
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    y: (f64, f64),
    y_desc: &str,
) -> Result<Chart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let (y_keys, y_step) = nice_key_points(y);
    let y_decimals = decimals_for_step(y_step);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18).into_font().color(&TEXT_C))
        .margin_top(4)
        .margin_bottom(6)
        .margin_left(10)
        .margin_right(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(
            KeyedAxis {
                linear: (p.x.0..p.x.1).into(),
                keys: p.x_keys.clone(),
            },
            KeyedAxis {
                linear: (y.0..y.1).into(),
                keys: y_keys,
            },
        )?;
    let x_fmt = |v: &f64| fmt_num(*v, p.x_decimals);
    let y_fmt = |v: &f64| fmt_num(*v, y_decimals);
    chart
        .configure_mesh()
        .x_desc("time since scoring start (h)")
        .y_desc(y_desc)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 14).into_font().color(&TEXT_C))
        .axis_desc_style((FONT, 15).into_font().color(&TEXT_C))
        .bold_line_style(BLACK.mix(0.14))
        .light_line_style(TRANSPARENT)
        .axis_style(BLACK.mix(0.6))
        .draw()?;
    if let Some((a, b)) = p.warmup {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(a, y.1), (b, y.0)],
            WARMUP_C.mix(0.22).filled(),
        )))?;
        // Labels go under the data, so that they never hide it.
        let (pa, _) = chart.backend_coord(&(a, y.1));
        let (pb, _) = chart.backend_coord(&(b, y.1));
        if pb - pa > 80 {
            draw_label(&mut chart, (a, y.1), "warm-up", Place::BelowRight)?;
        }
    }
    if p.scoring_marker {
        draw_label(&mut chart, (0.0, y.1), "scoring starts", Place::BelowRight)?;
    }
    Ok(chart)
}

/// The vertical "scoring starts" line at t = 0, drawn over the data.
fn draw_scoring_marker<DB: DrawingBackend>(
    p: &Prepared<'_>,
    chart: &mut Chart<'_, DB>,
    y: (f64, f64),
) -> DrawResult<DB> {
    if p.scoring_marker {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, y.0), (0.0, y.1)],
            BLACK.stroke_width(2),
        )))?;
    }
    Ok(())
}

/// Draw `segs` as one line; single points become dots.
///
/// Wide lines are drawn as 1 px paths repeated at pixel offsets (a square
/// pen): the polygon fill plotters uses for wide strokes thins steep parts and
/// can drop vertical steps, such as a setpoint change.
fn draw_line<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, segs: Segments, line: LineSpec) -> DrawResult<DB> {
    const PEN_1: [(i32, i32); 1] = [(0, 0)];
    const PEN_2: [(i32, i32); 4] = [(0, 0), (1, 0), (0, 1), (1, 1)];
    const PEN_3: [(i32, i32); 9] = [
        (-1, -1),
        (0, -1),
        (1, -1),
        (-1, 0),
        (0, 0),
        (1, 0),
        (-1, 1),
        (0, 1),
        (1, 1),
    ];
    let pen: &[(i32, i32)] = match line.width {
        0 | 1 => &PEN_1,
        2 => &PEN_2,
        _ => &PEN_3,
    };
    let style = line.color.stroke_width(1);
    let area = chart.plotting_area();
    let (base_x, base_y) = area.get_base_pixel();
    let pixels = area.strip_coord_spec();
    for seg in segs {
        let mut path: Vec<(i32, i32)> = Vec::with_capacity(seg.len());
        for c in &seg {
            let (x, y) = area.map_coordinate(c);
            let px = (x - base_x, y - base_y);
            if path.last() != Some(&px) {
                path.push(px);
            }
        }
        if let [only] = path.as_slice() {
            pixels.draw(&Circle::new(*only, line.width + 1, line.color.filled()))?;
            continue;
        }
        for (dx, dy) in pen {
            let shifted = path.iter().map(|(x, y)| (x + dx, y + dy));
            if line.dashed {
                for dashes in DashedLineSeries::new(shifted, 10, 6, style) {
                    pixels.draw(&dashes)?;
                }
            } else {
                pixels.draw(&PathElement::new(shifted.collect::<Vec<_>>(), style))?;
            }
        }
    }
    Ok(())
}

/// Draw a data line and return its legend entry, marked "(no data)" when
/// there was nothing to draw.
fn plot_series<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    segs: Segments,
    line: LineSpec,
    label: &str,
) -> Result<LegendItem, DrawingAreaErrorKind<DB::ErrorType>> {
    let label = if segs.is_empty() {
        format!("{label} (no data)")
    } else {
        label.to_string()
    };
    draw_line(chart, segs, line)?;
    Ok(LegendItem::new(label, line.swatch()))
}

/// Shade a min-max envelope in a light tint of `color`.
fn draw_envelope<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, envelope: Envelope, color: RGBColor) -> DrawResult<DB> {
    for run in envelope {
        if run.len() < 2 {
            continue;
        }
        let mut outline: Vec<(f64, f64)> = run.iter().map(|(t, _, hi)| (*t, *hi)).collect();
        outline.extend(run.iter().rev().map(|(t, lo, _)| (*t, *lo)));
        chart.draw_series(std::iter::once(Polygon::new(outline, color.mix(0.2).filled())))?;
    }
    Ok(())
}

/// Where a chart label sits relative to its anchor point.
#[derive(Clone, Copy)]
enum Place {
    /// Right of and below the anchor (for the top edge of the chart).
    BelowRight,
    /// Left of and above the anchor (for the right end of a line).
    AboveLeft,
}

/// A 14 px label on a translucent white box, placed next to `at`.
fn draw_label<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    at: (f64, f64),
    text: &str,
    place: Place,
) -> DrawResult<DB> {
    // DejaVu Sans Mono advances 0.6 em: 8.4 px a character at 14 px.
    let w = (8.4 * text.chars().count() as f64).ceil() as i32 + 8;
    let (x0, y0) = match place {
        Place::BelowRight => (5, 3),
        Place::AboveLeft => (-w - 6, -24),
    };
    let element = EmptyElement::at(at)
        + Rectangle::new([(x0, y0), (x0 + w, y0 + 20)], WHITE.mix(0.75).filled())
        + Text::new(
            text.to_string(),
            (x0 + 4, y0 + 3),
            text_style(14, Pos::new(HPos::Left, VPos::Top)),
        );
    chart.draw_series(std::iter::once(element))?;
    Ok(())
}

/// Vertical position of the first legend row, px from the top of the panel.
const LEGEND_TOP: i32 = 50;

/// The plot title over the whole image; returns the area below it.
fn titled<DB: DrawingBackend>(
    p: &Prepared<'_>,
    root: &DrawingArea<DB, Shift>,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let root = root.margin(8, 0, 0, 0);
    root.titled(p.title, (FONT, 22).into_font().color(&BLACK))
}

/// Split `area` into the chart part and the legend column at its right.
fn split_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (w, _) = area.dim_in_pixel();
    area.split_horizontally(i32::try_from(w.saturating_sub(LEGEND_W)).unwrap_or(0))
}

/// A power column in kW for stacking: missing and negative values count 0.
fn stack_kw(v: f64) -> f64 {
    if v.is_finite() {
        v.max(0.0)
    } else {
        0.0
    }
}

/// One layer of the power stack.
struct Band {
    label: &'static str,
    color: RGBColor,
    /// Whether the layer is part of the cooling power.
    cooling: bool,
    /// Layer below, kW (cumulative).
    lower: Vec<f64>,
    /// Top of this layer, kW (cumulative).
    upper: Vec<f64>,
}

/// `power_stack.png`.
fn draw_power<DB: DrawingBackend>(p: &Prepared<'_>, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    type Column = fn(&SeriesRow) -> f64;
    const COOLING: [(&str, RGBColor, Column); 6] = [
        ("CDU pumps", CDU_PUMPS_C, |r| r.cdu_pumps_kw),
        ("facility pumps", FACILITY_PUMPS_C, |r| r.facility_pumps_kw),
        ("rejection fans", REJECTION_FANS_C, |r| r.rejection_fans_kw),
        ("chiller", CHILLER_C, |r| r.chiller_kw),
        ("air handlers", AIR_HANDLER_C, |r| r.air_handler_kw),
        ("electrical rooms", ELEC_ROOM_C, |r| r.elec_room_cooling_kw),
    ];
    let body = titled(p, root)?;
    let (area, legend_area) = split_legend(&body);
    let rows = &p.rows;

    // Layers from the bottom: IT, the cooling loads, any cooling the parts do
    // not account for, electrical losses.
    let mut layers: Vec<(&'static str, RGBColor, bool, Vec<f64>)> = Vec::new();
    layers.push(("IT", IT_C, false, rows.iter().map(|r| stack_kw(r.it_kw)).collect()));
    for (label, color, f) in COOLING {
        layers.push((label, color, true, rows.iter().map(|r| stack_kw(f(r))).collect()));
    }
    let other: Vec<f64> = rows
        .iter()
        .map(|r| {
            let parts: f64 = COOLING.iter().map(|(_, _, f)| stack_kw(f(r))).sum();
            (stack_kw(r.cooling_kw) - parts).max(0.0)
        })
        .collect();
    let peak_cooling = finite_min_max(rows.iter().map(|r| stack_kw(r.cooling_kw))).map_or(0.0, |(_, hi)| hi);
    let peak_other = finite_min_max(other.iter().copied()).map_or(0.0, |(_, hi)| hi);
    if peak_other > 0.01 * peak_cooling && peak_other > 0.5 {
        layers.push(("other cooling", OTHER_COOLING_C, true, other));
    }
    layers.push((
        "electrical losses",
        LOSSES_C,
        false,
        rows.iter().map(|r| stack_kw(r.electrical_losses_kw)).collect(),
    ));
    let mut base = vec![0.0; rows.len()];
    let mut bands = Vec::with_capacity(layers.len());
    for (label, color, cooling, values) in layers {
        let upper: Vec<f64> = base.iter().zip(&values).map(|(b, v)| b + v).collect();
        bands.push(Band {
            label,
            color,
            cooling,
            lower: std::mem::replace(&mut base, upper.clone()),
            upper,
        });
    }
    let stack_top = base;

    let budget_kw = |r: &SeriesRow| {
        if r.budget_kw.is_finite() && r.budget_kw > 0.0 {
            r.budget_kw
        } else {
            f64::NAN
        }
    };
    let peak =
        finite_min_max(stack_top.iter().copied().chain(rows.iter().map(|r| r.facility_kw))).map_or(0.0, |(_, hi)| hi);
    let peak_budget = finite_min_max(rows.iter().map(budget_kw)).map(|(_, hi)| hi);
    // A budget far above the load would flatten the chart: leave it off scale.
    let budget_on_scale = peak_budget.is_some_and(|b| peak <= 0.0 || b <= 2.0 * peak);
    let shown_peak = match peak_budget {
        Some(b) if budget_on_scale => peak.max(b),
        _ => peak,
    };
    let (scale, unit) = if shown_peak > MW_ABOVE_KW {
        (1000.0, "MW")
    } else {
        (1.0, "kW")
    };
    let budget_values: Vec<f64> = if budget_on_scale {
        rows.iter().map(budget_kw).collect()
    } else {
        Vec::new()
    };
    let y = value_range(
        stack_top
            .iter()
            .chain(budget_values.iter())
            .copied()
            .chain(rows.iter().map(|r| r.facility_kw))
            .map(|v| v / scale),
        true,
        10.0 / scale,
    );

    let mut chart = build_chart(
        p,
        &area,
        "Site power: IT + cooling + electrical losses (stacked)",
        y,
        &format!("power ({unit})"),
    )?;
    for band in &bands {
        let visible = band.upper.iter().zip(&band.lower).any(|(u, l)| u > l);
        if !visible {
            continue;
        }
        let upper = p.bucket_means(&band.upper);
        let lower = p.bucket_means(&band.lower);
        if let ([(t, u)], [(_, l)]) = (upper.as_slice(), lower.as_slice()) {
            // One sample: a bar, as an area has no width.
            let half = 0.02 * (p.x.1 - p.x.0);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(t - half, u / scale), (t + half, l / scale)],
                band.color.mix(0.85).filled(),
            )))?;
            continue;
        }
        let mut outline: Vec<(f64, f64)> = upper.iter().map(|(t, u)| (*t, u / scale)).collect();
        outline.extend(lower.iter().rev().map(|(t, l)| (*t, l / scale)));
        chart.draw_series(std::iter::once(Polygon::new(outline, band.color.mix(0.85).filled())))?;
    }
    let facility_max = LineSpec::solid(RGBColor(70, 70, 70), 1);
    if p.bucket_h.is_some() {
        let segs = p.stat_segments(|r| r.facility_kw, scale, y, |s| s.hi);
        draw_line(&mut chart, segs, facility_max)?;
    }
    let facility = plot_series(
        &mut chart,
        p.segments(|r| r.facility_kw, scale, y),
        LineSpec::solid(BLACK, 2),
        "facility total (meter)",
    )?;
    let budget = LineSpec::dashed(BUDGET_C, 2);
    if budget_on_scale {
        let segs = hold_lone_point(p.segments(budget_kw, scale, y), p.x);
        draw_line(&mut chart, segs, budget)?;
    }
    draw_scoring_marker(p, &mut chart, y)?;

    let mut legend = vec![facility];
    if let Some(width) = p.bucket_h {
        legend.push(LegendItem::new(
            format!("facility max per {}", fmt_duration(width)),
            facility_max.swatch(),
        ));
    }
    match peak_budget {
        Some(_) if budget_on_scale => legend.push(LegendItem::new("site budget", budget.swatch())),
        Some(b) => {
            legend.push(LegendItem::new(
                format!(
                    "site budget: up to {} {unit}",
                    fmt_num(b / scale, if b / scale < 100.0 { 1 } else { 0 })
                ),
                Swatch::Note,
            ));
            legend.push(LegendItem::new("  (off scale, not drawn)", Swatch::Note));
        }
        None => {}
    }
    let mut cooling_heading = false;
    for band in bands.iter().rev() {
        if band.cooling && !cooling_heading {
            legend.push(LegendItem::new("cooling:", Swatch::Note));
            cooling_heading = true;
        }
        let item = LegendItem::new(band.label, Swatch::Area(band.color.mix(0.85)));
        legend.push(if band.cooling { item.indented() } else { item });
    }
    legend.extend(warmup_legend(p));
    legend.extend(p.reduction_legend("areas, lines", "mean", false));
    draw_legend(&legend_area, &legend, LEGEND_TOP)
}

/// `pue.png`.
fn draw_pue<DB: DrawingBackend>(p: &Prepared<'_>, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    let body = titled(p, root)?;
    let (area, legend_area) = split_legend(&body);
    let rows = &p.rows;
    let scored = rows.iter().any(|r| r.t_h >= 0.0);
    let (sum_facility, sum_it) = rows
        .iter()
        .filter(|r| !scored || r.t_h >= 0.0)
        .filter(|r| r.facility_kw.is_finite() && r.it_kw.is_finite() && r.it_kw > 0.0)
        .fold((0.0, 0.0), |(f, i), r| (f + r.facility_kw, i + r.it_kw));
    let weighted = (sum_it > 0.0).then(|| sum_facility / sum_it).filter(|v| v.is_finite());
    let y = value_range(rows.iter().map(|r| r.pue).chain(weighted), false, 0.02);
    let mut chart = build_chart(p, &area, "Instantaneous PUE (facility power / IT power)", y, "PUE (-)")?;
    draw_envelope(&mut chart, p.envelope(|r| r.pue, 1.0, y), MAIN_C)?;
    let pue = plot_series(
        &mut chart,
        p.segments(|r| r.pue, 1.0, y),
        LineSpec::solid(MAIN_C, 2),
        "instantaneous PUE",
    )?;
    let mean = LineSpec::dashed(PURPLE_C, 2);
    let mut legend = vec![pue];
    if let Some(w) = weighted {
        let from = if scored { p.x.0.max(0.0) } else { p.x.0 };
        draw_line(&mut chart, segments([(from, w), (p.x.1, w)], y), mean)?;
        let scope = if scored { "scored window" } else { "whole run" };
        legend.push(LegendItem::new(format!("PUE over {scope}: {w:.3}"), mean.swatch()));
        legend.push(LegendItem::new("  (energy-weighted:", Swatch::Note));
        legend.push(LegendItem::new("   sum facility / sum IT)", Swatch::Note));
    }
    draw_scoring_marker(p, &mut chart, y)?;
    legend.extend(warmup_legend(p));
    legend.extend(p.reduction_legend("lines", "mean", true));
    draw_legend(&legend_area, &legend, LEGEND_TOP)
}

/// `hottest_gpu.png`.
fn draw_hottest_gpu<DB: DrawingBackend>(p: &Prepared<'_>, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    let body = titled(p, root)?;
    let (area, legend_area) = split_legend(&body);
    let rows = &p.rows;
    let near = |r: &SeriesRow| r.gpu_slowdown_c - NEAR_THROTTLE_K;
    let y = value_range(
        rows.iter().flat_map(|r| [r.gpu_temp_max_c, r.gpu_slowdown_c, near(r)]),
        false,
        5.0,
    );
    let mut chart = build_chart(
        p,
        &area,
        "Hottest GPU die temperature against the slowdown limit",
        y,
        "temperature (\u{b0}C)",
    )?;
    let slowdown = LineSpec::solid(SLOWDOWN_C, 2);
    let near_throttle = LineSpec::dashed(NEAR_THROTTLE_C, 2);
    let slowdown_segs = hold_lone_point(p.segments(|r| r.gpu_slowdown_c, 1.0, y), p.x);
    let has_slowdown = !slowdown_segs.is_empty();
    // Labels of the limit lines at their right end, under the data.
    let last_slowdown = rows.iter().rev().map(|r| r.gpu_slowdown_c).find(|s| s.is_finite());
    if let Some(s) = last_slowdown {
        draw_label(
            &mut chart,
            (p.x.1, s),
            &format!("slowdown {s:.1} \u{b0}C"),
            Place::AboveLeft,
        )?;
        if s - NEAR_THROTTLE_K >= y.0 {
            draw_label(
                &mut chart,
                (p.x.1, s - NEAR_THROTTLE_K),
                "near-throttle (slowdown \u{2212} 5 K)",
                Place::AboveLeft,
            )?;
        }
    }
    let near_segs = hold_lone_point(p.segments(near, 1.0, y), p.x);
    draw_line(&mut chart, near_segs, near_throttle)?;
    draw_line(&mut chart, slowdown_segs, slowdown)?;
    draw_envelope(&mut chart, p.envelope(|r| r.gpu_temp_max_c, 1.0, y), MAIN_C)?;
    // The hottest die in each bucket: averaging would hide the peaks.
    let gpu = plot_series(
        &mut chart,
        p.stat_segments(|r| r.gpu_temp_max_c, 1.0, y, |s| s.hi),
        LineSpec::solid(MAIN_C, 2),
        "hottest GPU die",
    )?;

    let scored = rows.iter().any(|r| r.t_h >= 0.0);
    let scope = if scored { "scored" } else { "whole run" };
    let in_scope = || rows.iter().filter(move |r| !scored || r.t_h >= 0.0);
    let mut legend = vec![gpu];
    let hottest = in_scope()
        .filter(|r| r.gpu_temp_max_c.is_finite())
        .max_by(|a, b| a.gpu_temp_max_c.total_cmp(&b.gpu_temp_max_c));
    if let Some(r) = hottest {
        chart.draw_series(std::iter::once(Circle::new(
            (r.t_h, r.gpu_temp_max_c),
            5,
            BLACK.filled(),
        )))?;
        legend.push(LegendItem::new(
            format!(
                "peak {:.1} \u{b0}C at {} h",
                r.gpu_temp_max_c,
                fmt_num(r.t_h, p.x_decimals.max(1))
            ),
            Swatch::Dot(BLACK),
        ));
    }
    if has_slowdown {
        legend.push(LegendItem::new("slowdown limit", slowdown.swatch()));
        legend.push(LegendItem::new(
            "near-throttle (slowdown \u{2212} 5 K)",
            near_throttle.swatch(),
        ));
        let closest = finite_min_max(in_scope().map(|r| r.gpu_slowdown_c - r.gpu_temp_max_c));
        if let Some((margin, _)) = closest {
            legend.push(LegendItem::new(
                format!("least margin ({scope}): {margin:.1} K"),
                Swatch::Note,
            ));
        }
    }
    draw_scoring_marker(p, &mut chart, y)?;
    legend.extend(warmup_legend(p));
    legend.extend(p.reduction_legend("line", "max", true));
    draw_legend(&legend_area, &legend, LEGEND_TOP)
}

/// `temperatures_flows.png`.
fn draw_temperatures_flows<DB: DrawingBackend>(p: &Prepared<'_>, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    type Column = fn(&SeriesRow) -> f64;
    let temperatures: [(&str, LineSpec, Column); 7] = [
        ("outdoor dry-bulb", LineSpec::solid(CHILLER_C, 2), |r| r.dry_bulb_c),
        ("outdoor wet-bulb", LineSpec::solid(FACILITY_PUMPS_C, 2), |r| {
            r.wet_bulb_c
        }),
        ("facility supply (mean)", LineSpec::solid(REJECTION_FANS_C, 2), |r| {
            r.facility_supply_mean_c
        }),
        ("facility supply setpoint", LineSpec::dashed(REJECTION_FANS_C, 2), |r| {
            r.facility_setpoint_mean_c
        }),
        ("CDU supply (max)", LineSpec::solid(PURPLE_C, 2), |r| r.cdu_supply_max_c),
        ("CDU supply (mean)", LineSpec::solid(MAIN_C, 2), |r| r.cdu_supply_mean_c),
        ("CDU supply setpoint (mean)", LineSpec::dashed(MAIN_C, 2), |r| {
            r.cdu_supply_setpoint_mean_c
        }),
    ];
    let body = titled(p, root)?;
    let (_, h) = body.dim_in_pixel();
    let (top, bottom) = body.split_vertically(i32::try_from(h * 58 / 100).unwrap_or(0));

    let (area, legend_area) = split_legend(&top);
    let y = value_range(
        p.rows
            .iter()
            .flat_map(|r| temperatures.iter().map(move |(_, _, f)| f(r))),
        false,
        2.0,
    );
    let mut chart = build_chart(
        p,
        &area,
        "Supply temperatures, setpoints and weather",
        y,
        "temperature (\u{b0}C)",
    )?;
    let mut legend = Vec::new();
    for (_, line, f) in temperatures {
        draw_envelope(&mut chart, p.envelope(f, 1.0, y), line.color)?;
    }
    for (label, line, f) in temperatures {
        legend.push(plot_series(&mut chart, p.segments(f, 1.0, y), line, label)?);
    }
    legend.reverse();
    draw_scoring_marker(p, &mut chart, y)?;
    legend.extend(warmup_legend(p));
    legend.extend(p.reduction_legend("lines", "mean", true));
    draw_legend(&legend_area, &legend, LEGEND_TOP)?;

    let (area, legend_area) = split_legend(&bottom);
    // Not from zero, so that the controller's flow changes show; at least
    // 10 % of the flow tall, so that noise does not look like swings.
    let flow_peak = finite_min_max(p.rows.iter().map(|r| r.cdu_flow_total_lpm.abs())).map_or(0.0, |(_, hi)| hi);
    let y = value_range(
        p.rows.iter().map(|r| r.cdu_flow_total_lpm),
        false,
        (0.1 * flow_peak).max(1.0),
    );
    let mut chart = build_chart(p, &area, "Total CDU secondary flow", y, "flow (L/min)")?;
    draw_envelope(&mut chart, p.envelope(|r| r.cdu_flow_total_lpm, 1.0, y), MAIN_C)?;
    let flow = plot_series(
        &mut chart,
        p.segments(|r| r.cdu_flow_total_lpm, 1.0, y),
        LineSpec::solid(MAIN_C, 2),
        "total CDU flow",
    )?;
    draw_scoring_marker(p, &mut chart, y)?;
    let mut legend = vec![flow];
    legend.extend(warmup_legend(p));
    legend.extend(p.reduction_legend("lines", "mean", true));
    draw_legend(&legend_area, &legend, LEGEND_TOP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::f64::consts::PI;
    use std::io::Read;

    /// A fresh empty directory under the system temp dir, or under
    /// `COOLPLANE_PLOT_DIR` when set (to look at the plots afterwards).
    fn temp_dir(name: &str) -> PathBuf {
        if let Some(root) = std::env::var_os("COOLPLANE_PLOT_DIR") {
            let dir = PathBuf::from(root).join(name);
            std::fs::create_dir_all(&dir).expect("create plot dir");
            return dir;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("coolplane-plot-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        dir
    }

    /// Remove a directory made by [`temp_dir`] unless it is to be kept.
    fn remove_temp_dir(dir: &Path) {
        if std::env::var_os("COOLPLANE_PLOT_DIR").is_none() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// `hours` of 5-minute rows from `start_h`, with a daily cycle.
    fn synthetic(start_h: f64, hours: f64, it_base_kw: f64) -> TimeSeries {
        let n = ((hours * 12.0).round() as usize) + 1;
        let rows = (0..n)
            .map(|i| {
                let t_h = start_h + i as f64 / 12.0;
                let day = (2.0 * PI * (t_h - 9.0) / 24.0).sin();
                let jobs = 0.5 + 0.5 * (2.0 * PI * t_h / 7.0).sin();
                let it_kw = it_base_kw * (0.8 + 0.15 * jobs);
                let dry_bulb_c = 24.0 + 7.0 * day;
                let wet_bulb_c = 18.0 + 3.0 * day;
                let cdu_pumps_kw = 0.012 * it_kw;
                let facility_pumps_kw = 0.008 * it_kw;
                let rejection_fans_kw = 0.015 * it_kw * (1.0 + 0.5 * day);
                let chiller_kw = (0.04 * it_kw * day).max(0.0);
                let air_handler_kw = 0.01 * it_kw;
                let elec_room_cooling_kw = 0.002 * it_kw;
                let cooling_kw = cdu_pumps_kw
                    + facility_pumps_kw
                    + rejection_fans_kw
                    + chiller_kw
                    + air_handler_kw
                    + elec_room_cooling_kw;
                let electrical_losses_kw = 0.03 * it_kw;
                let facility_kw = it_kw + cooling_kw + electrical_losses_kw;
                let cdu_supply_setpoint_mean_c = 32.0 + if t_h > 20.0 { 1.0 } else { 0.0 };
                let cdu_supply_mean_c = cdu_supply_setpoint_mean_c + 0.3 * day;
                SeriesRow {
                    t_h,
                    it_kw,
                    facility_kw,
                    cooling_kw,
                    cdu_pumps_kw,
                    facility_pumps_kw,
                    rejection_fans_kw,
                    chiller_kw,
                    air_handler_kw,
                    elec_room_cooling_kw,
                    electrical_losses_kw,
                    pue: facility_kw / it_kw,
                    gpu_temp_max_c: 74.0 + 6.0 * jobs + 2.5 * day,
                    gpu_slowdown_c: 87.0,
                    cdu_supply_mean_c,
                    cdu_supply_max_c: cdu_supply_mean_c + 1.2,
                    cdu_supply_setpoint_mean_c,
                    cdu_flow_total_lpm: it_kw * 1.5 * (0.9 + 0.1 * jobs),
                    facility_supply_mean_c: 27.0 + 2.0 * day,
                    facility_setpoint_mean_c: 27.0,
                    dry_bulb_c,
                    wet_bulb_c,
                    busy_gpus: 8000.0 * jobs,
                    budget_kw: it_base_kw * 1.15,
                    adiabatic_on: 0.0,
                    chiller_on: 0.0,
                }
            })
            .collect();
        TimeSeries { rows }
    }

    fn meta() -> PlotMeta {
        PlotMeta {
            title: "hall-10k \u{b7} trim-respond \u{b7} Beijing typical-week \u{b7} seed 1".into(),
        }
    }

    /// A decoded 8-bit RGB(A) PNG.
    struct Png {
        width: u32,
        height: u32,
        /// RGB of every pixel, row by row.
        rgb: Vec<[u8; 3]>,
    }

    /// Decode a non-interlaced 8-bit RGB or RGBA PNG (what the bitmap
    /// backend writes).
    fn decode_png(bytes: &[u8]) -> Png {
        assert!(bytes.len() > 8, "file too short for a PNG");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        let mut pos = 8;
        let mut header = None;
        let mut idat = Vec::new();
        while pos + 12 <= bytes.len() {
            let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            let kind = &bytes[pos + 4..pos + 8];
            let data = &bytes[pos + 8..pos + 8 + len];
            match kind {
                b"IHDR" => header = Some(data.to_vec()),
                b"IDAT" => idat.extend_from_slice(data),
                b"IEND" => break,
                _ => {}
            }
            pos += 12 + len;
        }
        let header = header.expect("IHDR chunk");
        let width = u32::from_be_bytes(header[0..4].try_into().expect("4 bytes"));
        let height = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes"));
        assert_eq!(header[8], 8, "bit depth");
        let channels = match header[9] {
            2 => 3,
            6 => 4,
            other => panic!("unexpected PNG colour type {other}"),
        };
        assert_eq!(header[12], 0, "interlaced PNG");
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(idat.as_slice())
            .read_to_end(&mut raw)
            .expect("inflate IDAT");
        let stride = width as usize * channels;
        assert_eq!(raw.len(), height as usize * (stride + 1), "IDAT size");
        let mut prev = vec![0u8; stride];
        let mut rgb = Vec::with_capacity(width as usize * height as usize);
        for line in raw.chunks(stride + 1) {
            let filter = line[0];
            let mut cur = line[1..].to_vec();
            for i in 0..stride {
                let a = if i >= channels { cur[i - channels] } else { 0 };
                let b = prev[i];
                let c = if i >= channels { prev[i - channels] } else { 0 };
                let predictor = match filter {
                    0 => 0,
                    1 => a,
                    2 => b,
                    3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                    4 => {
                        let p = i16::from(a) + i16::from(b) - i16::from(c);
                        let (pa, pb, pc) = (
                            (p - i16::from(a)).abs(),
                            (p - i16::from(b)).abs(),
                            (p - i16::from(c)).abs(),
                        );
                        if pa <= pb && pa <= pc {
                            a
                        } else if pb <= pc {
                            b
                        } else {
                            c
                        }
                    }
                    other => panic!("bad PNG filter {other}"),
                };
                cur[i] = cur[i].wrapping_add(predictor);
            }
            rgb.extend(cur.chunks(channels).map(|px| [px[0], px[1], px[2]]));
            prev = cur;
        }
        Png { width, height, rgb }
    }

    /// Check one written plot: a real PNG of `size`, with content.
    fn check_png(path: &Path, size: (u32, u32)) {
        let bytes = std::fs::read(path).expect("read plot");
        assert!(bytes.len() > 20_000, "{}: only {} bytes", path.display(), bytes.len());
        let png = decode_png(&bytes);
        assert_eq!((png.width, png.height), size, "{}", path.display());
        let non_white = png.rgb.iter().filter(|px| **px != [255, 255, 255]).count();
        let fraction = non_white as f64 / png.rgb.len() as f64;
        assert!(
            fraction > 0.03,
            "{}: only {:.1} % of pixels are not white",
            path.display(),
            100.0 * fraction
        );
        let colours: HashSet<[u8; 3]> = png.rgb.iter().copied().collect();
        assert!(
            colours.len() >= 12,
            "{}: only {} distinct colours",
            path.display(),
            colours.len()
        );
        // Saturated line colours, not just grey text and grid.
        let coloured = png
            .rgb
            .iter()
            .filter(|[r, g, b]| r.max(g).max(b) - r.min(g).min(b) > 60)
            .count();
        assert!(coloured > 2_000, "{}: hardly any colour", path.display());
    }

    const NAMES: [&str; 4] = [
        "power_stack.png",
        "pue.png",
        "hottest_gpu.png",
        "temperatures_flows.png",
    ];

    #[test]
    fn writes_the_four_plots() {
        let dir = temp_dir("standard");
        let series = synthetic(-6.0, 54.0, 8_000.0);
        let paths = write_plots(&series, &meta(), &dir).expect("plots written");
        let names: Vec<_> = paths
            .iter()
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()))
            .collect();
        assert_eq!(names, NAMES);
        for path in &paths {
            assert!(path.starts_with(&dir));
            let size = if path.ends_with("temperatures_flows.png") {
                SIZE_TWO_PANELS
            } else {
                SIZE
            };
            check_png(path, size);
        }
        remove_temp_dir(&dir);
    }

    #[test]
    fn megawatt_scale_gaps_and_off_scale_budget() {
        let dir = temp_dir("mw");
        let mut series = synthetic(-12.0, 7.0 * 24.0 + 12.0, 40_000.0);
        for (i, r) in series.rows.iter_mut().enumerate() {
            if i % 97 == 5 {
                r.facility_kw = f64::NAN;
                r.pue = f64::INFINITY;
                r.gpu_temp_max_c = f64::NAN;
                r.cdu_flow_total_lpm = f64::NEG_INFINITY;
                r.chiller_kw = f64::NAN;
            }
            r.budget_kw = 1.0e9;
        }
        series.rows[3].t_h = f64::NAN;
        let paths = write_plots(&series, &meta(), &dir).expect("plots written");
        assert_eq!(paths.len(), 4);
        for path in &paths {
            assert!(path.is_file(), "{}", path.display());
        }
        check_png(&paths[0], SIZE);
        remove_temp_dir(&dir);
    }

    #[test]
    fn single_row_and_no_warmup_do_not_panic() {
        let dir = temp_dir("single");
        let mut series = synthetic(0.0, 0.0, 500.0);
        assert_eq!(series.rows.len(), 1);
        let paths = write_plots(&series, &meta(), &dir).expect("one row plots");
        assert_eq!(paths.len(), 4);
        // A row without any finite value besides time.
        series.rows[0] = SeriesRow {
            t_h: 1.0,
            ..SeriesRow::default()
        };
        series.rows[0].pue = f64::NAN;
        write_plots(&series, &PlotMeta::default(), &dir).expect("zero row plots");
        remove_temp_dir(&dir);
    }

    #[test]
    fn empty_series_is_an_error() {
        let dir = temp_dir("empty");
        let err = write_plots(&TimeSeries::default(), &meta(), &dir);
        assert!(matches!(err, Err(PlotError::EmptySeries)), "{err:?}");
        assert_eq!(std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0), 0);
        let mut series = synthetic(0.0, 1.0, 100.0);
        for r in &mut series.rows {
            r.t_h = f64::NAN;
        }
        let err = write_plots(&series, &meta(), &dir);
        assert!(matches!(err, Err(PlotError::NoFiniteTime { rows: 13 })), "{err:?}");
        remove_temp_dir(&dir);
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = temp_dir("missing").join("does-not-exist");
        let err = write_plots(&synthetic(0.0, 2.0, 100.0), &meta(), &dir).expect_err("directory is missing");
        assert!(matches!(err, PlotError::NoDirectory { .. }), "{err:?}");
        assert!(err.to_string().contains("does-not-exist"), "{err}");
        if let Some(parent) = dir.parent() {
            remove_temp_dir(parent);
        }
    }

    #[test]
    fn unwritable_file_names_the_file() {
        let dir = temp_dir("unwritable");
        // A directory where the PNG should go cannot be written over.
        std::fs::create_dir_all(dir.join("pue.png")).expect("create blocker");
        let err = write_plots(&synthetic(0.0, 2.0, 100.0), &meta(), &dir).expect_err("pue.png is a directory");
        assert!(matches!(err, PlotError::Draw { .. }), "{err:?}");
        assert!(err.to_string().contains("pue.png"), "{err}");
        remove_temp_dir(&dir);
    }

    #[test]
    fn ranges_and_ticks() {
        assert_eq!(value_range([f64::NAN, f64::INFINITY], false, 2.0), (0.0, 2.0));
        let (lo, hi) = value_range([5.0, 5.0], true, 1.0);
        assert_eq!(lo, 0.0);
        assert!(hi > 5.0);
        let (lo, hi) = value_range([1.1, 1.12, f64::NAN], false, 0.02);
        assert!(lo < 1.1 && hi > 1.12 && hi - lo < 0.05);
        let (keys, step) = time_key_points((-6.0, 48.0));
        assert_eq!(step, 6.0);
        assert!(keys.contains(&0.0) && keys.contains(&48.0));
        let (_, step) = time_key_points((-12.0, 168.0));
        assert_eq!(step, 24.0);
        assert_eq!(fmt_num(-0.0001, 2), "0.00");
        assert_eq!(fmt_num(-1.5, 1), "-1.5");
    }
}
