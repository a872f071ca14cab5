//! Scenario files (TOML): site, weather, period, warm-up, workload, events, seed, step.
//!
//! A scenario names everything a run depends on, so that the same file and seed always give the
//! same KPIs. Paths in a scenario file are relative to the file itself. Errors name the field and
//! the value that was wrong.

use coolplane_core::site::{builtin_site, Site};
use coolplane_core::topology::Topology;
use coolplane_core::weather::{HeatBasis, Period, PeriodKind, SyntheticClimate, WeatherSeries, SECONDS_PER_DAY};
use coolplane_sim_plant::faults::{FaultKind, ScheduledFault};
use coolplane_sim_plant::workload::{parse_duty_cycle_csv, SyntheticWorkload, WorkloadModel};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A scenario could not be read, or it names something that does not exist.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The TOML did not parse or did not match the schema.
    #[error("scenario file {file}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// What the parser said (line and column included).
        message: String,
    },
    /// A field holds a value that is not accepted.
    #[error("scenario field `{field}` = {value}: {reason}")]
    Invalid {
        /// Field path.
        field: String,
        /// Offending value.
        value: String,
        /// Why.
        reason: String,
    },
    /// A file the scenario names could not be read.
    #[error("{what} `{path}`: {message}")]
    Io {
        /// Which input.
        what: String,
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
    /// A file was read but its content was rejected.
    #[error("{what} `{path}`: {message}")]
    Content {
        /// Which input.
        what: String,
        /// The path.
        path: String,
        /// The parser's message.
        message: String,
    },
}

fn invalid(field: &str, value: impl std::fmt::Display, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        field: field.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// `[scenario]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioInfo {
    /// Short name.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Built-in site name (`hall-10k`, `supernode-640`, `campus-100k`) or path to a site file.
    pub site: String,
    /// Seed of every random effect (plant spread, sensor noise, workload).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulation step, s.
    #[serde(default = "default_step")]
    pub step_s: f64,
    /// Warm-up before the scored window, h (never scored).
    #[serde(default = "default_warmup")]
    pub warmup_h: f64,
}

fn default_seed() -> u64 {
    1
}
fn default_step() -> f64 {
    60.0
}
fn default_warmup() -> f64 {
    24.0
}

/// `[weather]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeatherSpec {
    /// `synthetic` or a path to an EnergyPlus `.epw` file.
    #[serde(default = "default_weather")]
    pub source: String,
    /// `peak-heat-week`, `typical-week`, `cold-week` or `year`; found from the weather itself.
    #[serde(default = "default_period")]
    pub period: String,
    /// Instead of a named period: first day of the year (0-based) to score.
    #[serde(default)]
    pub start_day: Option<f64>,
    /// Instead of a named period: number of days to score.
    #[serde(default)]
    pub days: Option<f64>,
    /// Parameters of the synthetic climate.
    #[serde(default)]
    pub synthetic: SyntheticClimate,
}

fn default_weather() -> String {
    "synthetic".into()
}
fn default_period() -> String {
    "typical-week".into()
}

impl Default for WeatherSpec {
    fn default() -> Self {
        Self {
            source: default_weather(),
            period: default_period(),
            start_day: None,
            days: None,
            synthetic: SyntheticClimate::default(),
        }
    }
}

/// `[workload]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// `synthetic`, `helios` (SenseTime Helios minute occupancy CSV) or `alibaba-pods` (Alibaba 2023 pod list CSV).
    #[serde(default = "default_workload")]
    pub kind: String,
    /// Trace file for `helios` and `alibaba-pods`.
    #[serde(default)]
    pub path: Option<String>,
    /// Optional GPU duty-cycle traces for inference jobs (`pod_gpu_duty_cycle_anon.tar.gz` or its CSV).
    #[serde(default)]
    pub duty_cycle: Option<String>,
    /// Parameters of the synthetic workload.
    #[serde(default)]
    pub synthetic: SyntheticWorkload,
}

fn default_workload() -> String {
    "synthetic".into()
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        Self {
            kind: default_workload(),
            path: None,
            duty_cycle: None,
            synthetic: SyntheticWorkload::default(),
        }
    }
}

/// One `[[events]]` entry: a fault or external event over a window of the scored period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// Start, hours after the scored window begins (negative: during warm-up).
    pub start_h: f64,
    /// End, hours after the scored window begins (absent: to the end).
    #[serde(default)]
    pub end_h: Option<f64>,
    /// What happens.
    pub fault: FaultKind,
}

/// A scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    /// Identity, site, seed, step, warm-up.
    pub scenario: ScenarioInfo,
    /// Weather and period.
    #[serde(default)]
    pub weather: WeatherSpec,
    /// Workload.
    #[serde(default)]
    pub workload: WorkloadSpec,
    /// Faults and events.
    #[serde(default)]
    pub events: Vec<EventSpec>,
    /// The simulated scheduler leases power through the budget ledger (absent: it does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetSpec>,
}

/// `[budget]`: the simulated scheduler asks the power-budget ledger before it starts a job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetSpec {
    /// Least power per GPU a job accepts, fraction of TDP (raised to the device minimum cap).
    pub min_frac: f64,
    /// Power per GPU a job asks for, fraction of TDP.
    pub request_frac: f64,
    /// Grace period between a preemption notice and the job's stop, s.
    pub grace_s: f64,
    /// Lease time-to-live; the scheduler renews every step, s.
    pub ttl_s: f64,
    /// Margin kept free at the site meter, fraction of the limit.
    pub site_margin_frac: f64,
    /// Budget cuts (demand response) are announced this long before they start, s (0: not
    /// announced; the ledger learns of a cut from the meter, one step late).
    pub notice_s: f64,
}

impl Default for BudgetSpec {
    fn default() -> Self {
        Self {
            min_frac: 0.7,
            request_frac: 1.0,
            grace_s: 120.0,
            ttl_s: 600.0,
            site_margin_frac: 0.03,
            notice_s: 0.0,
        }
    }
}

impl ScenarioSpec {
    /// Parse a scenario file's text (`file` is used in messages).
    pub fn from_toml_str(file: &str, text: &str) -> Result<Self, ScenarioError> {
        let spec: ScenarioSpec = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            file: file.into(),
            message: e.to_string(),
        })?;
        spec.check()?;
        Ok(spec)
    }

    /// A scenario with every default and the given site.
    pub fn default_for_site(site: &str) -> Self {
        Self {
            scenario: ScenarioInfo {
                name: "default".into(),
                description: String::new(),
                site: site.into(),
                seed: default_seed(),
                step_s: default_step(),
                warmup_h: default_warmup(),
            },
            weather: WeatherSpec::default(),
            workload: WorkloadSpec::default(),
            events: Vec::new(),
            budget: None,
        }
    }

    /// Field checks that need no files.
    pub fn check(&self) -> Result<(), ScenarioError> {
        let s = &self.scenario;
        if !(s.step_s.is_finite() && s.step_s >= 0.1 && s.step_s <= 900.0) {
            return Err(invalid("scenario.step_s", s.step_s, "must be within [0.1, 900] s"));
        }
        if !(s.warmup_h.is_finite() && (0.0..=24.0 * 60.0).contains(&s.warmup_h)) {
            return Err(invalid("scenario.warmup_h", s.warmup_h, "must be within [0, 1440] h"));
        }
        if let Some(b) = &self.budget {
            if !(b.min_frac.is_finite() && (0.0..=1.0).contains(&b.min_frac)) {
                return Err(invalid("budget.min_frac", b.min_frac, "must be within [0, 1]"));
            }
            if !(b.request_frac.is_finite() && b.request_frac >= b.min_frac && b.request_frac <= 1.0) {
                return Err(invalid(
                    "budget.request_frac",
                    b.request_frac,
                    "must be within [min_frac, 1]",
                ));
            }
            for (f, v) in [("budget.grace_s", b.grace_s), ("budget.ttl_s", b.ttl_s)] {
                if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
                    return Err(invalid(f, v, "must be within (0, 86400] s"));
                }
            }
            if !(b.notice_s.is_finite() && (0.0..=86_400.0).contains(&b.notice_s)) {
                return Err(invalid("budget.notice_s", b.notice_s, "must be within [0, 86400] s"));
            }
            if !(b.site_margin_frac.is_finite() && (0.0..0.5).contains(&b.site_margin_frac)) {
                return Err(invalid(
                    "budget.site_margin_frac",
                    b.site_margin_frac,
                    "must be within [0, 0.5)",
                ));
            }
        }
        let w = &self.weather;
        match (w.start_day, w.days) {
            (Some(d0), Some(n)) => {
                if !(d0.is_finite() && (0.0..365.0).contains(&d0)) {
                    return Err(invalid("weather.start_day", d0, "must be within [0, 365)"));
                }
                if !(n.is_finite() && n > 0.0 && n <= 3650.0) {
                    return Err(invalid("weather.days", n, "must be within (0, 3650]"));
                }
            }
            (None, None) => {
                w.period
                    .parse::<PeriodKind>()
                    .map_err(|e| invalid("weather.period", format!("{:?}", w.period), e.to_string()))?;
            }
            _ => {
                return Err(invalid(
                    "weather.start_day",
                    format!("{:?}/{:?}", w.start_day, w.days),
                    "give both start_day and days, or neither",
                ))
            }
        }
        w.synthetic
            .validate()
            .map_err(|e| invalid("weather.synthetic", "…", e.to_string()))?;
        match self.workload.kind.as_str() {
            "synthetic" => {}
            "helios" | "alibaba-pods" => {
                if self.workload.path.is_none() {
                    return Err(invalid(
                        "workload.path",
                        "missing",
                        format!("workload kind `{}` needs the trace file's path", self.workload.kind),
                    ));
                }
            }
            other => {
                return Err(invalid(
                    "workload.kind",
                    format!("{other:?}"),
                    "must be one of synthetic, helios, alibaba-pods",
                ))
            }
        }
        self.workload
            .synthetic
            .validate()
            .map_err(|e| invalid("workload.synthetic", "…", e.to_string()))?;
        for (i, e) in self.events.iter().enumerate() {
            if !e.start_h.is_finite() {
                return Err(invalid(
                    &format!("events[{i}].start_h"),
                    e.start_h,
                    "must be a finite number of hours",
                ));
            }
            if e.start_h < -s.warmup_h {
                return Err(invalid(
                    &format!("events[{i}].start_h"),
                    e.start_h,
                    format!("must not be before the start of the warm-up (−{} h)", s.warmup_h),
                ));
            }
            if let Some(end) = e.end_h {
                if !(end.is_finite() && end > e.start_h) {
                    return Err(invalid(&format!("events[{i}].end_h"), end, "must be after start_h"));
                }
            }
            check_fault_values(i, &e.fault)?;
        }
        Ok(())
    }
}

/// A scenario with every file loaded and every name resolved: ready to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The spec it came from.
    pub spec: ScenarioSpec,
    /// The site.
    pub site: Site,
    /// Weather over the year.
    pub weather: WeatherSeries,
    /// Human-readable weather name.
    pub weather_name: String,
    /// The scored period (in the weather year).
    pub period: Period,
    /// Name of the period (`typical-week`, or `days 100–107`).
    pub period_name: String,
    /// Warm-up, s.
    pub warmup_s: f64,
    /// The workload over warm-up and period.
    pub workload: WorkloadModel,
    /// Events in plant time (plant time 0 = warm-up start).
    pub events: Vec<ScheduledFault>,
}

impl Scenario {
    /// Plant time at which scoring starts, s.
    pub fn scoring_start_s(&self) -> f64 {
        self.warmup_s
    }

    /// Plant time at which the run ends, s.
    pub fn end_s(&self) -> f64 {
        self.warmup_s + self.period.duration_s
    }

    /// Weather-year time of plant time `t`, s.
    pub fn weather_time_s(&self, t_plant_s: f64) -> f64 {
        self.period.start_s - self.warmup_s + t_plant_s
    }
}

fn resolve_path(base: &Path, p: &str) -> PathBuf {
    let path = Path::new(p);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

/// Largest input file the harness reads (site, scenario, weather, traces), bytes. The shipped
/// data are a few MB; the bound stops a device file (`/dev/zero`) from filling memory.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

fn read_text(what: &str, path: &Path) -> Result<String, ScenarioError> {
    use std::io::Read;
    let io = |e: std::io::Error| ScenarioError::Io {
        what: what.into(),
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(ScenarioError::Content {
            what: what.into(),
            path: path.display().to_string(),
            message: format!("larger than {} MiB: not a {what}", MAX_INPUT_BYTES >> 20),
        });
    }
    String::from_utf8(bytes).map_err(|e| ScenarioError::Content {
        what: what.into(),
        path: path.display().to_string(),
        message: format!("not UTF-8 text: {e}"),
    })
}

/// Read a duty-cycle trace file: the `.tar.gz` as published (its one CSV inside) or a plain CSV.
pub fn read_duty_cycle(path: &Path) -> Result<String, ScenarioError> {
    let what = "duty-cycle trace";
    let io = |e: std::io::Error| ScenarioError::Io {
        what: what.into(),
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let name = path.to_string_lossy();
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        let f = std::fs::File::open(path).map_err(io)?;
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
        for entry in ar.entries().map_err(io)? {
            let mut entry = entry.map_err(io)?;
            let is_csv = entry
                .path()
                .map(|p| p.to_string_lossy().ends_with(".csv"))
                .unwrap_or(false);
            if is_csv {
                let mut s = String::new();
                (&mut entry)
                    .take(MAX_INPUT_BYTES + 1)
                    .read_to_string(&mut s)
                    .map_err(io)?;
                if s.len() as u64 > MAX_INPUT_BYTES {
                    return Err(ScenarioError::Content {
                        what: what.into(),
                        path: path.display().to_string(),
                        message: format!("its CSV is larger than {} MiB", MAX_INPUT_BYTES >> 20),
                    });
                }
                return Ok(s);
            }
        }
        Err(ScenarioError::Content {
            what: what.into(),
            path: path.display().to_string(),
            message: "the archive holds no .csv file".into(),
        })
    } else {
        read_text(what, path)
    }
}

impl ScenarioSpec {
    /// Load every file the spec names (relative to `base_dir`) and build the runnable scenario.
    pub fn resolve(&self, base_dir: &Path) -> Result<Scenario, ScenarioError> {
        self.check()?;
        let s = &self.scenario;
        let site = match builtin_site(&s.site) {
            Ok(site) => site,
            Err(_) if s.site.ends_with(".toml") || s.site.contains('/') => {
                let path = resolve_path(base_dir, &s.site);
                let text = read_text("site file", &path)?;
                Site::from_toml_str(&path.display().to_string(), &text).map_err(|e| ScenarioError::Content {
                    what: "site file".into(),
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?
            }
            Err(e) => return Err(invalid("scenario.site", format!("{:?}", s.site), e.to_string())),
        };
        let w = &self.weather;
        let (weather, weather_name) = if w.source == "synthetic" {
            (WeatherSeries::synthetic(&w.synthetic, s.seed), "synthetic".to_string())
        } else {
            let path = resolve_path(base_dir, &w.source);
            let text = read_text("weather file", &path)?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| w.source.clone());
            let series = WeatherSeries::from_epw_str(&name, &text).map_err(|e| ScenarioError::Content {
                what: "weather file".into(),
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            (series, name)
        };
        let basis = heat_basis(&site);
        let (period, period_name) = match (w.start_day, w.days) {
            (Some(d0), Some(n)) => (
                Period {
                    kind: PeriodKind::Year,
                    start_s: d0 * SECONDS_PER_DAY,
                    duration_s: n * SECONDS_PER_DAY,
                },
                format!("days {d0}–{}", d0 + n),
            ),
            _ => {
                let kind: PeriodKind = w.period.parse().map_err(|e: coolplane_core::weather::WeatherError| {
                    invalid("weather.period", &w.period, e.to_string())
                })?;
                (weather.find_period(kind, basis), kind.to_string())
            }
        };
        let warmup_s = s.warmup_h * 3600.0;
        let horizon = warmup_s + period.duration_s + s.step_s;
        let gpus = Topology::new(&site).gpu_count as u32;
        let wl = &self.workload;
        let mut workload = match wl.kind.as_str() {
            "synthetic" => WorkloadModel::synthetic(&wl.synthetic, gpus, horizon, s.seed),
            kind => {
                let p = wl.path.as_deref().unwrap_or_default();
                let path = resolve_path(base_dir, p);
                let text = read_text("workload trace", &path)?;
                let r = if kind == "helios" {
                    WorkloadModel::from_helios_occupancy(&text, gpus, horizon, s.seed)
                } else {
                    WorkloadModel::from_alibaba_pods(&text, gpus, horizon, s.seed)
                };
                r.map_err(|e| ScenarioError::Content {
                    what: "workload trace".into(),
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?
            }
        };
        if let Some(d) = &wl.duty_cycle {
            let path = resolve_path(base_dir, d);
            let text = read_duty_cycle(&path)?;
            let traces = parse_duty_cycle_csv(&text).map_err(|e| ScenarioError::Content {
                what: "duty-cycle trace".into(),
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            workload = workload.with_duty_traces(traces);
        }
        let n_cdu = site.cdu_count() as u32;
        let n_hall = site.hall_count() as u32;
        let mut events = Vec::new();
        for (i, e) in self.events.iter().enumerate() {
            check_targets(i, &e.fault, n_cdu, n_hall, gpus)?;
            events.push(ScheduledFault {
                start_s: warmup_s + e.start_h * 3600.0,
                end_s: e.end_h.map(|h| warmup_s + h * 3600.0),
                fault: e.fault,
            });
        }
        Ok(Scenario {
            spec: self.clone(),
            site,
            weather,
            weather_name,
            period,
            period_name,
            warmup_s,
            workload,
            events,
        })
    }
}

/// Numeric parameters of a fault: finite and within what the physics allows, the field named.
fn check_fault_values(i: usize, f: &FaultKind) -> Result<(), ScenarioError> {
    use coolplane_sim_plant::faults::SensorFailure;
    let range = |name: &str, v: f64, lo: f64, hi: f64, what: &str| {
        if v.is_finite() && v >= lo && v <= hi {
            Ok(())
        } else {
            Err(invalid(
                &format!("events[{i}].fault.{name}"),
                v,
                format!("must be a finite number within [{lo}, {hi}] ({what})"),
            ))
        }
    };
    match *f {
        FaultKind::ValveStuck { position, .. } => range("position", position, 0.0, 1.0, "fraction open"),
        FaultKind::HxFouling { ua_loss_pct, .. } => range("ua_loss_pct", ua_loss_pct, 0.0, 95.0, "% of UA lost"),
        FaultKind::FanFailure { fraction, .. } => {
            range("fraction", fraction, 0.0, 1.0, "fraction of fan capacity lost")
        }
        FaultKind::Sensor {
            failure: SensorFailure::Drift { rate_per_h },
            ..
        } => range("failure.rate_per_h", rate_per_h, -100.0, 100.0, "K or % per hour"),
        FaultKind::HeatWave { offset_k } => range("offset_k", offset_k, -30.0, 30.0, "K added to dry- and wet-bulb"),
        FaultKind::BudgetCut { budget_kw } => {
            if budget_kw.is_finite() && budget_kw > 0.0 && budget_kw <= 1e8 {
                Ok(())
            } else {
                Err(invalid(
                    &format!("events[{i}].fault.budget_kw"),
                    budget_kw,
                    "must be a positive finite power, at most 1e8 kW",
                ))
            }
        }
        FaultKind::LoadStorm { util } => range("util", util, 0.0, 1.0, "utilisation"),
        FaultKind::PumpTrip { .. } | FaultKind::CduOffline { .. } | FaultKind::CommsLoss | FaultKind::Sensor { .. } => {
            Ok(())
        }
    }
}

fn check_targets(i: usize, f: &FaultKind, n_cdu: u32, n_hall: u32, n_gpu: u32) -> Result<(), ScenarioError> {
    use coolplane_sim_plant::faults::SensorPoint;
    let field = format!("events[{i}].fault");
    let bad = |what: &str, v: u32, n: u32| {
        Err(invalid(
            &field,
            format!("{what} {v}"),
            format!("the site has {n} (indices 0–{})", n.saturating_sub(1)),
        ))
    };
    match *f {
        FaultKind::PumpTrip { cdu }
        | FaultKind::ValveStuck { cdu, .. }
        | FaultKind::HxFouling { cdu, .. }
        | FaultKind::CduOffline { cdu }
            if cdu >= n_cdu =>
        {
            bad("cdu", cdu, n_cdu)
        }
        FaultKind::FanFailure { hall, .. } if hall >= n_hall => bad("hall", hall, n_hall),
        FaultKind::Sensor { point, .. } => match point {
            SensorPoint::CduSupplyTemp(c)
            | SensorPoint::CduReturnTemp(c)
            | SensorPoint::CduFlow(c)
            | SensorPoint::TankPressure(c)
                if c >= n_cdu =>
            {
                bad("cdu", c, n_cdu)
            }
            SensorPoint::FacilitySupplyTemp(h) if h >= n_hall => bad("hall", h, n_hall),
            SensorPoint::GpuTemp(g) if g >= n_gpu => bad("gpu", g, n_gpu),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Which outdoor temperature a site's heat rejection depends on.
pub fn heat_basis(site: &Site) -> HeatBasis {
    if site.halls.iter().any(|h| h.facility.tower.is_some()) {
        HeatBasis::WetBulb
    } else {
        HeatBasis::DryBulb
    }
}

/// Parse and resolve a scenario file from disk.
pub fn load_scenario_file(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = read_text("scenario file", path)?;
    let spec = ScenarioSpec::from_toml_str(&path.display().to_string(), &text)?;
    let base = path.parent().unwrap_or(Path::new("."));
    spec.resolve(base)
}
