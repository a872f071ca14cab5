//! # coolplane-adapters
//!
//! The only place that knows wire formats: Modbus TCP clients for CDUs, pumps and dry coolers,
//! MQTT for rack telemetry and commands, and the time-series sink. Adapters fill the process
//! image the controller reads ([`coolplane_core::signals::Measurements`]) and carry its actions
//! out.
//!
//! Status: the crate exists so the dependency directions are fixed from the start
//! (`adapters → core` only); the protocol clients arrive with the wire work.
//!
//! Architecture invariants: adapters do IO and nothing else; they never decide a setpoint, and
//! staleness is reported to the controller as data (quality and age), never hidden in a timeout.

pub use coolplane_core::signals;
