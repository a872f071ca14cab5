//! # coolplane-adapters
//!
//! The only place that knows wire formats. Modbus TCP clients for CDUs, facility water systems and
//! meters, driven by register-map files ([`regmap`], [`modbus`]); MQTT for rack telemetry in and
//! power-limit commands out ([`telemetry`], [`mqtt`]); and the assembly of what they read into the
//! process image the controller reads, and of the controller's actions into writes ([`image`]), by
//! the point names of each device role ([`points`]).
//!
//! Architecture invariants: adapters do IO and nothing else. They never decide a setpoint. Every
//! request runs under a timeout, every queue is bounded with a stated overflow policy, and
//! staleness is reported to the controller as data (each reading's time stamp and quality), never
//! hidden behind a timeout or a retry.

pub mod clock;
pub mod image;
pub mod modbus;
pub mod mqtt;
pub mod mqtt_auth;
pub mod operator;
pub mod points;
pub mod regmap;
pub mod telemetry;

pub use coolplane_core::signals;
