//! # coolplane-scenario
//!
//! The scenario harness: the measuring stick of every coolplane claim (BOPTEST-style). It loads
//! scenario files (site, weather, period, warm-up, workload, events, seed, step), runs the plant,
//! the simulated cluster scheduler and the controller with a policy in process, and reports the
//! KPIs the plant computed, with time series (CSV) and plots (PNG).
//!
//! This crate reads the files a scenario names and writes reports; the crates it drives
//! (`sim-plant`, `controller`, `policies`) do no IO at all. The only clock it reads is the wall
//! clock around the controller's tick (computation-time KPI) and for progress.
//!
//! `campaign` runs seeded fault campaigns: random fault schedules drawn from a seed, with
//! invariants (no throttling, budget, Safe mode on stale data, setpoint limits and rates, energy
//! ledger) checked on every run.

pub mod budget;
pub mod campaign;
pub mod plot;
pub mod report;
pub mod run;
pub mod series;
pub mod spec;

pub use run::{run, Progress, RunError, RunOptions, RunReport, RunResult};
pub use spec::{load_scenario_file, Scenario, ScenarioError, ScenarioSpec};
pub mod twin_eval;
