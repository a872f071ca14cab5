//! Power limits that did not arrive are sent again.
//!
//! Power-limit commands go out over MQTT when they change (the controller's emergency caps, the
//! ledger's grants, a policy's caps). A command sent while the broker or a rack agent is down is
//! lost, and a later tick would not send it again: the rack would keep the limit it had. So the
//! daemon remembers, per rack, the limits it last sent and when, and compares them with the
//! limits in force that the rack's own telemetry reports. When telemetry sampled at least
//! `grace_s` after the command still reports a different limit (by more than [`TOLERANCE_W`]) on
//! any GPU, the command is sent again, and that is logged and counted. The comparison waits for
//! fresh telemetry: a rack that reports nothing gets nothing re-sent until it reports again
//! (the controller's stale-data rules already hold its limits down).

use coolplane_core::signals::{Actions, Measurements, Quality, RackPowerLimits};
use coolplane_core::topology::Topology;

/// A reported limit within this of the one sent counts as in force, W (telemetry reports 0.01 W).
pub const TOLERANCE_W: f32 = 1.0;

#[derive(Debug, Clone)]
struct Sent {
    limits_w: Vec<f32>,
    at_s: f64,
}

/// One rack whose limits were sent again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resent {
    /// Rack index.
    pub rack: u32,
    /// GPUs whose reported limit differed from the one sent.
    pub gpus_differing: usize,
    /// When the limits had been sent, plant time, s.
    pub sent_at_s: f64,
}

/// Per rack, the power limits last sent and whether they are in force.
#[derive(Debug, Clone)]
pub struct LimitsInFlight {
    sent: Vec<Option<Sent>>,
    grace_s: f64,
    range_w: (f32, f32),
    /// Rack commands sent again, in all.
    pub resent_total: u64,
}

impl LimitsInFlight {
    /// For `racks` racks; telemetry must be sampled `grace_s` after a command before a difference
    /// counts as a lost command (command latency plus one telemetry interval). `range_w`: the
    /// GPUs' power-limit range, to which a device clamps what it is sent (a limit outside it is
    /// compared as clamped, so a clamp is never taken for a lost command).
    pub fn new(racks: usize, grace_s: f64, range_w: (f32, f32)) -> Self {
        Self {
            sent: vec![None; racks],
            grace_s,
            range_w,
            resent_total: 0,
        }
    }

    /// After a tick's actions are final: remember the limits sent now, and add to `actions` the
    /// limits of every other rack whose fresh telemetry shows that its last command is not in
    /// force. Returns those racks.
    pub fn check(&mut self, now_s: f64, image: &Measurements, topo: &Topology, actions: &mut Actions) -> Vec<Resent> {
        for p in &actions.power_limits {
            if let Some(s) = self.sent.get_mut(p.rack as usize) {
                // NaN entries leave a GPU's limit as it is: keep the last value sent for it.
                let mut limits_w = s.as_ref().map(|s| s.limits_w.clone()).unwrap_or_default();
                limits_w.resize(p.limits_w.len(), f32::NAN);
                for (old, new) in limits_w.iter_mut().zip(&p.limits_w) {
                    if !new.is_nan() {
                        *old = *new;
                    }
                }
                *s = Some(Sent { limits_w, at_s: now_s });
            }
        }
        let mut out = Vec::new();
        for (r, slot) in self.sent.iter_mut().enumerate() {
            let Some(s) = slot else { continue };
            if actions.power_limits.iter().any(|p| p.rack as usize == r) {
                continue;
            }
            let (Some(rack), Some(m)) = (topo.racks.get(r), image.racks.get(r)) else {
                continue;
            };
            // The rack's telemetry time: its hottest-GPU reading comes with every report.
            let t = &m.gpu_temp_max_c;
            // Sampled within the grace after the command (or NaN), or from the future: not compared.
            let after_grace = t.t_s >= s.at_s + self.grace_s;
            if t.quality == Quality::Bad || !after_grace || t.t_s > now_s + 1.0 {
                continue;
            }
            let differing = s
                .limits_w
                .iter()
                .enumerate()
                .filter(|(i, w)| {
                    let reported = image.gpus.power_limit_w.get(rack.gpus.start + i).copied();
                    let want = w.clamp(self.range_w.0, self.range_w.1);
                    w.is_finite() && reported.is_some_and(|x| x.is_finite() && (x - want).abs() > TOLERANCE_W)
                })
                .count();
            if differing > 0 {
                out.push(Resent {
                    rack: r as u32,
                    gpus_differing: differing,
                    sent_at_s: s.at_s,
                });
                actions.power_limits.push(RackPowerLimits {
                    rack: r as u32,
                    limits_w: s.limits_w.clone(),
                });
                s.at_s = now_s;
            }
        }
        self.resent_total += out.len() as u64;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coolplane_core::signals::{GpuTelemetry, RackMeasurement, Reading};
    use coolplane_core::site::builtin_site;

    fn image(topo: &Topology, t_s: f64, limit_w: f32) -> Measurements {
        Measurements {
            racks: vec![
                RackMeasurement {
                    gpu_temp_max_c: Reading::good(70.0, t_s),
                    ..Default::default()
                };
                topo.racks.len()
            ],
            gpus: GpuTelemetry {
                t_s,
                power_limit_w: vec![limit_w; topo.gpu_count],
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn cap(rack: u32, n: usize, w: f32) -> Actions {
        Actions {
            power_limits: vec![RackPowerLimits {
                rack,
                limits_w: vec![w; n],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_lost_limit_is_sent_again_once_fresh_telemetry_shows_it_missing() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let n = topo.racks[3].gpus.len();
        let mut f = LimitsInFlight::new(topo.racks.len(), 15.0, (200.0, 1000.0));
        // Tick at 100 s: rack 3 capped to 700 W. The command is lost (broker down).
        let mut a = cap(3, n, 700.0);
        assert!(f.check(100.0, &image(&topo, 95.0, 1000.0), &topo, &mut a).is_empty());
        // 110 s: telemetry from 105 s still says 1000 W, but it is within the grace: wait.
        let mut a = Actions::default();
        assert!(f.check(110.0, &image(&topo, 105.0, 1000.0), &topo, &mut a).is_empty());
        assert!(a.power_limits.is_empty());
        // 130 s: telemetry from 120 s, 20 s after the command, still 1000 W: sent again.
        let r = f.check(130.0, &image(&topo, 120.0, 1000.0), &topo, &mut a);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].rack, r[0].gpus_differing, r[0].sent_at_s), (3, n, 100.0));
        assert_eq!(a.power_limits.len(), 1);
        assert_eq!(a.power_limits[0].rack, 3);
        assert!(a.power_limits[0].limits_w.iter().all(|&w| w == 700.0));
        assert_eq!(f.resent_total, 1);
        // The resend restarts the grace: not again at the next tick on the same old report.
        let mut a = Actions::default();
        assert!(f.check(140.0, &image(&topo, 135.0, 1000.0), &topo, &mut a).is_empty());
        // A device clamps what it is sent: a limit below its range counts as in force at the bottom.
        let mut a = cap(3, n, 100.0);
        f.check(150.0, &image(&topo, 145.0, 700.0), &topo, &mut a);
        let mut a = Actions::default();
        assert!(f.check(190.0, &image(&topo, 185.0, 200.0), &topo, &mut a).is_empty());
        let mut a = cap(3, n, 700.0);
        f.check(195.0, &image(&topo, 185.0, 200.0), &topo, &mut a);
        // Once in force (within the tolerance), nothing more is sent.
        let mut a = Actions::default();
        assert!(f.check(220.0, &image(&topo, 215.0, 700.4), &topo, &mut a).is_empty());
        assert!(a.power_limits.is_empty());
    }

    #[test]
    fn nothing_is_resent_on_stale_or_missing_telemetry_or_when_the_tick_sends_anyway() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let n = topo.racks[0].gpus.len();
        let mut f = LimitsInFlight::new(topo.racks.len(), 15.0, (200.0, 1000.0));
        let mut a = cap(0, n, 600.0);
        f.check(100.0, &image(&topo, 95.0, 1000.0), &topo, &mut a);
        // No report since the command (the rack agent is down): nothing to compare.
        let mut a = Actions::default();
        assert!(f.check(300.0, &image(&topo, 99.0, 1000.0), &topo, &mut a).is_empty());
        // Bad quality: not compared either.
        let mut m = image(&topo, 290.0, 1000.0);
        m.racks[0].gpu_temp_max_c.quality = Quality::Bad;
        assert!(f.check(300.0, &m, &topo, &mut a).is_empty());
        // The tick sends new limits for the rack itself: those are remembered, nothing added.
        let mut a = cap(0, n, 650.0);
        assert!(f.check(310.0, &image(&topo, 305.0, 1000.0), &topo, &mut a).is_empty());
        assert_eq!(a.power_limits.len(), 1);
        // NaN in a later command leaves that GPU's last value; a difference on it is resent.
        let mut a = Actions {
            power_limits: vec![RackPowerLimits {
                rack: 0,
                limits_w: std::iter::once(500.0)
                    .chain(std::iter::repeat(f32::NAN))
                    .take(n)
                    .collect(),
            }],
            ..Default::default()
        };
        f.check(320.0, &image(&topo, 315.0, 650.0), &topo, &mut a);
        let mut m = image(&topo, 340.0, 650.0);
        m.gpus.power_limit_w[topo.racks[0].gpus.start] = 500.0;
        let mut a = Actions::default();
        assert!(f.check(345.0, &m, &topo, &mut a).is_empty(), "all in force");
        let mut m = image(&topo, 340.0, 650.0);
        m.gpus.power_limit_w[topo.racks[0].gpus.start + 1] = 1000.0;
        let r = f.check(346.0, &m, &topo, &mut a);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].gpus_differing, 2, "GPU 0 (500 sent, 650 reported) and GPU 1");
    }
}
