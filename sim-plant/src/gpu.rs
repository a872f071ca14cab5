//! The per-GPU inner loop of the plant (plant-model.md §2), over one rack's GPUs.
//!
//! Two kernels compute the same physics:
//! - [`kernel_fast`] is branch-free and written in lanes of 8 so the compiler vectorises it. It
//!   handles every GPU that does not cross the slowdown or shutdown temperature during the step,
//!   and reports whether any did.
//! - [`kernel_exact`] additionally splits the step at the moment a die crosses slowdown (clocks
//!   halve from then on) or shutdown (power stops), so results do not depend on the step length.
//!
//! The plant runs the fast kernel and, for the rare rack where a GPU crossed, restores the rack's
//! state and runs the exact one. Both give identical results when no GPU crosses.

use coolplane_core::signals::clock_event;
use multiversion::multiversion;

/// Flag bit: in hardware slowdown.
pub const THROTTLED: u8 = 1;
/// Flag bit: shut down.
pub const DEAD: u8 = 2;
const LANES: usize = 8;

/// Constants of the GPU model for one step.
#[derive(Debug, Clone, Copy)]
pub struct GpuConsts {
    /// Temperature-independent part of the idle power, W.
    pub static_fixed_w: f32,
    /// Die leakage at 60 °C, W.
    pub leak60_w: f32,
    /// Exponential leakage coefficient κ, 1/K.
    pub kappa: f32,
    /// TDP − idle, W.
    pub dyn_w: f32,
    /// Performance exponent under a cap (when `knee` is `None`).
    pub alpha: f32,
    /// Knee curve `[shallow slope, knee power ratio, deep slope]` of performance under a cap.
    pub knee: Option<[f32; 3]>,
    /// Slowdown temperature, °C.
    pub slow_c: f32,
    /// Slowdown release temperature (slowdown − hysteresis), °C.
    pub release_c: f32,
    /// Near-throttle threshold (slowdown − 5 K), °C.
    pub near_c: f32,
    /// Max operating temperature, °C.
    pub max_op_c: f32,
    /// Shutdown temperature, °C.
    pub shutdown_c: f32,
    /// e^(−dt/τ).
    pub k: f32,
    /// dt/τ.
    pub dt_over_tau: f32,
}

/// Below this ratio of drawn to demanded power the exact kernel computes `x^α` with `powf`;
/// above it a third-order Taylor series around 1 is used (absolute error < 5e-5 for 0.3 ≤ α ≤ 2).
pub const DEEP_CAP_RATIO: f32 = 0.85;

/// `e^x` for |x| ≤ 2 without a libm call (so the lanes vectorise): `(Taylor₄(x/4))^4`, relative
/// error < 5e-5 for |x| ≤ 1 (the leakage range: κ·(T − 60) for dies between 0 and 120 °C) and
/// < 1e-3 at |x| = 2.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    let y = x.clamp(-2.0, 2.0) * 0.25;
    let p = 1.0 + y * (1.0 + y * (0.5 + y * (1.0 / 6.0 + y * (1.0 / 24.0))));
    let p2 = p * p;
    p2 * p2
}

impl GpuConsts {
    /// Static power (leakage grows exponentially with die temperature), W.
    #[inline(always)]
    pub fn static_w(&self, t: f32) -> f32 {
        self.static_fixed_w + self.leak60_w * fast_exp(self.kappa * (t - 60.0))
    }

    /// Relative performance at power ratio `x ≤ 1` on the knee curve.
    #[inline(always)]
    fn perf_knee(k: [f32; 3], x: f32) -> f32 {
        let [s1, knee, s2] = k;
        let shallow = 1.0 - s1 * (1.0 - x);
        let deep = 1.0 - s1 * (1.0 - knee) - s2 * (knee - x);
        let p = if x >= knee { shallow } else { deep };
        p.max(0.0)
    }

    /// Relative performance `x^α` of a GPU drawing `x` of its demanded power.
    #[inline(always)]
    fn perf_taylor(&self, x: f32) -> f32 {
        let a = self.alpha;
        let dx = x - 1.0;
        1.0 + dx * (a + dx * (a * (a - 1.0) * 0.5 + dx * (a * (a - 1.0) * (a - 2.0) * (1.0 / 6.0))))
    }
}

/// One rack's GPU slices and its coolant conditions.
pub struct RackGpus<'a> {
    /// Coolant inlet temperature, °C.
    pub t_in: f32,
    /// Flow-dependent part of the cold-plate resistance (convection + caloric), K/W.
    pub r_flow: f32,
    /// Utilisation per GPU this step.
    pub util: &'a [f32],
    /// Die temperatures (state).
    pub temp: &'a mut [f32],
    /// Conduction resistance per GPU, K/W.
    pub r_cond: &'a [f32],
    /// Power limit per GPU, W.
    pub cap: &'a [f32],
    /// Flags per GPU (state).
    pub flags: &'a mut [u8],
    /// Die-sensor bias per GPU, K.
    pub bias: &'a [f32],
    /// Reported temperature (out).
    pub out_temp: &'a mut [f32],
    /// Reported power (out).
    pub out_power: &'a mut [f32],
    /// Clock-event bits (out).
    pub out_events: &'a mut [u8],
}

/// Sums over one rack for one step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RackSums {
    /// GPU power, W (average over the step).
    pub power_w: f32,
    /// Σ u·perf over GPUs.
    pub work: f32,
    /// Σ u over GPUs.
    pub demand: f32,
    /// GPUs in slowdown at the end of the step.
    pub throttled: u32,
    /// GPUs within 5 K of slowdown.
    pub near: u32,
    /// Hottest die, °C.
    pub t_max: f32,
    /// Hottest reported die, °C.
    pub reported_max: f32,
    /// Σ of the GPUs' power telemetry (0.01 W, as NVML/`nvidia-smi` report it), W.
    pub telemetry_w: f32,
}

/// 2²³: from here on every f32 is an integer.
const F32_INT: f32 = 8_388_608.0;

/// Round to the nearest integer, halves away from zero, without a libm call or an integer
/// conversion (temperature telemetry is whole °C). Only adds, compares and selects, so the lanes
/// of the kernel vectorise on any x86-64 (a saturating `as i32` does not) and every clone of the
/// kernel rounds bit for bit the same: `v = |x| + 0.5`; `v + 2²³ − 2²³` is `v` rounded to an
/// integer (exact for 0 ≤ v < 2²³), one less if that rounded up, which is `floor(v)`; the sign
/// comes back last. Values of 2²³ and more are integers already and pass through.
#[inline(always)]
pub fn round_fast(x: f32) -> f32 {
    let v = x.abs() + 0.5;
    let r = (v + F32_INT) - F32_INT;
    let fl = if r > v { r - 1.0 } else { r };
    let out = if v < F32_INT { fl } else { x.abs() };
    out.copysign(x)
}

/// Power telemetry as NVML reports it (milliwatt counter, `nvidia-smi` prints 0.01 W): whole
/// watts would bias the rack path of the IT-meter check when accelerators of ~100 W run in
/// lockstep (every die of a two-phase tank sees the same pool), 0.01 W does not.
#[inline(always)]
pub fn round_centiwatt(x: f32) -> f32 {
    round_fast(x * 100.0) / 100.0
}

/// Fraction of a step (0–1) after which a first-order lag from `t0` towards `t_ss` reaches
/// `target` (which lies between them); `dt_over_tau` is the step over the time constant.
pub fn crossing_fraction(t0: f32, t_ss: f32, target: f32, dt_over_tau: f32) -> f32 {
    let num = t0 - t_ss;
    let den = target - t_ss;
    if den.abs() < 1e-6 || num / den <= 1.0 {
        return 0.0;
    }
    ((num / den).ln() / dt_over_tau).clamp(0.0, 1.0)
}

/// Result of one GPU's step, shared by both kernels.
struct One {
    t_new: f32,
    pw: f32,
    perf: f32,
    capped: bool,
    now_thr: bool,
    nf: u8,
    alive: bool,
    deep: bool,
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn one_fast<const KNEE: bool>(c: &GpuConsts, t_in: f32, r_flow: f32, u: f32, t: f32, rc: f32, cap: f32, f: u8) -> One {
    let alive = f & DEAD == 0;
    let p_static = c.static_w(t);
    let p_dem = if alive { p_static + u * c.dyn_w } else { 0.0 };
    let capped = p_dem > cap;
    let p_cap = if capped { cap } else { p_dem };
    let throttled = f & THROTTLED != 0;
    let pw = if throttled { 0.6 * p_cap } else { p_cap };
    let x = if capped { p_cap / p_dem } else { 1.0 };
    // The curve is chosen at compile time (the kernels are instantiated for both), so the lanes
    // stay branch-free and compute only one curve.
    let perf_cap = if KNEE {
        GpuConsts::perf_knee(c.knee.unwrap_or([0.0, 0.0, 0.0]), x)
    } else {
        c.perf_taylor(x)
    };
    let perf = if throttled { 0.5 * perf_cap } else { perf_cap };
    let t_ss = t_in + pw * (rc + r_flow);
    let t_new = t_ss + (t - t_ss) * c.k;
    let now_thr = alive & ((t_new >= c.slow_c) | (throttled & (t_new > c.release_c)));
    let nf = if now_thr { f | THROTTLED } else { f & !THROTTLED };
    One {
        t_new,
        pw,
        perf,
        capped,
        now_thr,
        nf,
        alive,
        deep: !KNEE & (x < DEEP_CAP_RATIO),
    }
}

#[inline(always)]
fn events_bits(c: &GpuConsts, o: &One) -> u8 {
    (o.capped as u8 * clock_event::SW_POWER_CAP)
        | (o.now_thr as u8 * clock_event::HW_SLOWDOWN)
        | ((o.t_new >= c.max_op_c) as u8 * clock_event::SW_THERMAL)
        | ((o.nf & DEAD != 0) as u8 * clock_event::HW_THERMAL)
}

/// The vectorisable kernel. Returns `None` (state partly written: restore it) when a GPU crossed
/// slowdown from below or reached shutdown during the step, or runs under a deep power cap.
///
/// Dispatched at run time (see [`kernel_clone`]): on a CPU with AVX2 and FMA the lanes run 8 wide
/// in `ymm` registers, elsewhere 4 wide in SSE2; the binary stays portable. Both clones compute
/// the same IEEE operations in the same order (Rust never contracts `a·b + c` into an FMA on its
/// own), so results are bit for bit the same on every CPU.
pub fn kernel_fast(c: &GpuConsts, g: &mut RackGpus<'_>) -> Option<RackSums> {
    if c.knee.is_some() {
        kernel_fast_knee(c, g)
    } else {
        kernel_fast_alpha(c, g)
    }
}

/// The clone of the fast kernel the run-time dispatcher takes on this CPU: `"x86-64-v3 (AVX2+FMA)"`
/// or `"generic"` (the build's baseline, SSE2 on x86-64). The detection runs once and is cached.
#[multiversion(targets("x86_64+avx2+fma"))]
pub fn kernel_clone() -> &'static str {
    if multiversion::target::target_cfg_f!(all(target_feature = "avx2", target_feature = "fma")) {
        "x86-64-v3 (AVX2+FMA)"
    } else {
        "generic"
    }
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn kernel_fast_knee(c: &GpuConsts, g: &mut RackGpus<'_>) -> Option<RackSums> {
    kernel_fast_impl::<true>(c, g)
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn kernel_fast_alpha(c: &GpuConsts, g: &mut RackGpus<'_>) -> Option<RackSums> {
    kernel_fast_impl::<false>(c, g)
}

/// The body of the fast kernel, inlined into each dispatched clone (so it is compiled once per
/// target-feature set).
#[inline(always)]
fn kernel_fast_impl<const KNEE: bool>(c: &GpuConsts, g: &mut RackGpus<'_>) -> Option<RackSums> {
    let n = g.temp.len();
    let (util, r_cond, cap, bias) = (&g.util[..n], &g.r_cond[..n], &g.cap[..n], &g.bias[..n]);
    let (temp, flags) = (&mut g.temp[..n], &mut g.flags[..n]);
    let (out_temp, out_power, out_events) = (&mut g.out_temp[..n], &mut g.out_power[..n], &mut g.out_events[..n]);
    let mut acc = Lanes::default();
    let (t_in, r_flow) = (g.t_in, g.r_flow);
    let mut b = 0;
    while b + LANES <= n {
        let e = b + LANES;
        lanes_step::<KNEE>(
            c,
            t_in,
            r_flow,
            &mut acc,
            &util[b..e],
            &r_cond[b..e],
            &cap[b..e],
            &bias[b..e],
            &mut temp[b..e],
            &mut flags[b..e],
            &mut out_temp[b..e],
            &mut out_power[b..e],
            &mut out_events[b..e],
        );
        b = e;
    }
    if b < n {
        // Remainder: pad to a full lane set with idle dummies that are discarded.
        let m = n - b;
        let mut u8s = [0.0f32; LANES];
        let mut rc8 = [0.0f32; LANES];
        let mut cap8 = [1.0f32; LANES];
        let mut bias8 = [0.0f32; LANES];
        let mut t8 = [t_in; LANES];
        let mut f8 = [DEAD; LANES];
        u8s[..m].copy_from_slice(&util[b..]);
        rc8[..m].copy_from_slice(&r_cond[b..]);
        cap8[..m].copy_from_slice(&cap[b..]);
        bias8[..m].copy_from_slice(&bias[b..]);
        t8[..m].copy_from_slice(&temp[b..]);
        f8[..m].copy_from_slice(&flags[b..]);
        let (mut ot, mut op, mut oe) = ([0.0f32; LANES], [0.0f32; LANES], [0u8; LANES]);
        let mut tail = Lanes::default();
        lanes_step::<KNEE>(
            c, t_in, r_flow, &mut tail, &u8s, &rc8, &cap8, &bias8, &mut t8, &mut f8, &mut ot, &mut op, &mut oe,
        );
        temp[b..].copy_from_slice(&t8[..m]);
        flags[b..].copy_from_slice(&f8[..m]);
        out_temp[b..].copy_from_slice(&ot[..m]);
        out_power[b..].copy_from_slice(&op[..m]);
        out_events[b..].copy_from_slice(&oe[..m]);
        // Fold only the real lanes of the tail (dummies are dead, idle and at the inlet).
        for l in 0..m {
            acc.p[l] += tail.p[l];
            acc.w[l] += tail.w[l];
            acc.d[l] += tail.d[l];
            acc.thr[l] += tail.thr[l];
            acc.near[l] += tail.near[l];
            acc.tmax[l] = acc.tmax[l].max(tail.tmax[l]);
            acc.rep[l] = acc.rep[l].max(tail.rep[l]);
            acc.ev[l] += tail.ev[l];
            acc.tel[l] += tail.tel[l];
        }
    }
    if acc.ev.iter().any(|&e| e > 0) {
        return None;
    }
    Some(RackSums {
        power_w: acc.p.iter().sum(),
        work: acc.w.iter().sum(),
        demand: acc.d.iter().sum(),
        throttled: acc.thr.iter().sum(),
        near: acc.near.iter().sum(),
        t_max: acc.tmax.iter().copied().fold(f32::MIN, f32::max),
        reported_max: acc.rep.iter().copied().fold(f32::MIN, f32::max),
        telemetry_w: acc.tel.iter().sum(),
    })
}

/// Per-lane accumulators of the fast kernel.
struct Lanes {
    p: [f32; LANES],
    w: [f32; LANES],
    d: [f32; LANES],
    thr: [u32; LANES],
    near: [u32; LANES],
    tmax: [f32; LANES],
    rep: [f32; LANES],
    ev: [u32; LANES],
    tel: [f32; LANES],
}

impl Default for Lanes {
    fn default() -> Self {
        Self {
            p: [0.0; LANES],
            w: [0.0; LANES],
            d: [0.0; LANES],
            thr: [0; LANES],
            near: [0; LANES],
            tmax: [f32::MIN; LANES],
            rep: [f32::MIN; LANES],
            ev: [0; LANES],
            tel: [0.0; LANES],
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn lanes_step<const KNEE: bool>(
    c: &GpuConsts,
    t_in: f32,
    r_flow: f32,
    acc: &mut Lanes,
    util: &[f32],
    r_cond: &[f32],
    cap: &[f32],
    bias: &[f32],
    temp: &mut [f32],
    flags: &mut [u8],
    out_temp: &mut [f32],
    out_power: &mut [f32],
    out_events: &mut [u8],
) {
    let (util, r_cond, cap, bias) = (&util[..LANES], &r_cond[..LANES], &cap[..LANES], &bias[..LANES]);
    let (temp, flags) = (&mut temp[..LANES], &mut flags[..LANES]);
    let (out_temp, out_power, out_events) = (
        &mut out_temp[..LANES],
        &mut out_power[..LANES],
        &mut out_events[..LANES],
    );
    for l in 0..LANES {
        let t = temp[l];
        let f = flags[l];
        let u = util[l];
        let o = one_fast::<KNEE>(c, t_in, r_flow, u, t, r_cond[l], cap[l], f);
        let crossing = o.alive & (f & THROTTLED == 0) & (o.t_new >= c.slow_c) & (t < c.slow_c);
        let dies = o.alive & (o.t_new >= c.shutdown_c);
        acc.ev[l] += (crossing | dies | o.deep) as u32;
        temp[l] = o.t_new;
        flags[l] = o.nf;
        acc.p[l] += o.pw;
        acc.w[l] += u * if o.alive { o.perf } else { 0.0 };
        acc.d[l] += u;
        acc.thr[l] += o.now_thr as u32;
        acc.near[l] += (o.t_new >= c.near_c) as u32;
        acc.tmax[l] = if o.t_new > acc.tmax[l] { o.t_new } else { acc.tmax[l] };
        let rep = round_fast(o.t_new + bias[l]);
        acc.rep[l] = if rep > acc.rep[l] { rep } else { acc.rep[l] };
        out_temp[l] = rep;
        let p_tel = round_centiwatt(o.pw);
        out_power[l] = p_tel;
        acc.tel[l] += p_tel;
        out_events[l] = events_bits(c, &o);
    }
}

/// The exact kernel: splits the step at slowdown and shutdown crossings. Indices (within the
/// rack) of GPUs that shut down are pushed to `died`.
pub fn kernel_exact(c: &GpuConsts, g: &mut RackGpus<'_>, died: &mut Vec<u32>) -> RackSums {
    let mut s = RackSums {
        t_max: f32::MIN,
        reported_max: f32::MIN,
        ..Default::default()
    };
    let (t_in, r_flow) = (g.t_in, g.r_flow);
    for i in 0..g.temp.len() {
        let t = g.temp[i];
        let f = g.flags[i];
        let u = g.util[i];
        let rc = g.r_cond[i];
        let mut o = if c.knee.is_some() {
            one_fast::<true>(c, t_in, r_flow, u, t, rc, g.cap[i], f)
        } else {
            one_fast::<false>(c, t_in, r_flow, u, t, rc, g.cap[i], f)
        };
        let throttled = f & THROTTLED != 0;
        if o.deep {
            // Deep cap: the exact power law.
            let p_cap = if throttled { o.pw / 0.6 } else { o.pw };
            let p_dem = c.static_w(t) + u * c.dyn_w;
            o.perf = (p_cap / p_dem).powf(c.alpha) * if throttled { 0.5 } else { 1.0 };
        }
        let p_cap = if throttled { o.pw / 0.6 } else { o.pw };
        let t_ss = t_in + o.pw * (rc + r_flow);
        if o.alive && !throttled && o.t_new >= c.slow_c && t < c.slow_c {
            // Hardware slowdown engages the moment the die crosses the slowdown temperature.
            let theta = crossing_fraction(t, t_ss, c.slow_c, c.dt_over_tau);
            let t_ss2 = t_in + 0.6 * o.pw * (rc + r_flow);
            o.t_new = t_ss2 + (c.slow_c - t_ss2) * (-(1.0 - theta) * c.dt_over_tau).exp();
            o.pw *= theta + (1.0 - theta) * 0.6;
            o.perf *= theta + (1.0 - theta) * 0.5;
            o.now_thr = true;
            o.nf = f | THROTTLED;
        }
        if o.alive && o.t_new >= c.shutdown_c {
            // Thermal shutdown at the crossing: power stops, the die cools towards the inlet.
            let t_ss_now = if o.now_thr {
                t_in + 0.6 * p_cap * (rc + r_flow)
            } else {
                t_ss
            };
            let t_from = t.min(c.shutdown_c);
            let theta = crossing_fraction(t_from, t_ss_now, c.shutdown_c, c.dt_over_tau);
            o.t_new = t_in + (c.shutdown_c - t_in) * (-(1.0 - theta) * c.dt_over_tau).exp();
            o.pw *= theta;
            o.perf *= theta;
            o.now_thr = false;
            o.nf = DEAD;
            died.push(i as u32);
        }
        g.temp[i] = o.t_new;
        g.flags[i] = o.nf;
        s.power_w += o.pw;
        s.work += u * if o.alive { o.perf } else { 0.0 };
        s.demand += u;
        s.throttled += o.now_thr as u32;
        s.near += (o.t_new >= c.near_c) as u32;
        s.t_max = s.t_max.max(o.t_new);
        let rep = round_fast(o.t_new + g.bias[i]);
        s.reported_max = s.reported_max.max(rep);
        g.out_temp[i] = rep;
        g.out_power[i] = round_centiwatt(o.pw);
        s.telemetry_w += g.out_power[i];
        g.out_events[i] = events_bits(c, &o);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taylor_perf_matches_powf_above_the_deep_cap_ratio() {
        for a in [0.3f32, 0.82, 1.2, 2.0] {
            let c = GpuConsts { alpha: a, ..consts() };
            for i in 0..=30 {
                let x = DEEP_CAP_RATIO + 0.005 * i as f32;
                let x = x.min(1.0);
                assert!((c.perf_taylor(x) - x.powf(a)).abs() < 5e-5, "x {x} a {a}");
            }
        }
    }

    #[test]
    fn fast_exp_is_accurate_in_the_leakage_range() {
        for i in -100..=100 {
            let x = i as f32 / 100.0;
            let rel = (fast_exp(x) - x.exp()).abs() / x.exp();
            assert!(rel < 5e-5, "x {x} rel {rel}");
        }
        assert!((fast_exp(2.0) - 2.0f32.exp()).abs() / 2.0f32.exp() < 1e-3);
    }

    #[test]
    fn fast_round_rounds_half_away_from_zero() {
        for (x, r) in [
            (71.49f32, 71.0f32),
            (71.5, 72.0),
            (-3.5, -4.0),
            (-0.2, 0.0),
            (999.6, 1000.0),
        ] {
            assert_eq!(round_fast(x), r, "{x}");
        }
    }

    #[test]
    fn fast_round_matches_the_integer_conversion() {
        // The add/compare/select rounding equals the plain conversion over the telemetry range
        // (die temperatures and centiwatts of power) and at the 2²³ edge.
        let reference = |x: f32| {
            let y = x + if x >= 0.0 { 0.5 } else { -0.5 };
            (y as i64) as f32
        };
        let mut x = -300.0f32;
        while x < 300.0 {
            assert_eq!(round_fast(x), reference(x), "{x}");
            x += 0.013;
        }
        for x in [0.0f32, 0.5, 1.5, 2.5, 123_456.5, 8_388_607.0, -8_388_607.0, 5_000_000.4] {
            assert_eq!(round_fast(x), reference(x), "{x}");
        }
        assert_eq!(round_fast(1.0e9), 1.0e9);
        assert!(round_fast(f32::NAN).is_nan());
    }

    #[test]
    fn dispatched_clone_equals_the_baseline_bit_for_bit() {
        // kernel_fast runs the clone the CPU supports (AVX2 + FMA here when present);
        // kernel_fast_impl called directly is compiled for the build's baseline.
        eprintln!("clone: {}", kernel_clone());
        for knee in [None, Some([0.2f32, 0.7, 1.1])] {
            for cap in [1000.0f32, 950.0, 870.0] {
                let c = GpuConsts { knee, ..consts() };
                let run = |dispatch: bool| {
                    let n = 77;
                    let util: Vec<f32> = (0..n).map(|i| 0.3 + 0.009 * i as f32).collect();
                    let mut temp: Vec<f32> = (0..n).map(|i| 45.0 + 0.31 * i as f32).collect();
                    let rc: Vec<f32> = (0..n).map(|i| 0.015 + 0.0001 * i as f32).collect();
                    let caps = vec![cap; n];
                    let mut flags = vec![0u8; n];
                    let bias: Vec<f32> = (0..n).map(|i| -0.7 + 0.02 * i as f32).collect();
                    let (mut ot, mut op, mut oe) = (vec![0.0; n], vec![0.0; n], vec![0u8; n]);
                    let mut g = RackGpus {
                        t_in: 38.7,
                        r_flow: 0.011,
                        util: &util,
                        temp: &mut temp,
                        r_cond: &rc,
                        cap: &caps,
                        flags: &mut flags,
                        bias: &bias,
                        out_temp: &mut ot,
                        out_power: &mut op,
                        out_events: &mut oe,
                    };
                    let s = if dispatch {
                        kernel_fast(&c, &mut g)
                    } else if knee.is_some() {
                        kernel_fast_impl::<true>(&c, &mut g)
                    } else {
                        kernel_fast_impl::<false>(&c, &mut g)
                    };
                    (temp, flags, ot, op, oe, s)
                };
                let (a, b) = (run(true), run(false));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a.0), bits(&b.0), "temperatures, cap {cap}");
                assert_eq!(a.1, b.1);
                assert_eq!(bits(&a.2), bits(&b.2));
                assert_eq!(bits(&a.3), bits(&b.3));
                assert_eq!(a.4, b.4);
                assert_eq!(a.5, b.5, "rack sums, cap {cap}");
                assert!(a.5.is_some(), "no crossing in this case");
            }
        }
    }

    #[test]
    fn crossing_fraction_solves_the_lag() {
        // From 80 towards 100 with dt/τ = 1: reaches 89 at ln(20/11) of the step.
        let th = crossing_fraction(80.0, 100.0, 89.0, 1.0);
        assert!((th - (20.0f32 / 11.0).ln()).abs() < 1e-5);
        assert_eq!(crossing_fraction(95.0, 100.0, 89.0, 1.0), 0.0);
    }

    fn consts() -> GpuConsts {
        GpuConsts {
            static_fixed_w: 0.0,
            leak60_w: 150.0,
            kappa: 0.007,
            dyn_w: 850.0,
            alpha: 0.82,
            knee: None,
            slow_c: 89.0,
            release_c: 86.0,
            near_c: 84.0,
            max_op_c: 87.0,
            shutdown_c: 92.0,
            k: (-4.0f32).exp(),
            dt_over_tau: 4.0,
        }
    }

    fn run(fast: bool, t0: f32, r_flow: f32, cap: f32) -> (Vec<f32>, Vec<u8>, Option<RackSums>, Vec<u32>) {
        let n = 19; // not a multiple of the lane count
        let util: Vec<f32> = (0..n).map(|i| 0.5 + 0.025 * i as f32).collect();
        let mut temp = vec![t0; n];
        let rc: Vec<f32> = (0..n).map(|i| 0.015 + 0.0003 * i as f32).collect();
        let caps = vec![cap; n];
        let mut flags = vec![0u8; n];
        let bias = vec![0.3f32; n];
        let (mut ot, mut op, mut oe) = (vec![0.0; n], vec![0.0; n], vec![0u8; n]);
        let mut g = RackGpus {
            t_in: 40.3,
            r_flow,
            util: &util,
            temp: &mut temp,
            r_cond: &rc,
            cap: &caps,
            flags: &mut flags,
            bias: &bias,
            out_temp: &mut ot,
            out_power: &mut op,
            out_events: &mut oe,
        };
        let mut died = Vec::new();
        let s = if fast {
            kernel_fast(&consts(), &mut g)
        } else {
            Some(kernel_exact(&consts(), &mut g, &mut died))
        };
        (temp, flags, s, died)
    }

    #[test]
    fn kernels_agree_without_crossings() {
        // 1000 W: the TDP binds only through leakage; 950 W: a shallow cap (Taylor branch).
        for cap in [1000.0f32, 950.0] {
            let (t1, f1, s1, _) = run(true, 60.0, 0.013, cap);
            let (t2, f2, s2, d2) = run(false, 60.0, 0.013, cap);
            assert_eq!(t1, t2);
            assert_eq!(f1, f2);
            let (s1, s2) = (s1.unwrap(), s2.unwrap());
            assert!((s1.power_w - s2.power_w).abs() < 1e-2 && (s1.work - s2.work).abs() < 1e-4);
            assert_eq!((s1.throttled, s1.near, s1.t_max), (s2.throttled, s2.near, s2.t_max));
            assert!(d2.is_empty());
        }
    }

    #[test]
    fn deep_caps_take_the_exact_power_law() {
        let (_, _, s, _) = run(true, 60.0, 0.013, 500.0);
        assert!(s.is_none(), "a deep cap goes to the exact kernel");
        let (_, _, s, _) = run(false, 60.0, 0.013, 500.0);
        let s = s.unwrap();
        // Every GPU demands more than 500 W here; work = Σ u · (500/P_dem)^α < Σ u.
        assert!(s.work < s.demand * 0.9 && s.work > s.demand * 0.4, "{s:?}");
    }

    #[test]
    fn fast_kernel_defers_crossings_and_exact_kernel_stops_at_the_limits() {
        // Almost no flow: every die heads far above shutdown.
        let (_, _, s, _) = run(true, 70.0, 0.2, 1000.0);
        assert!(s.is_none(), "the fast kernel must hand crossings to the exact kernel");
        let (temp, flags, s, died) = run(false, 70.0, 0.2, 1000.0);
        let s = s.unwrap();
        assert_eq!(died.len(), temp.len(), "every GPU shuts down");
        assert!(flags.iter().all(|f| *f == DEAD));
        // The die stops heating at shutdown: nothing ends above the shutdown temperature.
        assert!(temp.iter().all(|t| *t <= 92.0 + 1e-3), "{temp:?}");
        assert!(s.power_w < 19.0 * 1000.0, "power stops at the crossing");
    }
}
