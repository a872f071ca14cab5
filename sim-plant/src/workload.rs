//! Jobs and GPU utilisation for the simulated cluster.
//!
//! The plant has `total_gpus` GPUs (flat indices). A cluster scheduler (elsewhere) places the jobs
//! of a [`WorkloadModel`] on free GPUs; this module says which jobs arrive when, how many GPUs
//! each needs for how long, and how busy its GPUs are over time ([`WorkloadModel::utilisation`]).
//!
//! # Conventions
//!
//! * Time `t = 0` is the start of the simulation (warm-up included) and, for the diurnal patterns,
//!   local midnight. Every generator runs its job process from before `t = 0` (a lead time) so the
//!   cluster is busy at `t = 0`; a job already running then appears with `arrival_s = 0` and its
//!   remaining duration (its checkpoint phase is shifted so its schedule continues). `arrival_s`
//!   is never negative, jobs are sorted by arrival and `id`s number them in that order.
//! * Generated job sizes are multiples of 8 GPUs (one node), at least 8 and at most the cluster
//!   (for clusters under 8 GPUs: whole GPUs).
//! * The synthetic and Helios generators keep their own books as if every job started on arrival
//!   and never hold more GPUs than the cluster has; where one job ends and another arrives at the
//!   same instant, the end is meant to be processed first. The Alibaba replay is open-loop and
//!   can briefly exceed the cluster (the scheduler queues). All generated times are whole seconds, so
//!   `arrival_s + duration_s` is exact.
//! * Utilisation is a pure function of the job and the time since it started: all GPUs of a job
//!   share it, so a training job's checkpoint dip is synchronous across its GPUs by construction.
//!   For diurnally aligned inference traces the time of day is taken as `offset_s + t_since_start`,
//!   i.e. the job is assumed to start close to its arrival (inference is small and high-priority).
//! * Priorities: higher is more important. Synthetic and Helios training 1, synthetic inference 2;
//!   Alibaba QoS `Guaranteed` 3, `LS` 2, `Burstable` 1, `BE` 0.
//!
//! # Synthetic model ([`WorkloadModel::synthetic`], [`SyntheticWorkload`])
//!
//! Demand tracking, advanced in 60 s steps from `−lead` (the longest training duration, at most
//! 14 days) to the horizon:
//!
//! * **Training**: a constant GPU budget `target_occupancy × training_share × total_gpus` is kept
//!   filled like a cluster with a FIFO backlog and EASY backfilling. The head of the queue has a
//!   size drawn log-uniformly from `training_gpus` (default 512–4,096, multiples of 8, capped at
//!   `max_job_fraction` of the cluster) and starts as soon as the budget has room for it; while
//!   it waits, the idle part of the budget is backfilled with jobs (sizes drawn from the same
//!   distribution below the free room, else exactly the free room if at least a quarter of the
//!   minimum size) that end by the head's reservation, i.e. the time enough running jobs will have
//!   ended, if that is at least 30 min away. Drawing sizes from the full distribution for the head
//!   keeps the large jobs: filling only what is free would ratchet sizes down over time.
//!   Durations are log-normal (median 16 h, σ 0.9, 2–120 h; backfill jobs are cut at the
//!   reservation). Profile: busy 0.95–1.0 (large-model training runs at the power limit: with
//!   leakage, demand at u ≥ 0.95 exceeds the TDP, so the GPU is power-limited and warmer dies cost
//!   clock speed), checkpoint every 30–60 min for 1–5 min at 0.1–0.2
//!   (drawn per job, random phase). A 4,096-GPU job at ~1 kW per GPU swings about 3 MW within a
//!   second at every checkpoint.
//! * **Inference**: GPU demand `mean × (1 + A·cos(2π(h − peak)/24))` plus Poisson bursts
//!   (default ±30 % around 20:00, 3 bursts a day of +30 % for ~45 min) is tracked with small jobs
//!   (8–64 GPUs, log-normal durations, median 6 h): while below demand a job is added (so the
//!   allocation overshoots by less than one job); when demand falls by more than the largest
//!   inference job, jobs are ended (autoscaling: the smallest job covering the excess, else the
//!   largest, repeatedly, preferring those nearest their natural end). Each job follows one of
//!   `inference_traces` synthetic one-day duty traces (60 s period, diurnal, bursty, AR(1) noise)
//!   aligned to the time of day. [`WorkloadModel::with_duty_traces`] swaps in measured traces.
//!
//! Default at 10,368 GPUs over a year: mean occupancy 0.864 (training 79 % of the GPU-time),
//! 89 k jobs; 0.863 and 0.9 M jobs at 110,000 GPUs; 0.90 at 640 GPUs (jobs capped at 320 GPUs).
//!
//! # Helios occupancy ([`WorkloadModel::from_helios_occupancy`])
//!
//! `cluster_sequence_vc.csv` (SenseTime Helios, one 208-GPU virtual cluster, May 2020, one row
//! per minute): occupancy `running_gpu_num / total_gpu_num` per minute, looped over the horizon
//! (trace minute 0 = `t = 0`). The target demand `round(occupancy × total_gpus)` is tracked each
//! minute by training jobs: while demand exceeds the running GPUs by at least 8, new jobs arrive
//! with sizes of at most the gap; when demand falls, the smallest running job at least as large
//! as the excess ends (else the largest, repeatedly; ties: nearest natural end) and the gap is
//! refilled. Job sizes are the empirical distribution of the trace's positive
//! minute-to-minute increments of `running_gpu_num` (each taken as one job start), scaled by
//! `total_gpus / total_gpu_num` and rounded to multiples of 8 (redrawn while larger than the gap
//! they fill). Natural durations are log-normal (σ 1) with the mean given by Little's law from
//! the trace (mean running GPU jobs / job starts per second, ≈ 10 h for this VC). The tracking
//! error is the rounding to 8 GPUs: on the real trace the hourly occupancy error is 0.02
//! percentage points at 10,368 GPUs and 0.6 at 640 GPUs.
//!
//! # Alibaba pods ([`WorkloadModel::from_alibaba_pods`], [`AlibabaOptions`])
//!
//! `openb_pod_list_default.csv` (Alibaba GPU cluster trace v2023). Pods with `num_gpu = 0` are
//! skipped, a fractional GPU (`gpu_milli < 1000`) counts as one, pods `Pending` without a
//! scheduled time never ran and are skipped. Lifetime = deletion − scheduled (creation if none).
//!
//! The pod timestamps do not describe a full 6,200-GPU cluster: replayed by time, the GPU pods
//! occupy only 30–64 GPUs at once (mean ≈ 42 in the active window, never above 71), and 99 % are created in
//! the last 35 of the 149 days. So replicating the list `round(total_gpus / 6,200)` times would
//! leave a site about 1 % occupied. Instead the trace gives the *shape* (arrival process,
//! diurnal and bursty; pod sizes; lifetimes; QoS) and the scale is fitted to the site:
//!
//! * window: from the trace midnight before the 1st-percentile pod start to the last whole trace
//!   day before the last deletion; pods alive at the window start are carried in at its start,
//!   pods alive at its end are cut there; the window is looped over the horizon;
//! * each trace GPU becomes `unit` site GPUs (`unit` = 8, one node; larger for very large sites so
//!   that at most `max_replicas` copies are needed) and the pod list is replicated `k` times with
//!   independent uniform start jitter of ±`jitter_s` (carried-in starts and cut ends stay put),
//!   with `k·unit` chosen so that the 99th percentile of the trace's concurrent GPUs maps to
//!   `peak_occupancy` (default 0.95) of the site. `k` may be fractional: the last copy keeps each
//!   pod with probability `k − ⌊k⌋`. Mean occupancy is then ≈ 0.67; the replay is open-loop,
//!   so at the trace's highest concurrency hourly demand reaches ≈ 1.03–1.05 of the cluster and
//!   the scheduler queues. (10,368 GPUs: k ≈ 20.9, unit 8, 1.37 M jobs a year; 110,000 GPUs:
//!   k ≈ 31.6, unit 56, 2.1 M jobs a year);
//! * kind: inference for `LS`/`Guaranteed` pods with at most 2 GPUs living at least an hour
//!   (long-running latency-sensitive services); everything else training.
//!
//! # Duty cycle ([`parse_duty_cycle_csv`])
//!
//! `pod_gpu_duty_cycle_anon.csv` (inside `pod_gpu_duty_cycle_anon.tar.gz`, header
//! `value,timestamp_anon,container_ip`; value in percent, ~57 s sampling): grouped by container,
//! sorted by time, resampled to a fixed period by time-weighted averaging of the sample-and-hold
//! signal (each sample holds until the next; the last for the median interval), `value/100`
//! clamped to [0, 1]. Containers with fewer than [`DUTY_MIN_SAMPLES`] samples are skipped (133 of
//! the 143 pods remain). These inference pods are mostly idle: mean duty cycle ≈ 0.07.
//!
//! The module does no IO, reads no clock, and draws all randomness from a ChaCha8 generator seeded
//! by the caller.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// GPUs of the reference hall the synthetic defaults are tuned for.
pub const REFERENCE_HALL_GPUS: u32 = 10_368;
/// Step of the demand-tracking generators, s.
pub const GENERATOR_STEP_S: f64 = 60.0;
/// Length of one day, s (period of the diurnal patterns).
pub const DAY_S: f64 = 86_400.0;
/// Longest horizon the generators accept (10 years), s; longer horizons are cut to this.
pub const MAX_HORIZON_S: f64 = 10.0 * 365.0 * DAY_S;
/// Period the duty-cycle traces are resampled to by [`parse_duty_cycle_csv`], s.
pub const DUTY_RESAMPLE_PERIOD_S: f32 = 60.0;
/// Containers with fewer samples than this are skipped by [`parse_duty_cycle_csv`].
pub const DUTY_MIN_SAMPLES: usize = 60;

const STEP: i64 = 60;
/// Backfill only into a reservation window at least this long, s.
const MIN_BACKFILL_S: i64 = 1800;
const DAY: i64 = 86_400;

/// Errors of the trace parsers and parameter checks.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum WorkloadError {
    /// A malformed line of CSV text.
    #[error("line {line}, column `{column}`: {message}")]
    Parse {
        /// 1-based line number in the text.
        line: usize,
        /// Name of the offending column (or `header`).
        column: String,
        /// What was wrong.
        message: String,
    },
    /// The input parsed but holds nothing usable.
    #[error("no usable data: {0}")]
    NoData(String),
    /// A parameter is out of range.
    #[error("invalid parameter `{name}`: {message}")]
    InvalidParameter {
        /// Parameter name.
        name: String,
        /// What was wrong.
        message: String,
    },
}

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    /// Synchronous training: all GPUs busy together, periodic checkpoint dips.
    Training,
    /// Serving: bursty, diurnal.
    Inference,
}

/// How a job's utilisation evolves; see [`WorkloadModel::utilisation`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UtilProfile {
    /// steady high utilisation with synchronous periodic dips (checkpoint/eval) across all the job's GPUs
    Training {
        /// Utilisation between checkpoints.
        busy_util: f32,
        /// Checkpoint period, s.
        checkpoint_period_s: f32,
        /// Length of each checkpoint dip, s.
        checkpoint_len_s: f32,
        /// Utilisation during a dip.
        checkpoint_util: f32,
        /// The dip occupies `(t + phase_s) mod period < len`, `t` the time since start.
        phase_s: f32,
    },
    /// bursty inference: follows duty-cycle trace number `trace` of the model (looped), starting `offset_s` into it
    Inference {
        /// Trace index (taken modulo the number of traces of the model).
        trace: u32,
        /// Position in the trace at the job's start, s.
        offset_s: f32,
    },
    /// Fixed utilisation.
    Constant(f32),
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Unique id (index in arrival order).
    pub id: u64,
    /// Arrival time, s since the simulation start (never negative).
    pub arrival_s: f64,
    /// GPUs needed (gang-scheduled).
    pub gpus: u32,
    /// Run time once started, s.
    pub duration_s: f64,
    /// Training or inference.
    pub kind: JobKind,
    /// Scheduling priority, higher is more important.
    pub priority: u8,
    /// Utilisation profile.
    pub profile: UtilProfile,
}

/// A utilisation trace sampled at a fixed period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DutyTrace {
    /// Sampling period, s.
    pub period_s: f32,
    /// Utilisation 0..1, one value per period.
    pub util: Vec<f32>,
}

impl DutyTrace {
    /// Length of the trace, s.
    pub fn len_s(&self) -> f64 {
        self.period_s as f64 * self.util.len() as f64
    }

    /// Mean utilisation (0 for an empty trace).
    pub fn mean(&self) -> f32 {
        if self.util.is_empty() {
            0.0
        } else {
            self.util.iter().map(|&u| u as f64).sum::<f64>() as f32 / self.util.len() as f32
        }
    }
}

/// Parameters of the synthetic workload. Ranges are `[min, max]`, drawn uniformly unless stated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyntheticWorkload {
    /// Mean fraction of GPUs to keep allocated (training budget + mean inference demand).
    pub target_occupancy: f64,
    /// Share of the target held by training; the rest serves inference.
    pub training_share: f64,
    /// Training job sizes, GPUs (log-uniform, rounded to multiples of 8).
    pub training_gpus: [u32; 2],
    /// No job takes more than this fraction of the cluster.
    pub max_job_fraction: f64,
    /// Median training duration, h (log-normal).
    pub training_duration_median_h: f64,
    /// Log-normal σ of training durations.
    pub training_duration_sigma: f64,
    /// Training durations are clamped to this range, h.
    pub training_duration_range_h: [f64; 2],
    /// Utilisation between checkpoints.
    pub busy_util: [f32; 2],
    /// Checkpoint period, minutes.
    pub checkpoint_period_min: [f32; 2],
    /// Checkpoint dip length, minutes.
    pub checkpoint_len_min: [f32; 2],
    /// Utilisation during a checkpoint dip.
    pub checkpoint_util: [f32; 2],
    /// Inference job sizes, GPUs (log-uniform, multiples of 8).
    pub inference_gpus: [u32; 2],
    /// Median inference job duration, h (log-normal).
    pub inference_duration_median_h: f64,
    /// Log-normal σ of inference durations.
    pub inference_duration_sigma: f64,
    /// Inference durations are clamped to this range, h.
    pub inference_duration_range_h: [f64; 2],
    /// Relative amplitude of the diurnal swing of inference GPU demand.
    pub diurnal_amplitude: f64,
    /// Hour of day (0–24) of peak inference demand and utilisation.
    pub diurnal_peak_hour: f64,
    /// Mean number of inference demand bursts per day (Poisson).
    pub bursts_per_day: f64,
    /// Extra inference demand during a burst, fraction of the mean inference demand.
    pub burst_extra: f64,
    /// Mean burst length, minutes (exponential).
    pub burst_mean_min: f64,
    /// Number of synthetic inference duty traces (one day at 60 s each).
    pub inference_traces: u32,
    /// Mean utilisation of the synthetic inference traces (before bursts).
    pub inference_mean_util: f32,
    /// Diurnal amplitude of inference utilisation (absolute).
    pub inference_util_diurnal_amplitude: f32,
    /// Utilisation bursts per hour in each synthetic inference trace (Poisson).
    pub inference_util_bursts_per_hour: f32,
    /// Height of a utilisation burst (absolute).
    pub inference_util_burst_height: [f32; 2],
    /// Mean length of a utilisation burst, s (exponential).
    pub inference_util_burst_mean_s: f32,
    /// Standard deviation of the AR(1) utilisation noise (absolute, stationary).
    pub inference_util_noise: f32,
}

impl Default for SyntheticWorkload {
    fn default() -> Self {
        Self {
            target_occupancy: 0.86,
            training_share: 0.8,
            training_gpus: [512, 4096],
            max_job_fraction: 0.5,
            training_duration_median_h: 16.0,
            training_duration_sigma: 0.9,
            training_duration_range_h: [2.0, 120.0],
            busy_util: [0.95, 1.0],
            checkpoint_period_min: [30.0, 60.0],
            checkpoint_len_min: [1.0, 5.0],
            checkpoint_util: [0.1, 0.2],
            inference_gpus: [8, 64],
            inference_duration_median_h: 6.0,
            inference_duration_sigma: 1.0,
            inference_duration_range_h: [0.25, 72.0],
            diurnal_amplitude: 0.3,
            diurnal_peak_hour: 20.0,
            bursts_per_day: 3.0,
            burst_extra: 0.3,
            burst_mean_min: 45.0,
            inference_traces: 32,
            inference_mean_util: 0.45,
            inference_util_diurnal_amplitude: 0.2,
            inference_util_bursts_per_hour: 1.0,
            inference_util_burst_height: [0.2, 0.5],
            inference_util_burst_mean_s: 300.0,
            inference_util_noise: 0.08,
        }
    }
}

fn bad(name: &str, message: impl Into<String>) -> WorkloadError {
    WorkloadError::InvalidParameter {
        name: name.to_string(),
        message: message.into(),
    }
}

fn in_range(name: &str, v: f64, lo: f64, hi: f64) -> Result<(), WorkloadError> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(bad(name, format!("{v} is outside [{lo}, {hi}]")))
    }
}

fn range_ok(name: &str, r: [f64; 2], lo: f64, hi: f64) -> Result<(), WorkloadError> {
    in_range(name, r[0], lo, hi)?;
    in_range(name, r[1], lo, hi)?;
    if r[0] > r[1] {
        return Err(bad(name, format!("min {} exceeds max {}", r[0], r[1])));
    }
    Ok(())
}

/// Clamps `v` into `[lo, hi]` (`lo ≤ hi`), mapping NaN to `lo`.
fn clampf(v: f64, lo: f64, hi: f64) -> f64 {
    if v.is_nan() {
        lo
    } else {
        v.max(lo).min(hi)
    }
}

fn clamp_range(r: [f64; 2], lo: f64, hi: f64) -> [f64; 2] {
    let a = clampf(r[0], lo, hi);
    let b = clampf(r[1], lo, hi);
    [a.min(b), a.max(b)]
}

fn f2(r: [f32; 2]) -> [f64; 2] {
    [r[0] as f64, r[1] as f64]
}

fn u2(r: [u32; 2]) -> [f64; 2] {
    [r[0] as f64, r[1] as f64]
}

impl SyntheticWorkload {
    /// Checks every parameter; [`WorkloadModel::synthetic`] clamps instead of failing.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        in_range("target_occupancy", self.target_occupancy, 0.0, 1.0)?;
        in_range("training_share", self.training_share, 0.0, 1.0)?;
        range_ok("training_gpus", u2(self.training_gpus), 1.0, 1e7)?;
        in_range("max_job_fraction", self.max_job_fraction, 1e-6, 1.0)?;
        in_range("training_duration_median_h", self.training_duration_median_h, 1e-3, 1e4)?;
        in_range("training_duration_sigma", self.training_duration_sigma, 0.0, 5.0)?;
        range_ok("training_duration_range_h", self.training_duration_range_h, 1e-3, 1e4)?;
        range_ok("busy_util", f2(self.busy_util), 0.0, 1.0)?;
        range_ok("checkpoint_period_min", f2(self.checkpoint_period_min), 0.1, 1e5)?;
        range_ok("checkpoint_len_min", f2(self.checkpoint_len_min), 0.0, 1e5)?;
        if self.checkpoint_len_min[1] >= self.checkpoint_period_min[0] {
            return Err(bad(
                "checkpoint_len_min",
                "the longest dip must be shorter than the shortest period",
            ));
        }
        range_ok("checkpoint_util", f2(self.checkpoint_util), 0.0, 1.0)?;
        range_ok("inference_gpus", u2(self.inference_gpus), 1.0, 1e7)?;
        in_range(
            "inference_duration_median_h",
            self.inference_duration_median_h,
            1e-3,
            1e4,
        )?;
        in_range("inference_duration_sigma", self.inference_duration_sigma, 0.0, 5.0)?;
        range_ok("inference_duration_range_h", self.inference_duration_range_h, 1e-3, 1e4)?;
        in_range("diurnal_amplitude", self.diurnal_amplitude, 0.0, 1.0)?;
        in_range("diurnal_peak_hour", self.diurnal_peak_hour, 0.0, 24.0)?;
        in_range("bursts_per_day", self.bursts_per_day, 0.0, 1e3)?;
        in_range("burst_extra", self.burst_extra, 0.0, 10.0)?;
        in_range("burst_mean_min", self.burst_mean_min, 0.1, 1e4)?;
        in_range("inference_traces", self.inference_traces as f64, 1.0, 10_000.0)?;
        in_range("inference_mean_util", self.inference_mean_util as f64, 0.0, 1.0)?;
        in_range(
            "inference_util_diurnal_amplitude",
            self.inference_util_diurnal_amplitude as f64,
            0.0,
            1.0,
        )?;
        in_range(
            "inference_util_bursts_per_hour",
            self.inference_util_bursts_per_hour as f64,
            0.0,
            1e3,
        )?;
        range_ok(
            "inference_util_burst_height",
            f2(self.inference_util_burst_height),
            0.0,
            1.0,
        )?;
        in_range(
            "inference_util_burst_mean_s",
            self.inference_util_burst_mean_s as f64,
            1.0,
            1e6,
        )?;
        in_range("inference_util_noise", self.inference_util_noise as f64, 0.0, 1.0)?;
        Ok(())
    }

    /// A copy with every parameter clamped into its valid range (what the generator uses).
    pub fn sanitized(&self) -> Self {
        let d = Self::default();
        let r32 = |r: [f32; 2], lo: f64, hi: f64| {
            let c = clamp_range(f2(r), lo, hi);
            [c[0] as f32, c[1] as f32]
        };
        let ru = |r: [u32; 2]| {
            [
                r[0].clamp(1, 10_000_000).min(r[1].max(1)),
                r[1].clamp(1, 10_000_000).max(r[0].clamp(1, 10_000_000)),
            ]
        };
        let period = r32(self.checkpoint_period_min, 0.1, 1e5);
        let len = r32(self.checkpoint_len_min, 0.0, (period[0] as f64) * 0.5);
        Self {
            target_occupancy: clampf(self.target_occupancy, 0.0, 1.0),
            training_share: clampf(self.training_share, 0.0, 1.0),
            training_gpus: ru(self.training_gpus),
            max_job_fraction: clampf(self.max_job_fraction, 1e-6, 1.0),
            training_duration_median_h: clampf(self.training_duration_median_h, 1e-3, 1e4),
            training_duration_sigma: clampf(self.training_duration_sigma, 0.0, 5.0),
            training_duration_range_h: clamp_range(self.training_duration_range_h, 1e-3, 1e4),
            busy_util: r32(self.busy_util, 0.0, 1.0),
            checkpoint_period_min: period,
            checkpoint_len_min: len,
            checkpoint_util: r32(self.checkpoint_util, 0.0, 1.0),
            inference_gpus: ru(self.inference_gpus),
            inference_duration_median_h: clampf(self.inference_duration_median_h, 1e-3, 1e4),
            inference_duration_sigma: clampf(self.inference_duration_sigma, 0.0, 5.0),
            inference_duration_range_h: clamp_range(self.inference_duration_range_h, 1e-3, 1e4),
            diurnal_amplitude: clampf(self.diurnal_amplitude, 0.0, 1.0),
            diurnal_peak_hour: clampf(self.diurnal_peak_hour, 0.0, 24.0),
            bursts_per_day: clampf(self.bursts_per_day, 0.0, 1e3),
            burst_extra: clampf(self.burst_extra, 0.0, 10.0),
            burst_mean_min: clampf(self.burst_mean_min, 0.1, 1e4),
            inference_traces: self.inference_traces.clamp(1, 10_000),
            inference_mean_util: clampf(self.inference_mean_util as f64, 0.0, 1.0) as f32,
            inference_util_diurnal_amplitude: clampf(self.inference_util_diurnal_amplitude as f64, 0.0, 1.0) as f32,
            inference_util_bursts_per_hour: clampf(self.inference_util_bursts_per_hour as f64, 0.0, 1e3) as f32,
            inference_util_burst_height: r32(self.inference_util_burst_height, 0.0, 1.0),
            inference_util_burst_mean_s: if self.inference_util_burst_mean_s.is_finite() {
                self.inference_util_burst_mean_s.clamp(1.0, 1e6)
            } else {
                d.inference_util_burst_mean_s
            },
            inference_util_noise: clampf(self.inference_util_noise as f64, 0.0, 1.0) as f32,
        }
    }
}

/// Options of [`WorkloadModel::from_alibaba_pods_with`]; see the module documentation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlibabaOptions {
    /// The 99th percentile of the trace's concurrent GPUs maps to this fraction of the site.
    pub peak_occupancy: f64,
    /// Uniform start jitter of each replica, ± s.
    pub jitter_s: f64,
    /// Most copies of the pod list; beyond, each trace GPU becomes more than 8 site GPUs.
    pub max_replicas: u32,
    /// LS/Guaranteed pods living at least this long (and with few GPUs) are inference, s.
    pub inference_min_lifetime_s: f64,
    /// LS/Guaranteed pods with at most this many GPUs (and long-lived) are inference.
    pub inference_max_gpus: u32,
    /// The window starts at the trace midnight before this quantile of pod start times.
    pub window_start_quantile: f64,
}

impl Default for AlibabaOptions {
    fn default() -> Self {
        Self {
            peak_occupancy: 0.95,
            jitter_s: 900.0,
            max_replicas: 32,
            inference_min_lifetime_s: 3600.0,
            inference_max_gpus: 2,
            window_start_quantile: 0.01,
        }
    }
}

/// Jobs sorted by arrival, the duty traces inference jobs follow, and a name.
#[derive(Debug, Clone)]
pub struct WorkloadModel {
    name: String,
    description: String,
    total_gpus: u32,
    horizon_s: f64,
    jobs: Vec<JobSpec>,
    traces: Vec<DutyTrace>,
    /// `1 / period_s` of each trace (O(1) lookups).
    inv_period: Vec<f64>,
}

// ---------------------------------------------------------------------------------------------
// Small numeric helpers.

/// Job size granularity and cap for a cluster of `n` GPUs.
#[derive(Debug, Clone, Copy)]
struct Sizing {
    gran: u32,
    cap: u32,
}

impl Sizing {
    fn new(n: u32, cap_fraction: f64) -> Self {
        let gran = if n >= 8 { 8 } else { 1 };
        let frac_cap = (n as f64 * cap_fraction).floor() as u32;
        let cap = (frac_cap / gran * gran).max(gran).min(n.max(1) / gran * gran);
        Self {
            gran,
            cap: cap.max(gran.min(n.max(1))),
        }
    }

    /// Rounds to the nearest multiple of the granularity within `[gran, cap]`.
    fn round(&self, x: f64) -> u32 {
        let g = self.gran as f64;
        let r = if x.is_finite() { (x / g).round() * g } else { g };
        (r.max(g).min(self.cap as f64)) as u32
    }

    /// Largest multiple of the granularity not above `x` (may be 0).
    fn floor(&self, x: u64) -> u32 {
        let g = self.gran as u64;
        (x / g * g).min(self.cap as u64) as u32
    }
}

fn uni(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

fn exp_sample(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    -(1.0 - rng.random::<f64>()).ln() * mean
}

fn lognormal(rng: &mut ChaCha8Rng, median: f64, sigma: f64, lo: f64, hi: f64) -> f64 {
    let z: f64 = rng.sample(StandardNormal);
    clampf(median * (sigma * z).exp(), lo, hi)
}

fn training_profile(rng: &mut ChaCha8Rng, p: &SyntheticWorkload) -> UtilProfile {
    let period = uni(
        rng,
        p.checkpoint_period_min[0] as f64,
        p.checkpoint_period_min[1] as f64,
    ) * 60.0;
    let len = (uni(rng, p.checkpoint_len_min[0] as f64, p.checkpoint_len_min[1] as f64) * 60.0).min(0.5 * period);
    UtilProfile::Training {
        busy_util: uni(rng, p.busy_util[0] as f64, p.busy_util[1] as f64) as f32,
        checkpoint_period_s: period.round().max(1.0) as f32,
        checkpoint_len_s: len.round() as f32,
        checkpoint_util: uni(rng, p.checkpoint_util[0] as f64, p.checkpoint_util[1] as f64) as f32,
        phase_s: uni(rng, 0.0, period).floor() as f32,
    }
}

fn sane_horizon(horizon_s: f64) -> i64 {
    if horizon_s.is_finite() && horizon_s > 0.0 {
        horizon_s.min(MAX_HORIZON_S).ceil() as i64
    } else {
        0
    }
}

// ---------------------------------------------------------------------------------------------
// Demand tracker shared by the synthetic and Helios generators.

#[derive(Debug, Clone)]
struct GenJob {
    arrival: i64,
    end: i64,
    gpus: u32,
    kind: JobKind,
    priority: u8,
    profile: UtilProfile,
    running: bool,
    slot: usize,
}

/// Draws the properties of new jobs for a tracker.
trait Spawner {
    /// A size of at most `room` GPUs, or `None` to leave the room empty.
    fn size(&mut self, rng: &mut ChaCha8Rng, room: u64) -> Option<u32>;
    /// Natural duration (whole seconds, ≥ 60), kind, priority, profile of a job of `gpus` GPUs.
    fn make(&mut self, rng: &mut ChaCha8Rng, gpus: u32) -> (i64, JobKind, u8, UtilProfile);
}

/// Keeps a set of running jobs near a GPU target: ends jobs at their natural end, ends jobs
/// when the target falls (optional), starts new jobs when it rises.
struct Tracker {
    running: Vec<usize>,
    ends: BinaryHeap<Reverse<(i64, usize)>>,
    alloc: u64,
    min_room: u64,
}

impl Tracker {
    fn new(min_room: u64) -> Self {
        Self {
            running: Vec::new(),
            ends: BinaryHeap::new(),
            alloc: 0,
            min_room: min_room.max(1),
        }
    }

    fn remove(&mut self, jobs: &mut [GenJob], j: usize) {
        let slot = jobs[j].slot;
        self.running.swap_remove(slot);
        if let Some(&moved) = self.running.get(slot) {
            jobs[moved].slot = slot;
        }
        jobs[j].running = false;
        self.alloc -= jobs[j].gpus as u64;
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        jobs: &mut Vec<GenJob>,
        t: i64,
        gpus: u32,
        dur: i64,
        kind: JobKind,
        priority: u8,
        profile: UtilProfile,
    ) {
        let j = jobs.len();
        jobs.push(GenJob {
            arrival: t,
            end: t + dur.max(STEP),
            gpus,
            kind,
            priority,
            profile,
            running: true,
            slot: self.running.len(),
        });
        self.running.push(j);
        self.ends.push(Reverse((jobs[j].end, j)));
        self.alloc += gpus as u64;
    }

    /// Ends the jobs whose natural end is at or before `t`.
    fn expire(&mut self, jobs: &mut [GenJob], t: i64) {
        while let Some(&Reverse((end, j))) = self.ends.peek() {
            if end > t {
                break;
            }
            self.ends.pop();
            if jobs[j].running && jobs[j].end == end {
                self.remove(jobs, j);
            }
        }
    }

    /// If the allocation exceeds `target + deadband`, ends jobs at `t` until it is at or below
    /// `target`: the smallest job at least as large as the excess (ties: nearest natural end), or,
    /// if none is, the largest job, repeatedly. The caller refills the gap.
    fn force_down(&mut self, jobs: &mut [GenJob], t: i64, target: u64, deadband: u64) {
        if self.alloc <= target + deadband {
            return;
        }
        while self.alloc > target {
            let excess = self.alloc - target;
            let mut best: Option<(bool, u64, i64, usize)> = None;
            for &j in &self.running {
                let g = jobs[j].gpus as u64;
                // Key: jobs covering the excess first, smallest of them; else the largest.
                let covers = g >= excess;
                let key = (!covers, if covers { g } else { u64::MAX - g }, jobs[j].end - t, j);
                let better = match best {
                    None => true,
                    Some(b) => (key.0, key.1, key.2) < (b.0, b.1, b.2),
                };
                if better {
                    best = Some(key);
                }
            }
            let Some((_, _, _, j)) = best else { break };
            jobs[j].end = t;
            self.remove(jobs, j);
        }
    }

    /// Starts jobs at `t`. Exact mode: while the gap to `target` is at least `min_room`, a job of
    /// at most the gap. Overshoot mode: while below `target`, a job of any drawn size (the
    /// allocation ends within one job size above the target). Never uses more than `free` GPUs.
    /// Returns the GPUs started.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &mut self,
        jobs: &mut Vec<GenJob>,
        rng: &mut ChaCha8Rng,
        t: i64,
        target: u64,
        free: u64,
        overshoot: bool,
        spawner: &mut dyn Spawner,
    ) -> u64 {
        let mut started = 0u64;
        loop {
            let left = free - started;
            let room = if overshoot {
                if self.alloc >= target {
                    break;
                }
                left
            } else {
                target.saturating_sub(self.alloc).min(left)
            };
            if room < self.min_room {
                break;
            }
            let Some(gpus) = spawner.size(rng, room) else {
                break;
            };
            if gpus == 0 || gpus as u64 > room {
                break;
            }
            let (dur, kind, priority, profile) = spawner.make(rng, gpus);
            self.start(jobs, t, gpus, dur, kind, priority, profile);
            started += gpus as u64;
        }
        started
    }

    /// Training fill with a FIFO head and EASY backfill. The head job (size drawn from the full
    /// distribution, so large jobs keep their share) starts as soon as the budget has room for
    /// it; meanwhile the idle budget is backfilled with jobs that end by the head's reservation
    /// (the time enough running jobs will have ended). Returns the GPUs started.
    #[allow(clippy::too_many_arguments)]
    fn fill_reserved(
        &mut self,
        jobs: &mut Vec<GenJob>,
        rng: &mut ChaCha8Rng,
        t: i64,
        budget: u64,
        free: u64,
        spawner: &mut TrainingSpawner<'_>,
        head: &mut Option<u32>,
    ) -> u64 {
        let budget_cap = spawner.sizing.floor(budget);
        if budget_cap == 0 {
            return 0;
        }
        let mut started = 0u64;
        let mut reservation: Option<i64> = None;
        loop {
            let room = budget.saturating_sub(self.alloc).min(free - started);
            let h = *head.get_or_insert_with(|| spawner.draw(rng).min(budget_cap));
            if h as u64 <= room {
                let (dur, kind, priority, profile) = spawner.make(rng, h);
                self.start(jobs, t, h, dur, kind, priority, profile);
                started += h as u64;
                *head = None;
                reservation = None;
                continue;
            }
            if room < spawner.backfill_min {
                break;
            }
            let t_res = *reservation.get_or_insert_with(|| self.reservation(jobs, t, budget, h));
            let window = t_res - t;
            if window < MIN_BACKFILL_S {
                break;
            }
            let Some(g) = spawner.size(rng, room) else {
                break;
            };
            let (dur, kind, priority, profile) = spawner.make(rng, g);
            self.start(jobs, t, g, dur.min(window), kind, priority, profile);
            started += g as u64;
        }
        started
    }

    /// Earliest step time at which the running jobs leave `need` GPUs of `budget` free.
    fn reservation(&self, jobs: &[GenJob], t: i64, budget: u64, need: u32) -> i64 {
        let mut ends: Vec<(i64, u32)> = self.running.iter().map(|&j| (jobs[j].end, jobs[j].gpus)).collect();
        ends.sort_unstable();
        let mut free = budget.saturating_sub(self.alloc);
        for (end, g) in ends {
            free += g as u64;
            if free >= need as u64 {
                return (end.max(t) + STEP - 1).div_euclid(STEP) * STEP;
            }
        }
        t
    }
}

/// Turns generated jobs into sorted [`JobSpec`]s: drops those ended by `t = 0` or arriving at or
/// after the horizon, clips those running at `t = 0` (shifting their profile phase).
fn finalize(mut gen: Vec<GenJob>, horizon: i64) -> Vec<JobSpec> {
    gen.retain(|g| g.end > g.arrival && g.end > 0 && g.arrival.max(0) < horizon);
    for g in &mut gen {
        if g.arrival < 0 {
            let shift = (-g.arrival) as f64;
            g.arrival = 0;
            match &mut g.profile {
                UtilProfile::Training {
                    checkpoint_period_s,
                    phase_s,
                    ..
                } => {
                    let p = *checkpoint_period_s as f64;
                    if p > 0.0 {
                        *phase_s = ((*phase_s as f64 + shift).rem_euclid(p)).floor() as f32;
                    }
                }
                UtilProfile::Inference { offset_s, .. } => {
                    *offset_s = ((*offset_s as f64 + shift).rem_euclid(DAY_S)) as f32;
                }
                UtilProfile::Constant(_) => {}
            }
        }
    }
    // Stable sort keeps generation order among equal arrivals.
    gen.sort_by_key(|g| g.arrival);
    gen.into_iter()
        .enumerate()
        .map(|(i, g)| JobSpec {
            id: i as u64,
            arrival_s: g.arrival as f64,
            gpus: g.gpus,
            duration_s: (g.end - g.arrival) as f64,
            kind: g.kind,
            priority: g.priority,
            profile: g.profile,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Synthetic generator.

struct TrainingSpawner<'a> {
    p: &'a SyntheticWorkload,
    sizing: Sizing,
    lo: f64,
    hi: f64,
    backfill_min: u64,
}

impl TrainingSpawner<'_> {
    /// A size from the full log-uniform distribution.
    fn draw(&self, rng: &mut ChaCha8Rng) -> u32 {
        self.sizing
            .round((self.lo.ln() + (self.hi / self.lo).ln() * rng.random::<f64>()).exp())
    }
}

impl Spawner for TrainingSpawner<'_> {
    fn size(&mut self, rng: &mut ChaCha8Rng, room: u64) -> Option<u32> {
        for _ in 0..16 {
            let s = self.draw(rng);
            if s as u64 <= room {
                return Some(s);
            }
        }
        (room >= self.backfill_min)
            .then(|| self.sizing.floor(room))
            .filter(|&s| s > 0)
    }

    fn make(&mut self, rng: &mut ChaCha8Rng, _gpus: u32) -> (i64, JobKind, u8, UtilProfile) {
        let p = self.p;
        let d = lognormal(
            rng,
            p.training_duration_median_h,
            p.training_duration_sigma,
            p.training_duration_range_h[0],
            p.training_duration_range_h[1],
        ) * 3600.0;
        (
            d.round().max(60.0) as i64,
            JobKind::Training,
            1,
            training_profile(rng, p),
        )
    }
}

struct InferenceSpawner<'a> {
    p: &'a SyntheticWorkload,
    sizing: Sizing,
    lo: f64,
    hi: f64,
    min: u32,
    t: i64,
}

impl Spawner for InferenceSpawner<'_> {
    fn size(&mut self, rng: &mut ChaCha8Rng, room: u64) -> Option<u32> {
        for _ in 0..8 {
            let s = self
                .sizing
                .round((self.lo.ln() + (self.hi / self.lo).ln() * rng.random::<f64>()).exp());
            if s as u64 <= room {
                return Some(s);
            }
        }
        let s = self.sizing.floor(room);
        (s >= self.min).then_some(s)
    }

    fn make(&mut self, rng: &mut ChaCha8Rng, _gpus: u32) -> (i64, JobKind, u8, UtilProfile) {
        let p = self.p;
        let d = lognormal(
            rng,
            p.inference_duration_median_h,
            p.inference_duration_sigma,
            p.inference_duration_range_h[0],
            p.inference_duration_range_h[1],
        ) * 3600.0;
        let trace = rng.random_range(0..p.inference_traces.max(1));
        let offset = (self.t as f64).rem_euclid(DAY_S) as f32;
        (
            d.round().max(60.0) as i64,
            JobKind::Inference,
            2,
            UtilProfile::Inference {
                trace,
                offset_s: offset,
            },
        )
    }
}

/// Synthetic one-day inference duty traces (60 s period): diurnal + bursts + AR(1) noise.
fn synthetic_traces(p: &SyntheticWorkload, rng: &mut ChaCha8Rng) -> Vec<DutyTrace> {
    let n = 1440usize;
    let dt = 60.0f64;
    let phi: f64 = 0.9;
    let innov = p.inference_util_noise as f64 * (1.0 - phi * phi).sqrt();
    (0..p.inference_traces.max(1))
        .map(|_| {
            let mut burst = vec![0.0f64; n];
            let rate_per_s = p.inference_util_bursts_per_hour as f64 / 3600.0;
            if rate_per_s > 0.0 {
                let mut t = exp_sample(rng, 1.0 / rate_per_s);
                while t < DAY_S {
                    let len = exp_sample(rng, p.inference_util_burst_mean_s as f64);
                    let h = uni(
                        rng,
                        p.inference_util_burst_height[0] as f64,
                        p.inference_util_burst_height[1] as f64,
                    );
                    let a = (t / dt) as usize;
                    let b = (((t + len) / dt).ceil() as usize).min(n);
                    for v in burst.iter_mut().take(b).skip(a) {
                        *v += h;
                    }
                    t += exp_sample(rng, 1.0 / rate_per_s);
                }
            }
            let mut noise = p.inference_util_noise as f64 * rng.sample::<f64, _>(StandardNormal);
            let util = (0..n)
                .map(|k| {
                    let hour = k as f64 * dt / 3600.0;
                    let diurnal = p.inference_util_diurnal_amplitude as f64
                        * (2.0 * std::f64::consts::PI * (hour - p.diurnal_peak_hour) / 24.0).cos();
                    noise = phi * noise + innov * rng.sample::<f64, _>(StandardNormal);
                    clampf(p.inference_mean_util as f64 + diurnal + burst[k] + noise, 0.02, 1.0) as f32
                })
                .collect();
            DutyTrace {
                period_s: dt as f32,
                util,
            }
        })
        .collect()
}

/// Poisson bursts `(start, end, extra GPUs)` over `[t0, t1)`, sorted by start.
fn demand_bursts(
    rng: &mut ChaCha8Rng,
    t0: i64,
    t1: i64,
    per_day: f64,
    mean_len_s: f64,
    extra: f64,
) -> Vec<(i64, i64, f64)> {
    let mut out = Vec::new();
    if per_day <= 0.0 || extra <= 0.0 {
        return out;
    }
    let mean_gap = DAY_S / per_day;
    let mut t = t0 as f64 + exp_sample(rng, mean_gap);
    while t < t1 as f64 {
        let len = exp_sample(rng, mean_len_s).max(60.0);
        out.push((t as i64, (t + len) as i64, extra));
        t += exp_sample(rng, mean_gap);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// CSV helpers.

fn perr(line: usize, column: &str, message: impl Into<String>) -> WorkloadError {
    WorkloadError::Parse {
        line,
        column: column.to_string(),
        message: message.into(),
    }
}

/// Non-blank lines with their 1-based numbers (BOM and CR removed).
fn numbered_lines(csv: &str) -> impl Iterator<Item = (usize, &str)> {
    csv.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_start_matches('\u{feff}').trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty())
}

fn split_into<'a>(line: &'a str, out: &mut Vec<&'a str>) {
    out.clear();
    out.extend(line.split(',').map(|f| {
        let f = f.trim();
        f.strip_prefix('"').and_then(|g| g.strip_suffix('"')).unwrap_or(f)
    }));
}

/// Positions of `wanted` columns in the header.
fn header_indices(line_no: usize, header: &str, wanted: &[&str]) -> Result<Vec<usize>, WorkloadError> {
    let mut names = Vec::new();
    split_into(header, &mut names);
    wanted
        .iter()
        .map(|w| {
            names
                .iter()
                .position(|n| n == w)
                .ok_or_else(|| perr(line_no, w, "column missing from the header"))
        })
        .collect()
}

fn field<'a>(f: &[&'a str], idx: usize, line: usize, col: &str) -> Result<&'a str, WorkloadError> {
    f.get(idx).copied().ok_or_else(|| {
        perr(
            line,
            col,
            format!("row has only {} fields, this column is field {}", f.len(), idx + 1),
        )
    })
}

fn num(f: &[&str], idx: usize, line: usize, col: &str) -> Result<f64, WorkloadError> {
    let raw = field(f, idx, line, col)?;
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(perr(line, col, format!("`{raw}` is not finite"))),
        Err(_) => Err(perr(line, col, format!("`{raw}` is not a number"))),
    }
}

fn opt_num(f: &[&str], idx: usize, line: usize, col: &str) -> Result<Option<f64>, WorkloadError> {
    if field(f, idx, line, col)?.is_empty() {
        Ok(None)
    } else {
        num(f, idx, line, col).map(Some)
    }
}

/// Seconds since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD HH:MM:SS` (or with `T`) into seconds.
fn parse_datetime(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || (b[10] != b' ' && b[10] != b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let n = |a: usize, z: usize| -> Option<i64> {
        let part = s.get(a..z)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (y, mo, d, h, mi, se) = (n(0, 4)?, n(5, 7)?, n(8, 10)?, n(11, 13)?, n(14, 16)?, n(17, 19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * DAY + h * 3600 + mi * 60 + se)
}

// ---------------------------------------------------------------------------------------------
// Helios.

/// Parsed Helios VC trace.
struct HeliosTrace {
    occ: Vec<f64>,
    vc_gpus: f64,
    increments: Vec<u32>,
    mean_running_jobs: Option<f64>,
}

fn parse_helios(csv: &str) -> Result<HeliosTrace, WorkloadError> {
    let mut lines = numbered_lines(csv);
    let (hl, header) = lines
        .next()
        .ok_or_else(|| WorkloadError::NoData("empty Helios trace".into()))?;
    let cols = ["time", "running_gpu_num", "total_gpu_num"];
    let idx = header_indices(hl, header, &cols)?;
    let mut hdr = Vec::new();
    split_into(header, &mut hdr);
    let jobs_idx = hdr.iter().position(|n| *n == "running_gpujob_num");
    let mut f = Vec::new();
    let mut occ = Vec::new();
    let mut increments = Vec::new();
    let mut prev: Option<(i64, f64)> = None;
    let mut vc_sum = 0.0;
    let mut jobs_sum = 0.0;
    for (ln, line) in lines {
        split_into(line, &mut f);
        let ts = field(&f, idx[0], ln, "time")?;
        let t = parse_datetime(ts).ok_or_else(|| perr(ln, "time", format!("`{ts}` is not `YYYY-MM-DD HH:MM:SS`")))?;
        let running = num(&f, idx[1], ln, "running_gpu_num")?;
        let total = num(&f, idx[2], ln, "total_gpu_num")?;
        if running < 0.0 {
            return Err(perr(ln, "running_gpu_num", format!("{running} is negative")));
        }
        if total <= 0.0 {
            return Err(perr(ln, "total_gpu_num", format!("{total} must be positive")));
        }
        if running > total {
            return Err(perr(
                ln,
                "running_gpu_num",
                format!("{running} exceeds total_gpu_num {total}"),
            ));
        }
        if let Some(ji) = jobs_idx {
            let j = num(&f, ji, ln, "running_gpujob_num")?;
            if j < 0.0 {
                return Err(perr(ln, "running_gpujob_num", format!("{j} is negative")));
            }
            jobs_sum += j;
        }
        if let Some((pt, pr)) = prev {
            if t - pt != 60 {
                return Err(perr(
                    ln,
                    "time",
                    format!("rows must be 60 s apart; this one is {} s after the previous", t - pt),
                ));
            }
            if running > pr {
                increments.push((running - pr).round() as u32);
            }
        }
        prev = Some((t, running));
        vc_sum += total;
        occ.push(running / total);
    }
    if occ.is_empty() {
        return Err(WorkloadError::NoData("Helios trace has a header but no rows".into()));
    }
    let n = occ.len() as f64;
    Ok(HeliosTrace {
        vc_gpus: vc_sum / n,
        mean_running_jobs: jobs_idx.map(|_| jobs_sum / n),
        occ,
        increments,
    })
}

struct HeliosSpawner<'a> {
    sizes: Vec<u32>,
    sizing: Sizing,
    median_s: f64,
    p: &'a SyntheticWorkload,
}

impl Spawner for HeliosSpawner<'_> {
    fn size(&mut self, rng: &mut ChaCha8Rng, room: u64) -> Option<u32> {
        for _ in 0..16 {
            let s = self.sizes[rng.random_range(0..self.sizes.len())];
            if s as u64 <= room {
                return Some(s);
            }
        }
        Some(self.sizing.floor(room)).filter(|&s| s > 0)
    }

    fn make(&mut self, rng: &mut ChaCha8Rng, _gpus: u32) -> (i64, JobKind, u8, UtilProfile) {
        let d = lognormal(rng, self.median_s, 1.0, 600.0, 7.0 * DAY_S);
        (d.round() as i64, JobKind::Training, 1, training_profile(rng, self.p))
    }
}

// ---------------------------------------------------------------------------------------------
// Alibaba.

#[derive(Debug, Clone, Copy)]
struct Pod {
    start: f64,
    /// `None`: still running at the end of the trace.
    end: Option<f64>,
    gpus: u32,
    qos_priority: u8,
    latency_sensitive: bool,
}

/// Latest time a pod-list row may carry, s from the trace start (≈ 32 years).
const MAX_TRACE_TIME_S: f64 = 1e9;

fn parse_alibaba(csv: &str) -> Result<Vec<Pod>, WorkloadError> {
    let mut lines = numbered_lines(csv);
    let (hl, header) = lines
        .next()
        .ok_or_else(|| WorkloadError::NoData("empty pod list".into()))?;
    let cols = [
        "num_gpu",
        "gpu_milli",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ];
    let idx = header_indices(hl, header, &cols)?;
    let mut f = Vec::new();
    let mut pods = Vec::new();
    for (ln, line) in lines {
        split_into(line, &mut f);
        let ng = num(&f, idx[0], ln, "num_gpu")?;
        if ng < 0.0 || ng.fract() != 0.0 || ng > 1e6 {
            return Err(perr(ln, "num_gpu", format!("{ng} is not a GPU count")));
        }
        let milli = num(&f, idx[1], ln, "gpu_milli")?;
        if !(0.0..=1000.0).contains(&milli) {
            return Err(perr(ln, "gpu_milli", format!("{milli} is outside 0..=1000")));
        }
        let qos = field(&f, idx[2], ln, "qos")?;
        let (qos_priority, latency_sensitive) = match qos {
            "Guaranteed" => (3, true),
            "LS" => (2, true),
            "Burstable" => (1, false),
            "BE" => (0, false),
            other => {
                return Err(perr(
                    ln,
                    "qos",
                    format!("`{other}` is not one of LS, BE, Burstable, Guaranteed"),
                ))
            }
        };
        let phase = field(&f, idx[3], ln, "pod_phase")?;
        let creation = num(&f, idx[4], ln, "creation_time")?;
        let deletion = opt_num(&f, idx[5], ln, "deletion_time")?;
        let scheduled = opt_num(&f, idx[6], ln, "scheduled_time")?;
        if creation < 0.0 {
            return Err(perr(ln, "creation_time", format!("{creation} is negative")));
        }
        // Times are seconds from the trace start (the published list spans ~150 days): a time
        // beyond ~32 years is a corrupt row, not a long-running pod.
        for (name, v) in [
            ("creation_time", Some(creation)),
            ("deletion_time", deletion),
            ("scheduled_time", scheduled),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v <= MAX_TRACE_TIME_S) {
                    return Err(perr(
                        ln,
                        name,
                        format!("{v} is not a time within 0..={MAX_TRACE_TIME_S:e} s of the trace start"),
                    ));
                }
            }
        }
        if let Some(s) = scheduled {
            if s < creation {
                return Err(perr(
                    ln,
                    "scheduled_time",
                    format!("{s} is before creation_time {creation}"),
                ));
            }
        }
        let start = scheduled.unwrap_or(creation);
        if let Some(d) = deletion {
            if d < start {
                return Err(perr(
                    ln,
                    "deletion_time",
                    format!("{d} is before the pod started ({start})"),
                ));
            }
        }
        if ng == 0.0 || (scheduled.is_none() && phase == "Pending") {
            continue; // CPU-only, or never ran
        }
        pods.push(Pod {
            start,
            end: deletion,
            gpus: ng as u32,
            qos_priority,
            latency_sensitive,
        });
    }
    if pods.is_empty() {
        return Err(WorkloadError::NoData("the pod list has no GPU pod that ran".into()));
    }
    Ok(pods)
}

/// Time-weighted quantile and mean of the number of GPUs in use, over `[w0, w1)`.
fn concurrency_stats(pods: &[(f64, f64, u32)], w0: f64, w1: f64, q: f64) -> (f64, f64) {
    let mut ev: Vec<(f64, i64)> = Vec::with_capacity(2 * pods.len());
    for &(s, e, g) in pods {
        ev.push((s, g as i64));
        ev.push((e, -(g as i64)));
    }
    ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut level = 0i64;
    let mut last = w0;
    let mut segs: Vec<(i64, f64)> = Vec::new();
    for (t, d) in ev {
        let t = t.clamp(w0, w1);
        if t > last {
            segs.push((level, t - last));
            last = t;
        }
        level += d;
    }
    if w1 > last {
        segs.push((level, w1 - last));
    }
    let total: f64 = segs.iter().map(|s| s.1).sum();
    if total <= 0.0 {
        return (0.0, 0.0);
    }
    let mean = segs.iter().map(|s| s.0 as f64 * s.1).sum::<f64>() / total;
    segs.sort_by_key(|s| s.0);
    let mut acc = 0.0;
    for (l, d) in &segs {
        acc += d;
        if acc >= q * total {
            return (*l as f64, mean);
        }
    }
    (segs.last().map(|s| s.0 as f64).unwrap_or(0.0), mean)
}

// ---------------------------------------------------------------------------------------------
// Duty cycle.

/// Parses the Alibaba GenAI duty-cycle CSV (`value,timestamp_anon,container_ip`, value in
/// percent) into one trace per container with at least [`DUTY_MIN_SAMPLES`] samples, resampled
/// to [`DUTY_RESAMPLE_PERIOD_S`]; see the module documentation. Traces are ordered by container id.
pub fn parse_duty_cycle_csv(csv: &str) -> Result<Vec<DutyTrace>, WorkloadError> {
    parse_duty_cycle_csv_with(csv, DUTY_RESAMPLE_PERIOD_S, DUTY_MIN_SAMPLES)
}

/// As [`parse_duty_cycle_csv`] with an explicit resampling period (s) and minimum sample count.
pub fn parse_duty_cycle_csv_with(
    csv: &str,
    period_s: f32,
    min_samples: usize,
) -> Result<Vec<DutyTrace>, WorkloadError> {
    if !(period_s.is_finite() && period_s > 0.0) {
        return Err(bad("period_s", format!("{period_s} must be finite and positive")));
    }
    let mut lines = numbered_lines(csv);
    let (hl, header) = lines
        .next()
        .ok_or_else(|| WorkloadError::NoData("empty duty-cycle file".into()))?;
    let idx = header_indices(hl, header, &["value", "timestamp_anon", "container_ip"])?;
    let mut f = Vec::new();
    let mut by_pod: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (ln, line) in lines {
        split_into(line, &mut f);
        let v = num(&f, idx[0], ln, "value")?;
        let t = num(&f, idx[1], ln, "timestamp_anon")?;
        let pod = field(&f, idx[2], ln, "container_ip")?;
        if pod.is_empty() {
            return Err(perr(ln, "container_ip", "empty container id"));
        }
        match by_pod.get_mut(pod) {
            Some(v_) => v_.push((t, v)),
            None => {
                by_pod.insert(pod.to_string(), vec![(t, v)]);
            }
        }
    }
    let period = period_s as f64;
    let mut out = Vec::new();
    for (_, mut s) in by_pod {
        if s.len() < min_samples.max(1) {
            continue;
        }
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut gaps: Vec<f64> = s.windows(2).map(|w| w[1].0 - w[0].0).filter(|&d| d > 0.0).collect();
        let hold_last = if gaps.is_empty() {
            period
        } else {
            gaps.sort_by(f64::total_cmp);
            gaps[gaps.len() / 2]
        };
        let t0 = s[0].0;
        let span = s[s.len() - 1].0 + hold_last - t0;
        let bins = ((span / period).floor() as usize).max(1);
        let mut util = Vec::with_capacity(bins);
        let mut i = 0usize;
        for b in 0..bins {
            let (a, z) = (t0 + b as f64 * period, t0 + (b + 1) as f64 * period);
            let mut area = 0.0;
            // Sample i holds over [t_i, t_{i+1}); advance past samples ending before a.
            while i + 1 < s.len() && s[i + 1].0 <= a {
                i += 1;
            }
            let mut k = i;
            while k < s.len() {
                let seg_a = s[k].0.max(a);
                let seg_z = if k + 1 < s.len() {
                    s[k + 1].0
                } else {
                    s[k].0 + hold_last
                }
                .min(z);
                if seg_z > seg_a {
                    area += (s[k].1 / 100.0).clamp(0.0, 1.0) * (seg_z - seg_a);
                }
                if k + 1 >= s.len() || s[k + 1].0 >= z {
                    break;
                }
                k += 1;
            }
            util.push((area / period).clamp(0.0, 1.0) as f32);
        }
        out.push(DutyTrace { period_s, util });
    }
    if out.is_empty() {
        return Err(WorkloadError::NoData(format!(
            "no container has at least {} samples",
            min_samples.max(1)
        )));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------

fn sanitize_util(u: f32) -> f32 {
    if u >= 0.0 {
        u.min(1.0)
    } else {
        0.0
    }
}

impl WorkloadModel {
    fn assemble(
        name: &str,
        description: String,
        total_gpus: u32,
        horizon_s: f64,
        jobs: Vec<JobSpec>,
        traces: Vec<DutyTrace>,
    ) -> Self {
        Self {
            name: name.to_string(),
            description,
            total_gpus,
            horizon_s: if horizon_s.is_finite() { horizon_s.max(0.0) } else { 0.0 },
            jobs,
            traces: vec![DutyTrace {
                period_s: 60.0,
                util: vec![0.0],
            }],
            inv_period: vec![1.0 / 60.0],
        }
        .with_duty_traces(traces)
    }

    /// The synthetic workload (no files): large synchronous training jobs plus bursty, diurnal
    /// inference, tracking `params.target_occupancy` of `total_gpus` over `[0, horizon_s)`.
    /// Deterministic per `seed`; parameters out of range are clamped ([`SyntheticWorkload::sanitized`]).
    pub fn synthetic(params: &SyntheticWorkload, total_gpus: u32, horizon_s: f64, seed: u64) -> Self {
        let p = params.sanitized();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let traces = synthetic_traces(&p, &mut rng);
        let horizon = sane_horizon(horizon_s);
        let n = total_gpus as u64;
        let sizing = Sizing::new(total_gpus, p.max_job_fraction);
        let lead = ((p.training_duration_range_h[1] * 3600.0).min(14.0 * DAY_S) / STEP as f64).ceil() as i64 * STEP;
        let t_start = -lead;
        let train_budget = (p.target_occupancy * p.training_share * n as f64).round() as u64;
        let inf_mean = p.target_occupancy * (1.0 - p.training_share) * n as f64;
        let bursts = demand_bursts(
            &mut rng,
            t_start,
            horizon,
            p.bursts_per_day,
            p.burst_mean_min * 60.0,
            p.burst_extra * inf_mean,
        );
        let lo_t = sizing.round(p.training_gpus[0] as f64) as f64;
        let hi_t = (sizing.round(p.training_gpus[1] as f64) as f64).max(lo_t);
        let mut tspawn = TrainingSpawner {
            p: &p,
            sizing,
            lo: lo_t,
            hi: hi_t,
            backfill_min: ((lo_t / 4.0) as u64).max(sizing.gran as u64),
        };
        let lo_i = sizing.round(p.inference_gpus[0] as f64) as f64;
        let hi_i = (sizing.round(p.inference_gpus[1] as f64) as f64).max(lo_i);
        let mut ispawn = InferenceSpawner {
            p: &p,
            sizing,
            lo: lo_i,
            hi: hi_i,
            min: sizing.gran,
            t: 0,
        };
        let mut jobs: Vec<GenJob> = Vec::new();
        let mut train = Tracker::new(sizing.gran as u64);
        let mut inf = Tracker::new(sizing.gran as u64);
        let mut head: Option<u32> = None;
        let mut next_burst = 0usize;
        let mut active: Vec<(i64, f64)> = Vec::new();
        let w = 2.0 * std::f64::consts::PI / DAY_S;
        let peak_s = p.diurnal_peak_hour * 3600.0;
        let mut t = t_start;
        while t < horizon {
            train.expire(&mut jobs, t);
            inf.expire(&mut jobs, t);
            while next_burst < bursts.len() && bursts[next_burst].0 <= t {
                active.push((bursts[next_burst].1, bursts[next_burst].2));
                next_burst += 1;
            }
            active.retain(|b| b.0 > t);
            let extra: f64 = active.iter().map(|b| b.1).sum();
            let inf_target = (inf_mean * (1.0 + p.diurnal_amplitude * (w * (t as f64 - peak_s)).cos()) + extra)
                .max(0.0)
                .round() as u64;
            inf.force_down(&mut jobs, t, inf_target, hi_i as u64);
            let free = n.saturating_sub(train.alloc + inf.alloc);
            let started = train.fill_reserved(&mut jobs, &mut rng, t, train_budget, free, &mut tspawn, &mut head);
            ispawn.t = t;
            inf.fill(&mut jobs, &mut rng, t, inf_target, free - started, true, &mut ispawn);
            t += STEP;
        }
        let jobs = finalize(jobs, horizon);
        let desc = format!(
            "synthetic: {} GPUs, target occupancy {:.2} (training {:.2}), training {}–{} GPUs, inference {}–{} GPUs, seed {seed}",
            total_gpus, p.target_occupancy, p.training_share, lo_t, hi_t, lo_i, hi_i
        );
        Self::assemble("synthetic", desc, total_gpus, horizon_s, jobs, traces)
    }

    /// Training jobs whose aggregate GPU demand tracks the occupancy of a Helios VC trace
    /// (`cluster_sequence_vc.csv` text), looped over the horizon; see the module documentation.
    pub fn from_helios_occupancy(csv: &str, total_gpus: u32, horizon_s: f64, seed: u64) -> Result<Self, WorkloadError> {
        let tr = parse_helios(csv)?;
        let p = SyntheticWorkload::default();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let traces = synthetic_traces(&p, &mut rng);
        let horizon = sane_horizon(horizon_s);
        let n = total_gpus as u64;
        let sizing = Sizing::new(total_gpus, 1.0);
        let scale = n as f64 / tr.vc_gpus;
        let mut sizes: Vec<u32> = tr.increments.iter().map(|&d| sizing.round(d as f64 * scale)).collect();
        if sizes.is_empty() {
            sizes.push(sizing.round(8.0 * scale));
        }
        let trace_s = tr.occ.len() as f64 * 60.0;
        let mean_dur = match tr.mean_running_jobs {
            Some(j) if !tr.increments.is_empty() && j > 0.0 => j / (tr.increments.len() as f64 / trace_s),
            _ => 6.0 * 3600.0,
        };
        let mean_dur = clampf(mean_dur, 600.0, 7.0 * DAY_S);
        let mut spawner = HeliosSpawner {
            sizes,
            sizing,
            median_s: mean_dur * (-0.5f64).exp(),
            p: &p,
        };
        let mut jobs: Vec<GenJob> = Vec::new();
        let mut tk = Tracker::new(sizing.gran as u64);
        let len = tr.occ.len() as i64;
        let mut t = -DAY;
        while t < horizon {
            tk.expire(&mut jobs, t);
            let target = (tr.occ[(t / STEP).rem_euclid(len) as usize] * n as f64).round() as u64;
            tk.force_down(&mut jobs, t, target, 0);
            let free = n.saturating_sub(tk.alloc);
            tk.fill(&mut jobs, &mut rng, t, target, free, false, &mut spawner);
            t += STEP;
        }
        let jobs = finalize(jobs, horizon);
        let mean_occ = tr.occ.iter().sum::<f64>() / tr.occ.len() as f64;
        let desc = format!(
            "helios-vc: {} GPUs tracking a {}-GPU VC trace of {} minutes (mean occupancy {:.3}), {} job-size samples, mean natural duration {:.1} h, seed {seed}",
            total_gpus,
            tr.vc_gpus,
            tr.occ.len(),
            mean_occ,
            tr.increments.len(),
            mean_dur / 3600.0
        );
        Ok(Self::assemble("helios-vc", desc, total_gpus, horizon_s, jobs, traces))
    }

    /// Jobs replayed from the Alibaba `openb_pod_list_default.csv` text with default
    /// [`AlibabaOptions`]; see the module documentation.
    pub fn from_alibaba_pods(csv: &str, total_gpus: u32, horizon_s: f64, seed: u64) -> Result<Self, WorkloadError> {
        Self::from_alibaba_pods_with(csv, &AlibabaOptions::default(), total_gpus, horizon_s, seed)
    }

    /// As [`WorkloadModel::from_alibaba_pods`] with explicit options.
    pub fn from_alibaba_pods_with(
        csv: &str,
        opts: &AlibabaOptions,
        total_gpus: u32,
        horizon_s: f64,
        seed: u64,
    ) -> Result<Self, WorkloadError> {
        in_range("peak_occupancy", opts.peak_occupancy, 1e-6, 10.0)?;
        in_range("jitter_s", opts.jitter_s, 0.0, 30.0 * DAY_S)?;
        in_range("max_replicas", opts.max_replicas as f64, 1.0, 1e4)?;
        in_range("inference_min_lifetime_s", opts.inference_min_lifetime_s, 0.0, 1e9)?;
        in_range("window_start_quantile", opts.window_start_quantile, 0.0, 1.0)?;
        let pods = parse_alibaba(csv)?;
        let p = SyntheticWorkload::default();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let traces = synthetic_traces(&p, &mut rng);
        let horizon = sane_horizon(horizon_s);
        let day = DAY_S;

        // Window: whole trace days from the midnight before the quantile start to the last
        // midnight before the trace end (at least one day, else the whole trace).
        let trace_end = pods
            .iter()
            .map(|p| p.end.unwrap_or(p.start).max(p.start))
            .fold(f64::MIN, f64::max);
        let mut starts: Vec<f64> = pods.iter().map(|p| p.start).collect();
        starts.sort_by(f64::total_cmp);
        let qi = ((opts.window_start_quantile * (starts.len() - 1) as f64).floor() as usize).min(starts.len() - 1);
        let mut w0 = (starts[qi] / day).floor() * day;
        let mut w1 = w0 + ((trace_end - w0) / day).floor() * day;
        if w1 - w0 < day {
            w0 = starts[0];
            w1 = trace_end;
        }
        if w1 <= w0 {
            return Err(WorkloadError::NoData(
                "the pod list spans no time (all pods start and end at the same instant)".into(),
            ));
        }
        let width = w1 - w0;
        // Pods clipped to the window: (start, end, gpus, carried-in, cut, pod index).
        let mut clipped: Vec<(f64, f64, u32, bool, bool, usize)> = Vec::new();
        for (i, pod) in pods.iter().enumerate() {
            let end = pod.end.unwrap_or(trace_end);
            if end <= w0 || pod.start >= w1 {
                continue;
            }
            let (s, carried) = if pod.start <= w0 {
                (w0, true)
            } else {
                (pod.start, false)
            };
            let (e, cut) = if end >= w1 || pod.end.is_none() || end >= trace_end {
                (end.min(w1), true)
            } else {
                (end, false)
            };
            if e > s {
                clipped.push((s, e, pod.gpus, carried, cut, i));
            }
        }
        let intervals: Vec<(f64, f64, u32)> = clipped.iter().map(|c| (c.0, c.1, c.2)).collect();
        let (p99, mean_conc) = concurrency_stats(&intervals, w0, w1, 0.99);
        if p99 <= 0.0 {
            return Err(WorkloadError::NoData("no GPU in use inside the trace window".into()));
        }
        // Scale: site GPUs per trace GPU, split into a node-multiple unit and a replica count.
        let sizing = Sizing::new(total_gpus, 1.0);
        let m = opts.peak_occupancy * total_gpus as f64 / p99;
        let g = sizing.gran as f64;
        let unit_nodes = (m / (g * opts.max_replicas as f64)).ceil().max(1.0);
        let unit = (unit_nodes * g) as u32;
        // Replicas: `k_full` whole copies plus a thinned copy keeping each pod with probability
        // `k_frac`, so the scale is met in expectation even where `m / unit` is not an integer.
        let k_real = (m / unit as f64).max(1e-9);
        let k_full = k_real.floor() as u32;
        let k_frac = k_real - k_full as f64;
        let copies = k_full + u32::from(k_frac > 1e-9);

        let loops = ((horizon as f64) / width).ceil() as u64;
        let mut gen: Vec<GenJob> = Vec::new();
        for l in 0..loops {
            let base = l as f64 * width;
            for r in 0..copies {
                for &(s, e, gpus, carried, cut, i) in &clipped {
                    if r == k_full && rng.random::<f64>() >= k_frac {
                        continue;
                    }
                    let shift = if opts.jitter_s > 0.0 {
                        uni(&mut rng, -opts.jitter_s, opts.jitter_s)
                    } else {
                        0.0
                    };
                    let s2 = if carried { w0 } else { (s + shift).max(w0) };
                    let e2 = if cut { e } else { e + shift };
                    let arrival = (base + s2 - w0).round() as i64;
                    let end = (base + e2 - w0).round() as i64;
                    if end <= arrival || arrival >= horizon {
                        continue;
                    }
                    let pod = &pods[i];
                    let life = pod.end.unwrap_or(trace_end) - pod.start;
                    let inference = pod.latency_sensitive
                        && pod.gpus <= opts.inference_max_gpus
                        && life >= opts.inference_min_lifetime_s;
                    let profile = if inference {
                        UtilProfile::Inference {
                            trace: rng.random_range(0..p.inference_traces.max(1)),
                            offset_s: uni(&mut rng, 0.0, day).floor() as f32,
                        }
                    } else {
                        training_profile(&mut rng, &p)
                    };
                    gen.push(GenJob {
                        arrival,
                        end,
                        gpus: ((gpus as u64 * unit as u64).min(sizing.cap as u64)) as u32,
                        kind: if inference {
                            JobKind::Inference
                        } else {
                            JobKind::Training
                        },
                        priority: pod.qos_priority,
                        profile,
                        running: false,
                        slot: 0,
                    });
                }
            }
        }
        let jobs = finalize(gen, horizon);
        let desc = format!(
            "alibaba-openb: {} GPUs; window {:.2}–{:.2} trace days ({} GPU pods), trace concurrency mean {:.1} / p99 {:.0} GPUs; {:.2} replicas × {} site GPUs per trace GPU (expected mean occupancy {:.2}); seed {seed}",
            total_gpus,
            w0 / day,
            w1 / day,
            clipped.len(),
            mean_conc,
            p99,
            k_real,
            unit,
            mean_conc * k_real * unit as f64 / total_gpus.max(1) as f64
        );
        Ok(Self::assemble(
            "alibaba-openb",
            desc,
            total_gpus,
            horizon_s,
            jobs,
            traces,
        ))
    }

    /// Replaces the inference duty traces (e.g. measured ones from [`parse_duty_cycle_csv`]).
    /// Invalid traces (empty, non-positive period) are dropped and values clamped to [0, 1]; if
    /// none is left the current traces are kept. Inference jobs use trace `trace % count`.
    pub fn with_duty_traces(mut self, traces: Vec<DutyTrace>) -> Self {
        let clean: Vec<DutyTrace> = traces
            .into_iter()
            .filter(|t| !t.util.is_empty() && t.period_s.is_finite() && t.period_s > 0.0)
            .map(|mut t| {
                for u in &mut t.util {
                    *u = sanitize_util(*u);
                }
                t
            })
            .collect();
        if !clean.is_empty() {
            self.inv_period = clean.iter().map(|t| 1.0 / t.period_s as f64).collect();
            self.traces = clean;
        }
        self
    }

    /// Jobs sorted by arrival.
    pub fn jobs(&self) -> &[JobSpec] {
        &self.jobs
    }

    /// Name of the generator (`synthetic`, `helios-vc`, `alibaba-openb`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the model was built (scales, counts, seed), for reports.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// GPUs of the cluster the jobs were generated for.
    pub fn total_gpus(&self) -> u32 {
        self.total_gpus
    }

    /// Horizon the jobs were generated for, s.
    pub fn horizon_s(&self) -> f64 {
        self.horizon_s
    }

    /// The duty traces inference jobs follow.
    pub fn duty_traces(&self) -> &[DutyTrace] {
        &self.traces
    }

    /// Utilisation in `[0, 1]` of `job` at `t_since_start_s` seconds after it started running;
    /// cheap (O(1), no allocation; called per job per step), pure and deterministic.
    ///
    /// Training: `checkpoint_util` while `(t + phase) mod period < len`, else `busy_util`.
    /// Inference: sample `⌊(t + offset)/period⌋ mod len` of trace `trace mod count`.
    /// Negative or NaN times count as 0; results are clamped to [0, 1] (NaN → 0).
    pub fn utilisation(&self, job: &JobSpec, t_since_start_s: f64) -> f32 {
        let t = if t_since_start_s > 0.0 { t_since_start_s } else { 0.0 };
        let u = match job.profile {
            UtilProfile::Constant(u) => u,
            UtilProfile::Training {
                busy_util,
                checkpoint_period_s,
                checkpoint_len_s,
                checkpoint_util,
                phase_s,
            } => {
                let period = checkpoint_period_s as f64;
                if period > 0.0 && period.is_finite() && checkpoint_len_s > 0.0 {
                    let x = (t + phase_s as f64).rem_euclid(period);
                    if x < checkpoint_len_s as f64 {
                        checkpoint_util
                    } else {
                        busy_util
                    }
                } else {
                    busy_util
                }
            }
            UtilProfile::Inference { trace, offset_s } => {
                let i = trace as usize % self.traces.len();
                let tr = &self.traces[i];
                let pos = ((t + offset_s as f64) * self.inv_period[i]) as u64;
                tr.util[(pos % tr.util.len() as u64) as usize]
            }
        };
        sanitize_util(u)
    }

    /// GPUs held by jobs at `k · step_s` for `k = 0, 1, …` up to the horizon, assuming every job
    /// starts at its arrival (the generators' own bookkeeping; a scheduler may delay starts).
    pub fn gpu_demand_series(&self, step_s: f64, horizon_s: f64) -> Vec<u64> {
        if !(step_s.is_finite() && step_s > 0.0 && horizon_s.is_finite() && horizon_s > 0.0) {
            return Vec::new();
        }
        let n = (horizon_s / step_s).ceil() as usize;
        let mut diff = vec![0i64; n + 1];
        for j in &self.jobs {
            let a = (j.arrival_s / step_s).ceil();
            let b = ((j.arrival_s + j.duration_s) / step_s).ceil();
            if a >= n as f64 || b <= a {
                continue;
            }
            diff[a.max(0.0) as usize] += j.gpus as i64;
            diff[(b as usize).min(n)] -= j.gpus as i64;
        }
        let mut acc = 0i64;
        diff[..n]
            .iter()
            .map(|d| {
                acc += d;
                acc.max(0) as u64
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn mean(v: &[u64]) -> f64 {
        v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
    }

    fn check_invariants(m: &WorkloadModel) {
        let n = m.total_gpus();
        let mut last = 0.0;
        for (i, j) in m.jobs().iter().enumerate() {
            assert_eq!(j.id, i as u64);
            assert!(
                j.arrival_s >= 0.0 && j.arrival_s >= last,
                "job {i} arrival {}",
                j.arrival_s
            );
            assert!(j.arrival_s < m.horizon_s());
            assert!(j.duration_s > 0.0);
            assert!(j.gpus >= 1 && j.gpus <= n);
            if n >= 8 {
                assert_eq!(j.gpus % 8, 0, "job {i} has {} GPUs", j.gpus);
            }
            last = j.arrival_s;
        }
    }

    #[test]
    fn synthetic_is_deterministic_per_seed() {
        let p = SyntheticWorkload::default();
        let a = WorkloadModel::synthetic(&p, 10_368, 3.0 * DAY_S, 7);
        let b = WorkloadModel::synthetic(&p, 10_368, 3.0 * DAY_S, 7);
        let c = WorkloadModel::synthetic(&p, 10_368, 3.0 * DAY_S, 8);
        assert_eq!(a.jobs(), b.jobs());
        assert_eq!(a.duty_traces(), b.duty_traces());
        assert_ne!(a.jobs(), c.jobs());
        assert!(!a.jobs().is_empty());
        assert_eq!(a.name(), "synthetic");
    }

    #[test]
    fn synthetic_occupancy_in_range_across_scales() {
        let p = SyntheticWorkload::default();
        for (n, days) in [(640u32, 14.0), (10_368, 14.0), (110_000, 4.0)] {
            let m = WorkloadModel::synthetic(&p, n, days * DAY_S, 42);
            check_invariants(&m);
            let d = m.gpu_demand_series(60.0, days * DAY_S);
            let occ = mean(&d) / n as f64;
            let max = *d.iter().max().unwrap();
            let min = *d.iter().min().unwrap();
            let train: u64 = m
                .jobs()
                .iter()
                .filter(|j| j.kind == JobKind::Training)
                .map(|j| j.gpus as u64)
                .max()
                .unwrap();
            println!(
                "synthetic {n} GPUs: mean occupancy {occ:.3}, min {:.3}, max {:.3}, jobs {}, largest training job {train}",
                min as f64 / n as f64,
                max as f64 / n as f64,
                m.jobs().len()
            );
            assert!(max <= n as u64, "over-allocated: {max} > {n}");
            assert!((0.75..=0.95).contains(&occ), "{n}: occupancy {occ}");
            assert!(d[0] as f64 > 0.6 * n as f64, "cluster not busy at t=0: {}", d[0]);
            assert!(m.jobs().iter().any(|j| j.kind == JobKind::Inference));
        }
    }

    #[test]
    fn synthetic_default_has_large_training_and_small_inference() {
        let m = WorkloadModel::synthetic(&SyntheticWorkload::default(), 10_368, 14.0 * DAY_S, 3);
        let tr: Vec<&JobSpec> = m.jobs().iter().filter(|j| j.kind == JobKind::Training).collect();
        let inf: Vec<&JobSpec> = m.jobs().iter().filter(|j| j.kind == JobKind::Inference).collect();
        assert!(tr.iter().any(|j| j.gpus >= 2048), "no large training job");
        let big_gpu_h: f64 = tr
            .iter()
            .filter(|j| j.gpus >= 512)
            .map(|j| j.gpus as f64 * j.duration_s)
            .sum();
        let all_gpu_h: f64 = tr.iter().map(|j| j.gpus as f64 * j.duration_s).sum();
        assert!(
            big_gpu_h > 0.9 * all_gpu_h,
            "large jobs hold {:.2} of training GPU-time",
            big_gpu_h / all_gpu_h
        );
        assert!(inf.iter().all(|j| (8..=64).contains(&j.gpus)));
        assert!(tr.iter().all(|j| j.priority == 1) && inf.iter().all(|j| j.priority == 2));
        // Training durations: hours to days (jobs cut by t=0 excluded); backfill jobs, which end
        // by the reservation of a waiting large job, may be shorter but hold little GPU-time.
        let started: Vec<&&JobSpec> = tr.iter().filter(|j| j.arrival_s > 0.0).collect();
        let gpu_s = |f: &dyn Fn(&JobSpec) -> bool| -> f64 {
            started
                .iter()
                .filter(|j| f(j))
                .map(|j| j.gpus as f64 * j.duration_s)
                .sum()
        };
        let long_share = gpu_s(&|j| j.duration_s >= 2.0 * 3600.0) / gpu_s(&|_| true);
        println!("training GPU-time in jobs of 2 h or more: {long_share:.3}");
        assert!(long_share > 0.8, "{long_share}");
        let mut durs: Vec<f64> = started.iter().map(|j| j.duration_s / 3600.0).collect();
        durs.sort_by(f64::total_cmp);
        println!(
            "training jobs started: {}, duration median {:.1} h, max {:.1} h",
            durs.len(),
            durs[durs.len() / 2],
            durs[durs.len() - 1]
        );
        for j in &tr {
            if let UtilProfile::Training {
                busy_util,
                checkpoint_period_s,
                checkpoint_len_s,
                checkpoint_util,
                phase_s,
            } = j.profile
            {
                assert!((0.95..=1.0).contains(&busy_util));
                assert!((1800.0..=3600.0).contains(&checkpoint_period_s));
                assert!((60.0..=300.0).contains(&checkpoint_len_s));
                assert!((0.1..=0.2).contains(&checkpoint_util));
                assert!((0.0..checkpoint_period_s).contains(&phase_s));
            } else {
                panic!("training job without a training profile");
            }
        }
    }

    #[test]
    fn inference_demand_is_diurnal() {
        let p = SyntheticWorkload {
            bursts_per_day: 0.0,
            ..SyntheticWorkload::default()
        };
        let m = WorkloadModel::synthetic(&p, 10_368, 7.0 * DAY_S, 11);
        let inf = WorkloadModel {
            jobs: m
                .jobs()
                .iter()
                .filter(|j| j.kind == JobKind::Inference)
                .cloned()
                .collect(),
            ..m.clone()
        };
        let d = inf.gpu_demand_series(3600.0, 7.0 * DAY_S);
        let at = |h: usize| (0..7).map(|day| d[day * 24 + h] as f64).sum::<f64>() / 7.0;
        let (peak, trough) = (at(20), at(8));
        println!("inference GPUs at 20:00 {peak:.0}, at 08:00 {trough:.0}");
        assert!(peak > 1.4 * trough, "peak {peak} trough {trough}");
        // Utilisation of the synthetic traces is higher in the evening than in the morning.
        let tr = &m.duty_traces()[0];
        assert_eq!(tr.util.len(), 1440);
        let avg = |h0: usize| tr.util[h0 * 60..h0 * 60 + 120].iter().sum::<f32>() / 120.0;
        assert!(avg(19) > avg(7));
    }

    #[test]
    fn checkpoint_dip_is_periodic_and_job_wide() {
        let m = WorkloadModel::synthetic(&SyntheticWorkload::default(), 640, DAY_S, 5);
        let job = m.jobs().iter().find(|j| j.kind == JobKind::Training).unwrap().clone();
        let UtilProfile::Training {
            busy_util,
            checkpoint_period_s,
            checkpoint_len_s,
            checkpoint_util,
            ..
        } = job.profile
        else {
            panic!()
        };
        // Sample every second over four periods; find the dip starts.
        let mut starts = Vec::new();
        let mut prev = m.utilisation(&job, 0.0);
        let mut dip_len = 0usize;
        let mut in_dip_samples = 0usize;
        for s in 1..(4 * checkpoint_period_s as usize) {
            let u = m.utilisation(&job, s as f64);
            assert!(u == busy_util || u == checkpoint_util);
            if u == checkpoint_util {
                in_dip_samples += 1;
                if prev == busy_util {
                    starts.push(s);
                    dip_len = 0;
                }
                dip_len += 1;
            }
            prev = u;
        }
        assert!(starts.len() >= 3, "dips at {starts:?}");
        for w in starts.windows(2) {
            assert_eq!((w[1] - w[0]) as f32, checkpoint_period_s);
        }
        assert!((dip_len as f32 - checkpoint_len_s).abs() <= 1.0);
        assert!(in_dip_samples > 0);
        // Pure: same answer every time; clamps odd times.
        assert_eq!(m.utilisation(&job, 123.0), m.utilisation(&job, 123.0));
        assert_eq!(m.utilisation(&job, -5.0), m.utilisation(&job, 0.0));
        assert_eq!(m.utilisation(&job, f64::NAN), m.utilisation(&job, 0.0));
    }

    #[test]
    fn utilisation_handles_hand_built_profiles() {
        let m = WorkloadModel::synthetic(&SyntheticWorkload::default(), 64, 3600.0, 1);
        let mut j = JobSpec {
            id: 0,
            arrival_s: 0.0,
            gpus: 8,
            duration_s: 10.0,
            kind: JobKind::Training,
            priority: 0,
            profile: UtilProfile::Constant(1.5),
        };
        assert_eq!(m.utilisation(&j, 1.0), 1.0);
        j.profile = UtilProfile::Constant(f32::NAN);
        assert_eq!(m.utilisation(&j, 1.0), 0.0);
        j.profile = UtilProfile::Training {
            busy_util: 0.9,
            checkpoint_period_s: 0.0,
            checkpoint_len_s: 10.0,
            checkpoint_util: 0.1,
            phase_s: 0.0,
        };
        assert_eq!(m.utilisation(&j, 5.0), 0.9);
        j.profile = UtilProfile::Inference {
            trace: u32::MAX,
            offset_s: -1e9,
        };
        let u = m.utilisation(&j, 1e12);
        assert!((0.0..=1.0).contains(&u));
        let m2 = m.clone().with_duty_traces(vec![DutyTrace {
            period_s: 10.0,
            util: vec![0.1, 0.5, 2.0],
        }]);
        j.profile = UtilProfile::Inference {
            trace: 3,
            offset_s: 5.0,
        };
        assert_eq!(m2.utilisation(&j, 0.0), 0.1);
        assert_eq!(m2.utilisation(&j, 5.0), 0.5);
        assert_eq!(m2.utilisation(&j, 15.0), 1.0);
        assert_eq!(m2.utilisation(&j, 25.0), 0.1); // looped
                                                   // Invalid replacement traces are ignored.
        let m3 = m2.clone().with_duty_traces(vec![DutyTrace {
            period_s: 0.0,
            util: vec![0.3],
        }]);
        assert_eq!(m3.duty_traces(), m2.duty_traces());
    }

    #[test]
    fn tiny_and_degenerate_inputs_do_not_panic() {
        let p = SyntheticWorkload::default();
        for n in [0u32, 1, 7, 8, 16, 64] {
            let m = WorkloadModel::synthetic(&p, n, DAY_S, 1);
            check_invariants(&m);
            let d = m.gpu_demand_series(60.0, DAY_S);
            assert!(d.iter().all(|&x| x <= n as u64));
        }
        assert!(WorkloadModel::synthetic(&p, 1000, 0.0, 1).jobs().is_empty());
        assert!(WorkloadModel::synthetic(&p, 1000, f64::NAN, 1).jobs().is_empty());
        let weird = SyntheticWorkload {
            target_occupancy: 7.0,
            training_share: f64::NAN,
            training_gpus: [9000, 0],
            checkpoint_period_min: [5.0, 1.0],
            checkpoint_len_min: [10.0, 20.0],
            inference_traces: 0,
            busy_util: [2.0, -1.0],
            ..SyntheticWorkload::default()
        };
        assert!(weird.validate().is_err());
        let s = weird.sanitized();
        assert!(s.validate().is_ok(), "{:?}", s.validate());
        let m = WorkloadModel::synthetic(&weird, 2000, DAY_S, 1);
        check_invariants(&m);
        assert!(SyntheticWorkload::default().validate().is_ok());
    }

    #[test]
    fn synthetic_params_serde() {
        use serde::de::value::{Error, MapDeserializer, StrDeserializer};
        use serde::de::IntoDeserializer;
        let map = |k: &'static str, v: f64| -> MapDeserializer<'static, _, Error> {
            MapDeserializer::new(std::iter::once((k, v.into_deserializer())))
        };
        let p = SyntheticWorkload::deserialize(map("target_occupancy", 0.8)).unwrap();
        assert_eq!(p.target_occupancy, 0.8);
        assert_eq!(p.training_gpus, [512, 4096]);
        assert!(SyntheticWorkload::deserialize(map("no_such_field", 1.0)).is_err());
        let k = JobKind::deserialize(StrDeserializer::<Error>::new("inference")).unwrap();
        assert_eq!(k, JobKind::Inference);
        assert!(JobKind::deserialize(StrDeserializer::<Error>::new("Inference")).is_err());
    }

    // ---- Helios ------------------------------------------------------------------------

    const HELIOS_HEAD: &str = "time,total_job_num,running_job_num,pending_job_num,total_gpujob_num,running_gpujob_num,pending_gpujob_num,total_gpu_num,running_gpu_num,pending_gpu_num,idle_gpu_num,gpu_utilization\n";

    fn helios_sample(minutes: usize) -> String {
        let mut s = HELIOS_HEAD.to_string();
        for i in 0..minutes {
            // 208-GPU VC: 160 GPUs for the first half, 200 afterwards, a dip to 96 in between.
            let running = if i < minutes / 2 {
                160
            } else if i < minutes / 2 + 30 {
                96
            } else {
                200
            };
            s.push_str(&format!(
                "2020-05-01 {:02}:{:02}:00,5,5,0,5,{},0,208,{running},0,{},0.8\n",
                i / 60,
                i % 60,
                running / 16,
                208 - running
            ));
        }
        s
    }

    fn hourly_mae(m: &WorkloadModel, occ_at_minute: impl Fn(usize) -> f64, hours: usize) -> f64 {
        let d = m.gpu_demand_series(60.0, hours as f64 * 3600.0);
        let n = m.total_gpus() as f64;
        (0..hours)
            .map(|h| {
                let model: f64 = d[h * 60..(h + 1) * 60].iter().map(|&x| x as f64 / n).sum::<f64>() / 60.0;
                let trace: f64 = (h * 60..(h + 1) * 60).map(&occ_at_minute).sum::<f64>() / 60.0;
                (model - trace).abs()
            })
            .sum::<f64>()
            / hours as f64
    }

    #[test]
    fn helios_inline_sample_is_tracked() {
        let csv = helios_sample(600);
        let m = WorkloadModel::from_helios_occupancy(&csv, 10_368, 20.0 * 3600.0, 3).unwrap();
        check_invariants(&m);
        assert_eq!(m.name(), "helios-vc");
        let occ = |min: usize| {
            let i = min % 600;
            (if i < 300 {
                160.0
            } else if i < 330 {
                96.0
            } else {
                200.0
            }) / 208.0
        };
        let mae = hourly_mae(&m, occ, 20);
        println!("inline Helios hourly MAE {mae:.4}");
        assert!(mae < 0.02, "{mae}");
        assert!(m.jobs().iter().all(|j| j.kind == JobKind::Training));
        let d = m.gpu_demand_series(60.0, 20.0 * 3600.0);
        assert!(d.iter().all(|&x| x <= 10_368));
        // Determinism.
        let m2 = WorkloadModel::from_helios_occupancy(&csv, 10_368, 20.0 * 3600.0, 3).unwrap();
        assert_eq!(m.jobs(), m2.jobs());
    }

    #[test]
    fn helios_malformed_input_is_reported() {
        let good = helios_sample(5);
        let bad_num = good.replacen(",208,160,", ",208,16x0,", 1);
        match WorkloadModel::from_helios_occupancy(&bad_num, 100, 3600.0, 1).unwrap_err() {
            WorkloadError::Parse { line, column, .. } => {
                assert_eq!((line, column.as_str()), (2, "running_gpu_num"))
            }
            e => panic!("{e:?}"),
        }
        let bad_time = good.replacen("2020-05-01 00:02:00", "2020-05-01 00:03:00", 1);
        match WorkloadModel::from_helios_occupancy(&bad_time, 100, 3600.0, 1).unwrap_err() {
            WorkloadError::Parse { line, column, message } => {
                assert_eq!((line, column.as_str()), (4, "time"), "{message}")
            }
            e => panic!("{e:?}"),
        }
        let garbage_time = good.replacen("2020-05-01 00:01:00", "yesterday", 1);
        assert!(matches!(
            WorkloadModel::from_helios_occupancy(&garbage_time, 100, 3600.0, 1),
            Err(WorkloadError::Parse { line: 3, .. })
        ));
        let over = good.replacen(",208,160,", ",208,300,", 1);
        assert!(matches!(
            WorkloadModel::from_helios_occupancy(&over, 100, 3600.0, 1),
            Err(WorkloadError::Parse { line: 2, ref column, .. }) if column == "running_gpu_num"
        ));
        let short = format!("{HELIOS_HEAD}2020-05-01 00:00:00,5,5\n");
        let e = WorkloadModel::from_helios_occupancy(&short, 100, 3600.0, 1).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let no_col = "time,running_gpu_num\n2020-05-01 00:00:00,3\n";
        assert!(matches!(
            WorkloadModel::from_helios_occupancy(no_col, 100, 3600.0, 1),
            Err(WorkloadError::Parse { line: 1, ref column, .. }) if column == "total_gpu_num"
        ));
        assert!(matches!(
            WorkloadModel::from_helios_occupancy(HELIOS_HEAD, 100, 3600.0, 1),
            Err(WorkloadError::NoData(_))
        ));
        assert!(WorkloadModel::from_helios_occupancy("", 100, 3600.0, 1).is_err());
    }

    #[test]
    fn helios_real_trace_is_tracked() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/cluster_sequence_vc.csv");
        let Some(csv) = read_data("cluster_sequence_vc.csv", path) else {
            return;
        };
        let tr = parse_helios(&csv).unwrap();
        assert_eq!(tr.occ.len(), 44_640);
        for (n, days) in [(10_368u32, 40.0), (640, 10.0), (110_000, 5.0)] {
            let horizon = days * DAY_S;
            let m = WorkloadModel::from_helios_occupancy(&csv, n, horizon, 9).unwrap();
            check_invariants(&m);
            let hours = (days * 24.0) as usize;
            let mae = hourly_mae(&m, |min| tr.occ[min % tr.occ.len()], hours);
            let d = m.gpu_demand_series(60.0, horizon);
            let sizes: Vec<u32> = m.jobs().iter().map(|j| j.gpus).collect();
            let arrived: Vec<&JobSpec> = m.jobs().iter().filter(|j| j.arrival_s > 0.0).collect();
            let mean_dur_h = arrived.iter().map(|j| j.duration_s).sum::<f64>() / arrived.len() as f64 / 3600.0;
            println!(
                "Helios {n} GPUs, {days} days: hourly occupancy MAE {:.4}, mean occupancy {:.3}, jobs {}, size {}..{}, mean duration {mean_dur_h:.1} h; {}",
                mae,
                mean(&d) / n as f64,
                m.jobs().len(),
                sizes.iter().min().unwrap(),
                sizes.iter().max().unwrap(),
                m.description()
            );
            assert!(mae < 0.10, "{n}: hourly MAE {mae}");
            assert!(mae < 0.03, "{n}: hourly MAE {mae} (expected ~0.01)");
            assert!(d.iter().all(|&x| x <= n as u64));
        }
    }

    // ---- Alibaba -----------------------------------------------------------------------

    const POD_HEAD: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    fn pod_sample() -> String {
        let mut s = POD_HEAD.to_string();
        // A long-running LS service, several BE batch pods, an 8-GPU LS job, a CPU pod, a
        // pending pod. Times over three days.
        s.push_str("p0,1000,1000,1,1000,,LS,Running,0,259200,0\n");
        for i in 0..40 {
            let c = 3600 * (i + 1);
            s.push_str(&format!(
                "b{i},1000,1000,1,460,,BE,Succeeded,{c},{},{}\n",
                c + 5400,
                c + 60
            ));
        }
        s.push_str("p8,1000,1000,8,1000,,LS,Running,7200,100000,7300\n");
        s.push_str("cpu,1000,1000,0,0,,BE,Running,100,200,100\n");
        s.push_str("pend,1000,1000,1,1000,,BE,Pending,500,600,\n");
        s
    }

    #[test]
    fn alibaba_inline_sample() {
        let csv = pod_sample();
        let m = WorkloadModel::from_alibaba_pods(&csv, 1024, 5.0 * DAY_S, 4).unwrap();
        check_invariants(&m);
        println!("{}", m.description());
        assert_eq!(m.name(), "alibaba-openb");
        // LS 1-GPU pod living 3 days -> inference, priority 2; BE -> training priority 0.
        assert!(m.jobs().iter().any(|j| j.kind == JobKind::Inference && j.priority == 2));
        assert!(m.jobs().iter().any(|j| j.kind == JobKind::Training && j.priority == 0));
        // The 8-GPU LS pod is training (too many GPUs for the inference rule).
        let max_g = m.jobs().iter().map(|j| j.gpus).max().unwrap();
        assert!(m
            .jobs()
            .iter()
            .filter(|j| j.gpus == max_g)
            .all(|j| j.kind == JobKind::Training));
        let d = m.gpu_demand_series(60.0, 5.0 * DAY_S);
        let peak = *d.iter().max().unwrap() as f64 / 1024.0;
        assert!(peak <= 1.1, "peak {peak}");
        assert!(d[0] > 0, "busy at t=0");
        let m2 = WorkloadModel::from_alibaba_pods(&csv, 1024, 5.0 * DAY_S, 4).unwrap();
        assert_eq!(m.jobs(), m2.jobs());
    }

    #[test]
    fn alibaba_malformed_input_is_reported() {
        let csv = pod_sample();
        let cases = [
            ("b3,1000,1000,1,460,,BE,", "b3,1000,1000,x,460,,BE,", 6, "num_gpu"),
            ("b3,1000,1000,1,460,,BE,", "b3,1000,1000,1,460,,XX,", 6, "qos"),
            ("b3,1000,1000,1,460,,BE,", "b3,1000,1000,1,4600,,BE,", 6, "gpu_milli"),
            (
                "p8,1000,1000,8,1000,,LS,Running,7200,100000,7300",
                "p8,1000,1000,8,1000,,LS,Running,7200,100,7300",
                43,
                "deletion_time",
            ),
            (
                "p8,1000,1000,8,1000,,LS,Running,7200,100000,7300",
                "p8,1000,1000,8,1000,,LS,Running,7200,100000,7000",
                43,
                "scheduled_time",
            ),
            (
                "p8,1000,1000,8,1000,,LS,Running,7200,100000,7300",
                "p8,1000,1000,8,1000,,LS,Running,7200",
                43,
                "deletion_time",
            ),
            (
                "p8,1000,1000,8,1000,,LS,Running,7200,100000,7300",
                "p8,1000,1000,8,1000,,LS,Running,7200,1e300,7300",
                43,
                "deletion_time",
            ),
            (
                "p8,1000,1000,8,1000,,LS,Running,7200,100000,7300",
                "p8,1000,1000,8,1000,,LS,Running,7200,100000,inf",
                43,
                "scheduled_time",
            ),
        ];
        for (from, to, line, col) in cases {
            let bad = csv.replacen(from, to, 1);
            assert_ne!(bad, csv);
            match WorkloadModel::from_alibaba_pods(&bad, 1024, DAY_S, 1).unwrap_err() {
                WorkloadError::Parse {
                    line: l,
                    column,
                    message,
                } => {
                    assert_eq!((l, column.as_str()), (line, col), "{message}")
                }
                e => panic!("{e:?}"),
            }
        }
        let cpu_only = format!("{POD_HEAD}cpu,1000,1000,0,0,,BE,Running,100,200,100\n");
        assert!(matches!(
            WorkloadModel::from_alibaba_pods(&cpu_only, 1024, DAY_S, 1),
            Err(WorkloadError::NoData(_))
        ));
        let no_col = "name,num_gpu\np,1\n";
        assert!(matches!(
            WorkloadModel::from_alibaba_pods(no_col, 1024, DAY_S, 1),
            Err(WorkloadError::Parse { line: 1, .. })
        ));
        let bad_opts = AlibabaOptions {
            peak_occupancy: -1.0,
            ..AlibabaOptions::default()
        };
        assert!(matches!(
            WorkloadModel::from_alibaba_pods_with(&csv, &bad_opts, 1024, DAY_S, 1),
            Err(WorkloadError::InvalidParameter { .. })
        ));
        let instant = format!("{POD_HEAD}p,1,1,1,1000,,LS,Running,5,5,5\n");
        assert!(WorkloadModel::from_alibaba_pods(&instant, 1024, DAY_S, 1).is_err());
    }

    #[test]
    fn alibaba_real_pod_list() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/openb_pod_list_default.csv"
        );
        let Some(csv) = read_data("openb_pod_list_default.csv", path) else {
            return;
        };
        for (n, days) in [(10_368u32, 60.0), (640, 20.0), (110_000, 7.0)] {
            let horizon = days * DAY_S;
            let m = WorkloadModel::from_alibaba_pods(&csv, n, horizon, 21).unwrap();
            check_invariants(&m);
            let d = m.gpu_demand_series(3600.0, horizon);
            let occ = mean(&d) / n as f64;
            let peak = *d.iter().max().unwrap() as f64 / n as f64;
            let inf = m.jobs().iter().filter(|j| j.kind == JobKind::Inference).count();
            println!(
                "Alibaba {n} GPUs, {days} days: jobs {}, inference {inf}, mean occupancy {occ:.3}, hourly peak {peak:.3}, t=0 {:.3}; {}",
                m.jobs().len(),
                d[0] as f64 / n as f64,
                m.description()
            );
            assert!((0.4..=0.95).contains(&occ), "{n}: mean occupancy {occ}");
            assert!(peak <= 1.15, "{n}: peak {peak}");
            assert!(d[0] as f64 > 0.2 * n as f64);
            assert!(inf > 0);
            assert!(m.jobs().iter().any(|j| j.priority == 0) && m.jobs().iter().any(|j| j.priority == 2));
        }
    }

    // ---- Duty cycle --------------------------------------------------------------------

    #[test]
    fn duty_cycle_inline_sample() {
        let mut csv = String::from("value,timestamp_anon,container_ip\n");
        // Pod a: 0 % then 100 % at 30 s spacing; pod b: 3 samples (skipped with min 4).
        for i in 0..8 {
            csv.push_str(&format!("{},{}.0,a\n", if i < 4 { 0.0 } else { 100.0 }, 1000 + 30 * i));
        }
        for i in 0..3 {
            csv.push_str(&format!("50.0,{},b\n", 1000 + 60 * i));
        }
        // Out of order rows are sorted; percent > 100 clamps.
        csv.push_str("150.0,1240,a\n");
        let tr = parse_duty_cycle_csv_with(&csv, 60.0, 4).unwrap();
        assert_eq!(tr.len(), 1);
        // Samples of a at 1000..1240 (9 samples, hold 30 s): span 270 s -> 4 bins of 60 s.
        assert_eq!(tr[0].util, vec![0.0, 0.0, 1.0, 1.0]);
        assert_eq!(tr[0].period_s, 60.0);
        // Averaging: a 90 s bin spanning 0 and 100 %.
        let tr90 = parse_duty_cycle_csv_with(&csv, 90.0, 4).unwrap();
        assert!((tr90[0].util[1] - 2.0 / 3.0).abs() < 1e-6, "{:?}", tr90[0].util);
        let all = parse_duty_cycle_csv_with(&csv, 60.0, 1).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].util, vec![0.5, 0.5, 0.5]);
    }

    #[test]
    fn duty_cycle_malformed_input_is_reported() {
        let head = "value,timestamp_anon,container_ip\n";
        let e = parse_duty_cycle_csv(&format!("{head}1.0,5,a\nabc,6,a\n")).unwrap_err();
        assert_eq!(
            e,
            WorkloadError::Parse {
                line: 3,
                column: "value".into(),
                message: "`abc` is not a number".into()
            }
        );
        let e = parse_duty_cycle_csv(&format!("{head}1.0,inf,a\n")).unwrap_err();
        assert!(matches!(e, WorkloadError::Parse { line: 2, ref column, .. } if column == "timestamp_anon"));
        let e = parse_duty_cycle_csv(&format!("{head}1.0,5\n")).unwrap_err();
        assert!(matches!(e, WorkloadError::Parse { line: 2, ref column, .. } if column == "container_ip"));
        let e = parse_duty_cycle_csv(&format!("{head}1.0,5,\n")).unwrap_err();
        assert!(matches!(e, WorkloadError::Parse { line: 2, ref column, .. } if column == "container_ip"));
        let e = parse_duty_cycle_csv("value,time,container_ip\n1,2,a\n").unwrap_err();
        assert!(matches!(e, WorkloadError::Parse { line: 1, ref column, .. } if column == "timestamp_anon"));
        assert!(matches!(
            parse_duty_cycle_csv(&format!("{head}1.0,5,a\n")),
            Err(WorkloadError::NoData(_))
        ));
        assert!(parse_duty_cycle_csv("").is_err());
        assert!(matches!(
            parse_duty_cycle_csv_with(&format!("{head}1.0,5,a\n"), 0.0, 1),
            Err(WorkloadError::InvalidParameter { .. })
        ));
    }

    #[test]
    fn duty_cycle_real_file() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/pod_gpu_duty_cycle_anon.tar.gz"
        );
        if !std::path::Path::new(path).exists() {
            if require_data() {
                panic!("COOLPLANE_REQUIRE_DATA is set but {path} is missing");
            }
            println!("note: {path} not found; skipping the real duty-cycle check");
            return;
        }
        let dir = std::env::temp_dir().join(format!("coolplane-duty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let status = std::process::Command::new("tar")
            .arg("xzf")
            .arg(path)
            .arg("-C")
            .arg(&dir)
            .status();
        match status {
            Ok(s) if s.success() => {}
            other => {
                let _ = std::fs::remove_dir_all(&dir);
                if require_data() {
                    panic!("could not extract {path} with tar: {other:?}");
                }
                println!("note: could not run tar on {path} ({other:?}); skipping");
                return;
            }
        }
        let csv_path = dir.join("pod_gpu_duty_cycle_anon.csv");
        let csv = std::fs::read_to_string(&csv_path).unwrap_or_else(|e| panic!("{}: {e}", csv_path.display()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(csv.starts_with("value,timestamp_anon,container_ip"));
        let traces = parse_duty_cycle_csv(&csv).unwrap();
        let mean = traces.iter().map(|t| t.mean() as f64).sum::<f64>() / traces.len() as f64;
        let longest = traces.iter().map(|t| t.util.len()).max().unwrap();
        println!(
            "duty cycle: {} traces, mean util {mean:.3}, longest {longest} samples",
            traces.len()
        );
        assert_eq!(traces.len(), 133);
        assert!((0.03..0.15).contains(&mean), "{mean}");
        // 1441 samples at 57 s ≈ 22.8 h -> about 1369 one-minute bins.
        assert!((1360..=1372).contains(&longest), "{longest}");
        assert!(traces.iter().all(|t| t.util.iter().all(|u| (0.0..=1.0).contains(u))));
        let m = WorkloadModel::synthetic(&SyntheticWorkload::default(), 640, DAY_S, 2).with_duty_traces(traces);
        assert_eq!(m.duty_traces().len(), 133);
        let job = m.jobs().iter().find(|j| j.kind == JobKind::Inference).unwrap();
        let u = m.utilisation(job, 3600.0);
        assert!((0.0..=1.0).contains(&u));
    }
}
