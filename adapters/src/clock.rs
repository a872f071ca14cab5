//! The daemon's clock: seconds since start, optionally running faster than real time.
//!
//! In production `speed` is 1. Against the simulated plant (`--speed N`) both sides agree on a
//! time base that runs N times faster than the wall clock, so that the controller's staleness
//! limits and ticks, all in seconds of plant time, keep their meaning.

use std::time::{Duration, Instant};

/// Plant-time clock shared by the adapters and the daemon.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    speed: f64,
}

impl Clock {
    /// A clock starting now, running `speed` times faster than real time (clamped to 0.01–100,000).
    pub fn new(speed: f64) -> Self {
        let speed = if speed.is_finite() {
            speed.clamp(0.01, 100_000.0)
        } else {
            1.0
        };
        Self {
            start: Instant::now(),
            speed,
        }
    }

    /// Seconds of plant time since start.
    pub fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * self.speed
    }

    /// Speed-up over real time.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// Wall-clock duration of `plant_s` seconds of plant time.
    pub fn wall(&self, plant_s: f64) -> Duration {
        Duration::from_secs_f64((plant_s / self.speed).max(0.0))
    }
}
