//! # coolplane-twin
//!
//! The thermal-power digital twin: state estimation from the process image, online calibration of
//! the plant's parameters, load forecasting and "what-if" simulation for the controller.
//!
//! Status: the crate exists so the dependency directions are fixed from the start
//! (`twin → core` only). Its models arrive with the twin-and-forecasting work; until then it
//! exports nothing and no policy uses it.
//!
//! Architecture invariants: no IO, no wall clock, no global random number generator. The twin
//! knows the site's structure (from the site file) but never reads the simulated plant's true
//! parameters: it must learn them from telemetry, so it never depends on `coolplane-sim-plant`.
