//! # coolplane-sim-plant
//!
//! The simulated plant: the ground truth every coolplane claim is measured against. It models a
//! liquid-cooled GPU site from the accelerator die to the utility meter (see
//! `shared/design/plant-model.md`): GPU power with leakage and DVFS caps, die temperatures through
//! flow-dependent cold plates with per-GPU spread, slowdown and shutdown, racks, CDUs with pumps,
//! ε-NTU heat exchangers, local PI loops, BMS-timeout fail-safe and N+1 failover, facility water
//! with dry coolers / adiabatic assist / cooling tower / trim chiller / heat reuse, two-phase immersion tanks
//! ([`immersion`]), the electrical chain, sensors with bias, noise, quantisation and lag, and faults on a schedule. It also holds
//! the simulated world around the plant that a real site would have: the workload and the cluster
//! scheduler that places it.
//!
//! Architecture invariants: no IO, no wall clock, no global random number generator. Time and
//! outdoor conditions are inputs of [`Plant::step`]; all randomness comes from the seed given to
//! [`Plant::new`]. The plant's true state and its KPI accumulators stay inside it: a controller
//! sees only [`coolplane_core::signals::Measurements`]. This crate depends on `coolplane-core` only,
//! never on the twin or the controller (the twin must learn the plant, not read its parameters).

pub mod cluster;
pub mod faults;
pub mod gpu;
pub mod hx;
pub mod immersion;
pub mod kpi;
pub mod perf_fit;
pub mod plant;
pub mod workload;

pub use plant::{InjectedError, Plant, PlantError, PowerBreakdown};
