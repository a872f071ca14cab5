//! # coolplane-core
//!
//! Shared vocabulary of coolplane: the site description ([`site`]), its expanded topology
//! ([`topology`]), the plant's interface of actions and measurements ([`signals`]), fluid
//! properties ([`fluid`], dielectric fluids of two-phase immersion in [`dielectric`]) and weather with psychrometrics ([`weather`]).
//!
//! Architecture invariant: this crate does no IO, reads no clock and uses no global random number
//! generator. It parses text it is handed and computes; it never opens a file or a socket. Every
//! other crate may depend on it; it depends on no other coolplane crate.

pub mod dielectric;
pub mod fluid;
pub mod signals;
pub mod site;
pub mod topology;
pub mod weather;
