//! Heat-exchanger relations (ε-NTU) and the exact first-order lag used everywhere in the plant.

/// Effectiveness of a counterflow heat exchanger for `ntu` and capacity ratio `cr = C_min/C_max`.
pub fn counterflow_effectiveness(ntu: f64, cr: f64) -> f64 {
    let ntu = ntu.max(0.0);
    let cr = cr.clamp(0.0, 1.0);
    if ntu == 0.0 {
        return 0.0;
    }
    if (1.0 - cr).abs() < 1e-6 {
        return ntu / (1.0 + ntu);
    }
    let e = (-ntu * (1.0 - cr)).exp();
    (1.0 - e) / (1.0 - cr * e)
}

/// NTU of a counterflow heat exchanger that achieves effectiveness `eps` at capacity ratio `cr`.
/// Returns `None` when `eps` is not reachable (ε ≥ 1, or ε ≥ 1/cr).
pub fn counterflow_ntu(eps: f64, cr: f64) -> Option<f64> {
    let cr = cr.clamp(0.0, 1.0);
    if !(eps > 0.0 && eps < 1.0) {
        return None;
    }
    if (1.0 - cr).abs() < 1e-6 {
        return Some(eps / (1.0 - eps));
    }
    let arg = (eps - 1.0) / (eps * cr - 1.0);
    if arg <= 0.0 {
        return None;
    }
    Some(arg.ln() / (cr - 1.0))
}

/// `ε·C_min` (W/K) of a counterflow exchanger with conductance `ua` between capacity rates `c1`, `c2`.
pub fn counterflow_conductance(ua: f64, c1: f64, c2: f64) -> f64 {
    let c_min = c1.min(c2);
    let c_max = c1.max(c2);
    if c_min <= 0.0 || ua <= 0.0 {
        return 0.0;
    }
    counterflow_effectiveness(ua / c_min, c_min / c_max) * c_min
}

/// Exact step of a first-order lag `τ·dx/dt = x_ss − x` over `dt` (stable for any `dt`).
#[inline]
pub fn lag(x: f64, x_ss: f64, dt: f64, tau: f64) -> f64 {
    if tau <= 0.0 {
        return x_ss;
    }
    x_ss + (x - x_ss) * (-dt / tau).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effectiveness_limits() {
        // NTU → ∞: ε → 1 for Cr < 1; balanced exchanger tends to 1 more slowly.
        assert!((counterflow_effectiveness(50.0, 0.5) - 1.0).abs() < 1e-9);
        assert!((counterflow_effectiveness(1e6, 1.0) - 1.0).abs() < 1e-5);
        // Cr = 0 (condensing side): ε = 1 − e^−NTU.
        assert!((counterflow_effectiveness(1.0, 0.0) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        // NTU → 0: ε → NTU.
        assert!((counterflow_effectiveness(1e-4, 0.7) - 1e-4).abs() < 1e-7);
        assert_eq!(counterflow_effectiveness(0.0, 0.5), 0.0);
    }

    #[test]
    fn ntu_inverts_effectiveness() {
        for &cr in &[0.0, 0.3, 0.8, 0.999_999_9, 1.0] {
            for &ntu in &[0.1, 1.0, 2.5, 6.0] {
                let e = counterflow_effectiveness(ntu, cr);
                let back = counterflow_ntu(e, cr).unwrap();
                assert!(
                    (back - ntu).abs() < 1e-6 * ntu.max(1.0),
                    "cr {cr} ntu {ntu} back {back}"
                );
            }
        }
        assert!(counterflow_ntu(1.0, 0.5).is_none());
    }

    #[test]
    fn lag_is_exact_and_stable() {
        // Two half steps equal one full step.
        let a = lag(lag(10.0, 0.0, 5.0, 7.0), 0.0, 5.0, 7.0);
        let b = lag(10.0, 0.0, 10.0, 7.0);
        assert!((a - b).abs() < 1e-12);
        // Huge step: lands on the steady state, no overshoot.
        assert!((lag(10.0, 3.0, 1e9, 1.0) - 3.0).abs() < 1e-12);
    }
}
