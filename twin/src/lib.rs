//! # coolplane-twin
//!
//! The thermal-power digital twin: state estimation from the process image with sensor
//! plausibility events ([`estimate`], [`health`]), online calibration with confidence intervals
//! and drift (maintenance) detection ([`estimate::Twin::calibrate`], on `linfa-elasticnet` in
//! [`regress`]), load forecasting with p50/p90 against persistence and seasonal-naive baselines
//! ([`forecast`]) and a reduced-order "what-if" hall model ([`whatif`]).
//!
//! Architecture invariants: no IO, no wall clock, no global random number generator. The twin
//! knows the site's structure and nameplate ([`nameplate::Nameplate`]) but never reads the
//! simulated plant's true parameters: it learns them from `Measurements`, so it never depends on
//! `coolplane-sim-plant`.

pub mod estimate;
pub mod forecast;
pub mod fouling;
pub mod health;
pub mod nameplate;
pub mod regress;
pub mod whatif;

pub use estimate::{Twin, TwinConfig, TwinEvent, TwinEventKind};
pub use nameplate::Nameplate;
