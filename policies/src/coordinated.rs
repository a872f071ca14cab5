//! The `coordinated` policy: chooses CDU supply temperature, CDU flow and facility supply
//! setpoint jointly, by predicting with the twin's reduced-order hall model what each candidate
//! costs in facility power and what it does to the work done, and publishes a 15-minute energy
//! plan that says why.
//!
//! How a candidate is judged (every `plan_period_s`, on the latest process image):
//! - **Dies.** Each GPU's die temperature moves with its CDU's supply temperature one for one and
//!   with flow through the rack's learned convective term `f₂·P·(q/q_design)^−0.8` (twin
//!   calibration). Its power and speed then follow the GPU's characterisation from the site file
//!   (static power `idle − L₆₀ + L₆₀·e^(κ(T−60))`, dynamic power `u·(TDP − idle)`, performance
//!   under a power limit on the measured knee curve): a warmer die draws more power if it runs
//!   below its limit and runs slower if it runs at it. That is the leakage trade-off PUE hides.
//! - **Cooling.** CDU pumps from the learned cube law; heat rejection, facility pumps and
//!   chillers, and the rest of the overhead, from the twin's facility models learned from the
//!   meters (in the outdoor-to-water approach, so a facility setpoint is judged by the weather
//!   it has been seen in; the setpoints tried stay within 1 K of those seen).
//! - **Objective:** predicted facility power per unit of work (GPU-seconds of full-speed work),
//!   under two limits: the hottest GPU at today's load at most `slowdown − margin_now_k`, and
//!   every rack's hottest GPU at its thermal design power at most `slowdown − margin_tdp_k` (a
//!   rack may go from idle to full power before the next plan). The facility water stays an
//!   approach below the coldest CDU supply: the CDU heat exchangers' approach at today's load
//!   plus `facility_gap_margin_k`, or plus `chiller_gap_margin_k` while the metered chillers draw
//!   `chiller_gap_share` of the IT power (colder facility water then relieves the air-side
//!   chillers and the facility pumps, which the cooling model underrates).
//! - **Heat-rejection mode** (dry / adiabatic / auto): from the air model. Dry is given up the
//!   tick the facility water runs [`DRY_WARM_K`] over its setpoint without the assist, and that
//!   approach and load are remembered ([`DRY_MEMORY_S`]); no dry while the water is short with the
//!   assist on; a mode the plan left is not chosen again for `mode_return_s`.
//! - **Hysteresis:** the setpoints move only when the best candidate is predicted to save at
//!   least `min_gain` (relative) over keeping the present ones and its setpoint writes (each
//!   charged in energy, in proportion to the mean design load of the site's CDUs), which keeps writes (EEPROM
//!   wear) rare. Where the operator sets an allowance (`write_budget_per_cdu_week`), the moves of
//!   any 7 days after a settling day of plans (`settle_s`) stay within it: a move is made only
//!   if what is left after it would undo it, and a write's price rises as the allowance is used;
//!   a move the limits force goes beyond it only when no move within it restores them.
//! - **The hours ahead** (`ahead_s`, off by default): a candidate's heat rejection, and so the
//!   choice between candidates and between a move and holding, is judged over the coming hours
//!   of outdoor air, a persistence forecast from the policy's own record (yesterday's air at
//!   each hour plus today's difference, fading), so that a move made for this hour's air is not
//!   undone by the afternoon's. In two stages (the default with it), the CDU setpoints (a write
//!   per CDU a kelvin) are judged over those hours with the facility setpoint and mode (a write
//!   a hall) chosen again at each of them. The plan's predictions stay the hour ahead.
//! - **Two-phase immersion tanks** (a CDU is then a tank's condenser-water skid): the dies sit on
//!   the boiling pool, not on the water, so the candidates are the condenser water's supply and
//!   flow. Each tank's condenser is learned from its skid's meters and pool temperature
//!   (`TankModel`: effectiveness, hence `1/UA`, every tick; its water-side slope against flow
//!   once the flow has varied, all of it on the water side until then); a candidate's pool
//!   follows, the dies move only with the pool above the fluid's boiling point, and every tank at
//!   its design heat must keep its pool within `tank_pressure_frac` of its relief pressure.
//!   Colder water lets the skids' flow, and their pumps, fall.
//!
//! Fallback: until the twin is calibrated (its learning window), or when the telemetry the
//! prediction needs is stale (on a tank: its pool and condenser readings too), the policy runs
//! [`TrimRespond`] and says so in its plan and its reasons.
//! The controller's safety envelope (equipment and rate limits, thermal guard, stale-data safe
//! mode) applies to everything proposed here as to any policy.

use crate::dvfs::{BudgetGovernor, FastDecision, GovernorConfig};
use crate::{Decision, PlantLimits, Policy, PolicyInput, Setpoints, TrimRespond};
use coolplane_core::signals::{Measurements, PlacementAdvice, Quality, RejectionMode};
use coolplane_core::site::{GpuModel, Site};
use coolplane_core::topology::Topology;
use coolplane_twin::forecast::{Exogenous, Forecaster, LoadHistory};
use coolplane_twin::regress::{LinearFit, Samples};
use coolplane_twin::whatif::{
    assist_on_fraction, facility_features, pads_effectiveness, AirHandlerCurve, DryCoolerCurve, FacilityModel,
    HallModel, TrimChillerCurve, N_FAC,
};
use coolplane_twin::{Nameplate, Twin, TwinConfig};
use serde::{Deserialize, Serialize};

/// Tuning of the coordinated policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoordinatedParams {
    /// Time between plans (and between setpoint decisions), s.
    pub plan_period_s: f64,
    /// Horizon the plan's predictions cover, s.
    pub horizon_s: f64,
    /// Hottest GPU at today's load at most this far below slowdown, K.
    pub margin_now_k: f64,
    /// Hottest GPU of any rack at TDP at most this far below slowdown, K.
    pub margin_tdp_k: f64,
    /// Move only when the predicted facility energy per unit of work falls by at least this
    /// fraction against keeping the present setpoints.
    pub min_gain: f64,
    /// Coldest CDU supply tried, K below design.
    pub supply_below_design_k: f64,
    /// Warmest CDU supply tried, K above design.
    pub supply_above_design_k: f64,
    /// Flow fractions of design tried (clipped to the CDU's range).
    pub flow_fracs: [f64; 5],
    /// Facility setpoints tried lie within this much of those seen so far, K.
    pub facility_explore_k: f64,
    /// Facility water at least this far below the coldest CDU supply, K, on top of the CDU's
    /// heat-exchanger approach at its present load.
    pub facility_gap_margin_k: f64,
    /// While the metered chillers draw at least `chiller_gap_share` of the IT power (off again
    /// below half of it), the margin on the CDUs' approach is at least this, K (not on tank
    /// skids): colder facility water then relieves the air-side chillers (the air handlers'
    /// warm coils take more of the air's heat) and lowers the facility flow the CDUs need, which
    /// the policy's cooling model, fitted on the meters, underrates.
    pub chiller_gap_margin_k: f64,
    /// The share of the IT power the chillers draw from which `chiller_gap_margin_k` applies.
    pub chiller_gap_share: f64,
    /// Telemetry older than this is stale, s.
    pub stale_s: f64,
    /// A move is chosen only if it keeps this much more margin than the limits (both the
    /// today's-load and the at-TDP one), K, so that a small rise in load does not break the
    /// setpoints just chosen and force them back (setpoints in force are kept while they keep
    /// the plain margins).
    pub margin_hysteresis_k: f64,
    /// Energy a setpoint write is charged in the comparison, kWh, spread over the horizon: one
    /// write per CDU for each kelvin of supply change (the controller ramps 1 K/min) and for a
    /// flow change, one per hall per kelvin of facility change. Firmware keeps setpoints in
    /// EEPROM with a finite write endurance; this keeps the writes to moves that pay. This is
    /// the charge on a site whose CDUs carry `write_cost_ref_kw` each at design; elsewhere it
    /// scales with the mean design load of the site's CDUs, so that a write has to buy the same
    /// relative saving on a site of small CDUs (a tank's 72 kW skid) as on one of large ones.
    pub write_cost_kwh: f64,
    /// CDU design load at which a write is charged `write_cost_kwh`, kW.
    pub write_cost_ref_kw: f64,
    /// A move's write charge is spread over the time its setpoints are expected to stand: the
    /// running mean of the policy's own recent holds, or the hold in progress if longer, at
    /// least the horizon and at most this, s.
    pub write_amortise_max_s: f64,
    /// A hard cap on the policy's setpoint writes (EEPROM wear), writes per CDU per week (0: no
    /// cap, the price alone): the moves of any 7 days take at most this times the site's CDUs.
    /// A move is made only if the allowance left after it would undo it (its writes at most half
    /// of what is left), so that one move never spends the week's writes and strands the
    /// setpoints where the weather of its hour put them; and the price of a write rises as the
    /// allowance is used (`(1 / (1 − used share))²`, at most 100 ×). The one-off move out of the
    /// learning day is not counted; a move the limits force (the setpoints in force break a
    /// margin, a tank over its pressure) takes the best candidate that fits the allowance, and
    /// goes beyond it only when none does; a return from a later fallback (stale inputs) is made
    /// regardless; both are counted. The adiabatic probe's mode writes are counted, not refused.
    /// The allowance starts after the settling day (`settle_s`), whose moves are outside it.
    /// The moves are remembered in memory only: a restarted policy starts a fresh allowance. The
    /// writes trim-respond makes while it stands in (learning, stale inputs) are not the
    /// policy's moves and are not in the allowance.
    pub write_budget_per_cdu_week: f64,
    /// With `write_budget_per_cdu_week`: an allowance of its own for the facility water
    /// systems' writes (a kelvin of facility setpoint, a change of heat-rejection mode), writes
    /// per hall per week (0, the default: one allowance for all writes). The CDUs' allowance
    /// then counts and prices the CDUs' writes only, and this one the facility's, each with the
    /// same rules (the undo rule, the rising price, the settling day): the CDUs' writes, a write
    /// to every CDU per kelvin, cannot spend what the facility water needs to follow the
    /// weather, which is what each device's EEPROM counts.
    pub facility_write_budget_per_hall_week: f64,
    /// With an allowance: how long after the first plan out of the learning day the plans
    /// settle, s. The twin keeps calibrating over its first day of plans and the setpoints it
    /// wants move with it (on hall-10k in Tucson from 40 °C to 41, 37 and 34 °C over 16 h);
    /// counted, those moves spent the allowance and stranded the setpoints for the week. They
    /// are made at the plain price of a write, outside the allowance (a one-off, as the move out
    /// of the learning day is), and the allowance starts after it, fresh.
    pub settle_s: f64,
    /// A candidate's heat rejection is judged over this many hours of outdoor air ahead, h (0,
    /// the default: the air now only; at 12 h on hall-10k the same saving for a quarter to a
    /// third fewer writes, on supernode-2pic a little less saving, `RESULTS.md`): the policy
    /// sees no weather forecast, so the air of each coming hour is the air it measured at that
    /// hour the day before, plus today's difference from yesterday fading over
    /// [`WEATHER_BIAS_TAU_S`] (a persistence forecast); an hour yesterday left no record of is
    /// the air now. The plan's predictions stay the hour ahead (what the plan
    /// accuracy checks); only the choice between candidates, and between a move and holding,
    /// uses the hours ahead, so that a move made for the hour's air is not undone by the
    /// afternoon's.
    pub ahead_s: f64,
    /// With `ahead_s`: judge the CDU setpoints over the hours ahead with the facility setpoint
    /// and heat-rejection mode chosen again at each of those hours (two stages), rather than
    /// every setpoint held over them.
    pub ahead_two_stage: bool,
    /// Choose the heat-rejection mode (dry coolers alone, or with adiabatic assist held on)
    /// where the halls have adiabatic assist, from the air model (rejection power against the
    /// air entering the coils); off: the firmware stages the assist itself (auto), the
    /// `coordinated-auto` policy.
    pub choose_rejection_mode: bool,
    /// Where the halls have adiabatic assist and the air model has samples of the assist off
    /// only (the firmware never staged it while the policy learned), hold the assist on for up
    /// to this long, s, to learn what it saves, when the air model fitted on dry air alone
    /// predicts it would save energy now; 0: never (the policy then waits for the firmware to
    /// stage it, which warmer water may never make it do). A probe that ends without the
    /// samples is not repeated for a day.
    pub probe_assist_s: f64,
    /// A heat-rejection mode the plan left (by its own choice, or because the dry coolers gave
    /// out) is not chosen again for this long, s: a mode whose predicted saving reverses at the
    /// next plan is the air model's error, not the plant's, and every change is a write; 0: no
    /// such hold.
    pub mode_return_s: f64,
    /// A facility-water move the next plans undo (back to where it came from within
    /// [`FAC_UNDO_WINDOW_S`]) was the cooling model's error, not the plant's: the model is
    /// anchored at the meters, so at the new setpoint it measured what it had mispredicted and
    /// went back (on hall-10k near the dry coolers' full speed: 30 → 24 → 30 → 23 → 30 °C in
    /// under five hours, every step predicted to save). For this long after the undo, s, the facility
    /// water is not moved halfway or further towards the setpoint it left again, while the
    /// outdoor dry-bulb is within [`FAC_REGRET_AIR_K`] of the air at the undo on the side that
    /// made the move a mistake; 0 (the default): no such memory. The memory is kept in memory
    /// only, as the write allowance is: a restarted policy has none.
    pub fac_regret_s: f64,
    /// Two-phase immersion: a tank at its design heat may run its pool at most at the
    /// saturation temperature of this fraction of its relief pressure above atmospheric, as the
    /// condenser model predicts it with the skid holding its supply setpoint (so that a tank
    /// may go to its design heat before the next plan and stay in this band). A tank measured
    /// above it at today's load allows only colder condenser water or more flow.
    pub tank_pressure_frac: f64,
    /// Two-phase immersion: plan each tank at the highest heat it carried over this long, s,
    /// plus [`TANK_HEAT_MARGIN`], instead of at its design heat (0: design heat). A tank that
    /// goes above it is caught by the measured pressure (only colder condenser water or more
    /// flow is tried while it is above the band) and by [`Self::tank_full_load_frac`].
    pub tank_heat_memory_s: f64,
    /// Two-phase immersion, with `tank_heat_memory_s`: a tank that went to its design heat
    /// under the plan's setpoints must settle below this fraction of its relief pressure (so a
    /// job landing on a tank between plans takes it at worst to the controller's guard, never to
    /// venting with the setpoints left as they are).
    pub tank_full_load_frac: f64,
    /// A move keeps every tank's predicted pool this much further below its limits, K.
    pub tank_margin_k: f64,
    /// Two-phase immersion: coldest condenser-water supply tried, K below design (colder water
    /// is what lets the skids' flow fall).
    pub tank_supply_below_design_k: f64,
    /// Two-phase immersion: condenser-water flow fractions of design tried (clipped to the
    /// skid's range).
    pub tank_flow_fracs: [f64; 8],
}

impl Default for CoordinatedParams {
    fn default() -> Self {
        Self {
            plan_period_s: 900.0,
            horizon_s: 3600.0,
            margin_now_k: 8.0,
            margin_tdp_k: 3.0,
            min_gain: 2e-4,
            supply_below_design_k: 6.0,
            supply_above_design_k: 3.0,
            flow_fracs: [0.7, 0.8, 0.9, 1.0, 1.1],
            facility_explore_k: 1.0,
            facility_gap_margin_k: 1.0,
            chiller_gap_margin_k: 3.0,
            chiller_gap_share: 0.005,
            stale_s: 300.0,
            margin_hysteresis_k: 1.5,
            write_cost_kwh: 1.5,
            write_cost_ref_kw: 1440.0,
            write_amortise_max_s: 4.0 * 3600.0,
            write_budget_per_cdu_week: 0.0,
            facility_write_budget_per_hall_week: 0.0,
            settle_s: 86_400.0,
            ahead_s: 0.0,
            ahead_two_stage: true,
            choose_rejection_mode: true,
            probe_assist_s: 2.0 * 3600.0,
            mode_return_s: 2.0 * 3600.0,
            fac_regret_s: 0.0,
            tank_pressure_frac: 0.4,
            tank_heat_memory_s: 3600.0,
            tank_full_load_frac: 0.9,
            tank_margin_k: 0.5,
            tank_supply_below_design_k: 12.0,
            tank_flow_fracs: [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1],
        }
    }
}

/// The margin kept on the CDUs' approach, K, and whether the chillers' margin is in force: on
/// from `chiller_gap_share` of the IT power drawn by the chillers, off below half of it.
fn cdu_gap_margin(p: &CoordinatedParams, was_on: bool, chiller_share: f64) -> (bool, f64) {
    let on = if was_on {
        chiller_share >= 0.5 * p.chiller_gap_share
    } else {
        chiller_share >= p.chiller_gap_share
    };
    let margin = if on {
        p.facility_gap_margin_k.max(p.chiller_gap_margin_k)
    } else {
        p.facility_gap_margin_k
    };
    (on, margin)
}

/// Hours a move's write charge is spread over: the running mean of the policy's recent holds
/// `hold_h`, or the hold in progress `holding_h` if longer, within [horizon, cap].
fn write_amortise_h(hold_h: f64, holding_h: f64, horizon_s: f64, cap_s: f64) -> f64 {
    let lo = horizon_s / 3600.0;
    hold_h.max(holding_h).clamp(lo, (cap_s / 3600.0).max(lo))
}

/// The week's write allowance: `budget` writes (0 or less: no allowance; less than one: none
/// left for an optional move) against `used` in the last 7
/// days. Returns the writes left (`None` without an allowance) and the multiplier on a write's
/// price, `(1 / (1 − used share))²`, at most [`WRITE_PRICE_MAX_MULT`]: 4 × with half the
/// allowance used, 16 × with three quarters, so the last writes are kept for the moves that pay
/// most (a return from setpoints the weather has turned against).
fn write_allowance(budget: f64, used: u32) -> (Option<u32>, f64) {
    if budget.is_nan() || budget <= 0.0 {
        return (None, 1.0);
    }
    let total = budget.floor();
    let left = (total - used as f64).max(0.0);
    let mult = if left > 0.0 {
        (total / left).powi(2).clamp(1.0, WRITE_PRICE_MAX_MULT)
    } else {
        WRITE_PRICE_MAX_MULT
    };
    (Some(left as u32), mult)
}

/// A facility-water move undone within this long is remembered as the model's error
/// (`fac_regret_s`), s.
pub const FAC_UNDO_WINDOW_S: f64 = 3.0 * 3600.0;
/// The outdoor dry-bulb, cooler (a move to colder water undone) or warmer (to warmer water) by
/// this much or more than at the undo, frees the facility water from the memory of it, K.
pub const FAC_REGRET_AIR_K: f64 = 2.0;

/// A facility-water move from `from_c` to `to_c` that the plans undid at `t_s`, the outdoor
/// dry-bulb then `dry_bulb_c`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FacRegret {
    t_s: f64,
    from_c: f64,
    to_c: f64,
    dry_bulb_c: f64,
}

impl FacRegret {
    /// Whether facility water at `fac_c` is refused in outdoor air `db_c` at `now_s`, with the
    /// memory `hold_s` long: halfway or further from `from_c` towards `to_c`, while the air is
    /// not more than [`FAC_REGRET_AIR_K`] kinder to such water than at the undo.
    fn blocks(&self, fac_c: f64, db_c: f64, now_s: f64, hold_s: f64) -> bool {
        if now_s - self.t_s >= hold_s {
            return false;
        }
        let mid = 0.5 * (self.from_c + self.to_c);
        if self.to_c < self.from_c {
            fac_c <= mid + 1e-9 && db_c > self.dry_bulb_c - FAC_REGRET_AIR_K
        } else {
            fac_c >= mid - 1e-9 && db_c < self.dry_bulb_c + FAC_REGRET_AIR_K
        }
    }
}

/// Whether a move of `wc` CDU writes and `wf` facility writes leaves enough of the week's
/// allowance to undo it: its writes at most half of what is left. `cdu_left` is what is left of
/// the one allowance (`None`: none set), or of the CDUs' where the facility has its own
/// (`fac_left` `Some`), which then takes the facility's writes alone.
fn leaves_enough(cdu_left: Option<u32>, fac_left: Option<Option<u32>>, wc: u32, wf: u32) -> bool {
    match fac_left {
        Some(fac) => cdu_left.is_none_or(|left| 2 * wc <= left) && fac.is_none_or(|left| 2 * wf <= left),
        None => cdu_left.is_none_or(|left| 2 * (wc + wf) <= left),
    }
}

/// The plans' last facility-water move and the last one they undid (`fac_regret_s`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct FacMoves {
    /// The last facility-water move: when, s, from and to, °C (the mean over the halls).
    last: Option<(f64, f64, f64)>,
    /// The last move the plans undid.
    regret: Option<FacRegret>,
}

impl FacMoves {
    /// A plan took the facility water from `from_c` to `to_c` (the same: no move) at `now_s`
    /// with the outdoor dry-bulb `db_c`: a move of more than 1.5 K that the next move undoes
    /// within [`FAC_UNDO_WINDOW_S`] is remembered as the cooling model's error
    /// (`fac_regret_s`).
    fn note(&mut self, now_s: f64, from_c: f64, to_c: f64, db_c: f64) {
        if (to_c - from_c).abs() <= 0.5 {
            return;
        }
        if let Some((t0, from, to)) = self.last {
            if now_s - t0 <= FAC_UNDO_WINDOW_S
                && (from_c - to).abs() <= 0.5
                && (to_c - from).abs() <= 0.5
                && (to - from).abs() > 1.5
            {
                self.regret = Some(FacRegret {
                    t_s: now_s,
                    from_c: from,
                    to_c: to,
                    dry_bulb_c: db_c,
                });
                // The undo is not itself a move a later one can undo: going back again is a
                // new move, not a second mistake in the other direction.
                self.last = None;
                return;
            }
        }
        self.last = Some((now_s, from_c, to_c));
    }
}

/// The most a write's price is raised as the week's allowance runs out.
pub const WRITE_PRICE_MAX_MULT: f64 = 100.0;
/// The window of the write allowance, s.
pub const WRITE_WINDOW_S: f64 = 7.0 * 86_400.0;

/// Setpoints for a tank over its pressure when no relieving candidate passes the limits: the
/// coldest condenser supply and fullest flow of the candidate ranges, but never warmer or less
/// flow than `keep` (the coldest supply and the fullest flow in force on any skid); the facility
/// water an approach `gap` below that supply and not warmer than in force, but not below `f_lo`
/// (where that binds, the controller's approach rule holds the skids' supply above it); heat
/// rejection auto. The facility rules of ordinary candidates (the heat-reuse floor, nothing
/// colder while the trim chiller runs or the plant is short, the approaches seen) do not apply:
/// they guard the cooling model's blind spots, and relieving a tank comes first.
fn relief_setpoints(supplies: &[f64], flows: &[f64], keep: PlanSetpoints, gap: f64, f_lo: f64) -> PlanSetpoints {
    let coldest = supplies.iter().copied().fold(f64::INFINITY, f64::min);
    let fullest = flows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let s = coldest.min(keep.cdu_supply_c);
    let q = fullest.max(keep.cdu_flow_frac);
    PlanSetpoints {
        cdu_supply_c: s,
        cdu_flow_frac: q,
        facility_supply_c: (s - gap).floor().min(keep.facility_supply_c).max(f_lo),
        rejection_mode: RejectionMode::Auto,
    }
}

/// The running mean of holds after one of `held_h` hours ends: exponentially weighted (0.3 on
/// the newest), starting from zero, so a few holds are needed before it counts them in full
/// (each hold counted up to the cap).
fn next_hold_h(hold_h: f64, held_h: f64, cap_s: f64) -> f64 {
    // max/min, not clamp: a cap that is NaN or negative leaves the hold uncounted, never panics.
    0.7 * hold_h + 0.3 * held_h.min(cap_s / 3600.0).max(0.0)
}

/// A plan's target `chosen` at `now_s`, against the last plan's `held`: whether it is a move (a
/// target other than the last, within [`PlanSetpoints::same_target`]); a move (or the first
/// plan) ends the hold in progress (since `last_move_s`), which goes into the running mean of
/// holds `hold_h` a write's charge is spread over (each counted up to `cap_s`).
fn note_target(
    held: Option<PlanSetpoints>,
    (hold_h, last_move_s): (&mut f64, &mut Option<f64>),
    cap_s: f64,
    now_s: f64,
    chosen: PlanSetpoints,
    first_plan: bool,
) -> bool {
    let moved = !held.is_some_and(|h| h.same_target(&chosen));
    if moved || first_plan {
        if let (Some(t), false) = (*last_move_s, first_plan) {
            *hold_h = next_hold_h(*hold_h, (now_s - t) / 3600.0, cap_s);
        }
        *last_move_s = Some(now_s);
    }
    moved
}

/// Uniform setpoints for a hall (every CDU alike).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlanSetpoints {
    /// CDU supply temperature, °C.
    pub cdu_supply_c: f64,
    /// CDU flow, fraction of design.
    pub cdu_flow_frac: f64,
    /// Facility supply temperature, °C.
    pub facility_supply_c: f64,
    /// Heat-rejection mode (auto: the firmware stages adiabatic assist itself).
    #[serde(default)]
    pub rejection_mode: RejectionMode,
}

impl PlanSetpoints {
    /// The same target as `other`: the same mode and every setpoint within 1e-6. A plan that
    /// keeps the setpoints in force reads them back as means over the CDUs (a flow of
    /// 0.7000000000000001 for the 0.7 the last plan chose), which is not a move.
    pub fn same_target(&self, other: &PlanSetpoints) -> bool {
        const TOL: f64 = 1e-6;
        self.rejection_mode == other.rejection_mode
            && (self.cdu_supply_c - other.cdu_supply_c).abs() <= TOL
            && (self.cdu_flow_frac - other.cdu_flow_frac).abs() <= TOL
            && (self.facility_supply_c - other.facility_supply_c).abs() <= TOL
    }
}

/// What the hall model predicts for a set of setpoints over the plan's horizon (weather held).
/// Candidates are compared at today's load; in a published plan the powers and the work rate
/// are at the load forecast for the hour where there is one ([`EnergyPlan::load_forecast`]),
/// which leaves PUE and energy per unit of work as compared; the hottest GPU stays at today's
/// load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct PlanPrediction {
    /// Facility power, kW.
    pub facility_kw: f64,
    /// IT power, kW.
    pub it_kw: f64,
    /// Cooling power (CDU pumps, heat rejection, facility pumps, chillers), kW.
    pub cooling_kw: f64,
    /// Facility / IT.
    pub pue: f64,
    /// Hottest GPU at today's load, °C.
    pub hottest_gpu_c: f64,
    /// Hottest GPU of any rack at TDP, °C.
    pub hottest_at_tdp_c: f64,
    /// Work rate, full-speed GPU-seconds per second.
    pub work_gpu_s_per_s: f64,
    /// Facility energy per unit of work, kWh per GPU-hour.
    pub kwh_per_gpu_h: f64,
    /// Heat-reuse heat pumps, kW (inside the facility power, not cooling; 0 without one).
    #[serde(default)]
    pub heat_pump_kw: f64,
    /// The facility water the candidate was judged with (what its heat rejection over the hours
    /// ahead is predicted at); not published.
    #[serde(skip)]
    pub facility_water: FacilityWater,
}

/// The facility water entering the heat rejection, as the air model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FacilityWater {
    /// Capacity rate of the facility flow, kW/K.
    pub c_w_kw_k: f64,
    /// Return − supply, K.
    pub rise_k: f64,
}

impl FacilityWater {
    /// From the facility flow (L/min, all halls) and its rise (K).
    fn new(flow_lpm: f64, rise_k: f64) -> Self {
        use coolplane_core::fluid::{WATER_CP_J_KG_K, WATER_DENSITY_KG_M3};
        Self {
            c_w_kw_k: flow_lpm / 60_000.0 * WATER_DENSITY_KG_M3 * WATER_CP_J_KG_K / 1000.0,
            rise_k,
        }
    }
}

/// The 15-minute energy plan: what the policy will hold, what it expects, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergyPlan {
    /// When made, s.
    pub t_s: f64,
    /// Policy.
    pub policy: String,
    /// `optimised` or `fallback` (trim-respond resets).
    pub status: String,
    /// Horizon of the predictions, s.
    pub horizon_s: f64,
    /// Setpoints held until the next plan (None in fallback: trim-respond moves them).
    pub setpoints: Option<PlanSetpoints>,
    /// Predicted under those setpoints.
    pub predicted: Option<PlanPrediction>,
    /// Predicted had the setpoints in force been kept.
    pub keep: Option<PlanPrediction>,
    /// Power caps planned (none: caps come only from the safety envelope and the budget).
    pub power_caps: String,
    /// Placement preference (racks with the most thermal headroom first), first ten.
    pub placement_first: Vec<u32>,
    /// The constraint that binds, in words.
    pub binding: String,
    /// Candidates evaluated.
    pub candidates: u32,
    /// Why, in an operator's words.
    pub reasons: Vec<String>,
    /// The load the prediction assumes over the horizon (None: no forecaster yet, today's
    /// load held).
    #[serde(default)]
    pub load_forecast: Option<LoadForecast>,
    /// The week's write allowance after this plan (None: no allowance set, or a fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_allowance: Option<WriteAllowance>,
}

/// Where the week's write allowance (`write_budget_per_cdu_week`) stands after a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteAllowance {
    /// Setpoint writes the policy's moves may take in any 7 days (all CDUs).
    pub allowance: u32,
    /// Writes the moves of the last 7 days took, this plan's included.
    pub used: u32,
    /// What is left (0 where forced moves went beyond it).
    pub left: u32,
    /// Candidates this plan did not take because they needed more than half of what was left.
    pub refused_candidates: u32,
    /// The plan falls in the settling day after the learning day (`settle_s`): its moves are
    /// outside the allowance, which starts after it.
    #[serde(default)]
    pub settling: bool,
    /// Where the facility water systems have an allowance of their own
    /// (`facility_write_budget_per_hall_week`): where it stands; `allowance`, `used` and `left`
    /// above then count the CDUs' writes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facility: Option<WritePool>,
}

/// One of the week's write allowances after a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritePool {
    /// Writes the policy's moves may take in any 7 days.
    pub allowance: u32,
    /// Writes the moves of the last 7 days took, this plan's included.
    pub used: u32,
    /// What is left (0 where forced moves went beyond it).
    pub left: u32,
}

/// The facility side as the policy learns it from the meters, in three parts whose structure
/// follows the equipment (all ridge fits on `linfa-elasticnet`, refitted with the twin):
/// - heat rejection fans + chillers in the outdoor-to-water approach (dry coolers, adiabatic
///   assist, trim chiller) and in the facility water temperature itself (the air handlers' warm
///   coil: warmer water leaves more to their chilled-water coil);
/// - the facility water's temperature rise across the CDUs, `T_return − T_supply`, against the
///   CDU-to-facility approach `T_cdu_supply − T_fac_supply` and the CDUs' own rise (colder
///   facility water or less CDU flow widen it, and the facility pumps then move less water);
/// - facility pump power against facility flow (the pump on its system curve).
#[derive(Debug, Clone)]
struct CoolingModel {
    rej: Samples,
    /// Heat rejection + chillers against the air entering the coils (outdoor dry-bulb, or the
    /// pre-cooled air while the adiabatic assist runs, from the pads' nameplate effectiveness):
    /// one model for both states of the assist, which is what lets the policy compare them.
    rej_air: Samples,
    rej_air_fit: Option<LinearFit>,
    /// The air model fitted on the samples of one state of the assist alone (the other has
    /// fewer than [`MODE_MIN_SAMPLES`]): never used to choose a mode, only to judge whether
    /// probing the other state could pay.
    rej_air_prior: Option<LinearFit>,
    /// The air model's early fit (at the tick both states have their samples) was tried and
    /// failed: it is tried again only at the next six-hourly refit, not every tick.
    air_early_failed: bool,
    /// Samples of `rej_air` taken with the assist off and on.
    air_n: [usize; 2],
    /// Nameplate effectiveness of the adiabatic pads (`None`: no assist, no air model).
    assist_eff: Option<f64>,
    /// The dry coolers' data-sheet curve (`None`: none on the site): the air model learns what
    /// its meters add to it.
    dry_curve: Option<DryCoolerCurve>,
    /// The air handlers' chilled-water side from their data sheet (`None`: none on the site).
    air_curve: Option<AirHandlerCurve>,
    /// The trim chiller behind the dry coolers from its data sheet (`None`: none on the site):
    /// a floor under what colder facility water is predicted to cost ([`CoolingModel::trim_floor_kw`]).
    trim_chiller: Option<TrimChillerCurve>,
    /// Some hall's dry coolers have no trim chiller behind them: heat beyond the fans' full
    /// speed is not rejected there, the water runs warm instead.
    no_trim_chiller: bool,
    dtf: Samples,
    pump: Samples,
    rej_fit: Option<LinearFit>,
    dtf_fit: Option<LinearFit>,
    pump_fit: Option<LinearFit>,
    /// Facility flow seen, L/min (predictions are clamped to it).
    flow_seen: (f64, f64),
    /// CDU supply − facility supply seen, K (candidates stay within `facility_explore_k` of it).
    approach_seen: (f64, f64),
}

/// Features of the heat-rejection + chiller model.
fn rejection_features(it_kw: f64, db: f64, wb: f64, fac_c: f64) -> [f64; N_FAC + 3] {
    let mut x = [0.0; N_FAC + 3];
    x[..N_FAC].copy_from_slice(&facility_features(it_kw, db, wb, fac_c));
    let h = |k: f64| it_kw * (fac_c - k).max(0.0) / 10.0;
    x[N_FAC] = h(15.0);
    x[N_FAC + 1] = h(20.0);
    x[N_FAC + 2] = h(25.0);
    x
}

/// Facility-side quantities read from a snapshot (all halls together): (IT kW, dry bulb, wet bulb,
/// mean facility supply °C, mean facility return °C, mean CDU supply °C, mean CDU rise K, fans +
/// chillers kW, facility pumps kW, facility flow L/min).
fn cooling_inputs(m: &Measurements) -> Option<[f64; 10]> {
    let ok = |r: &coolplane_core::signals::Reading| r.quality != Quality::Bad && r.value.is_finite();
    let f0 = m.facilities.first()?;
    if !(ok(&m.meter.it_power_kw) && ok(&f0.outdoor_dry_bulb_c) && ok(&f0.outdoor_wet_bulb_c)) {
        return None;
    }
    let (mut fs, mut fr, mut rej, mut pump, mut flow) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for f in &m.facilities {
        for r in [
            &f.supply_temp_c,
            &f.return_temp_c,
            &f.fan_power_kw,
            &f.chiller_power_kw,
            &f.pump_power_kw,
            &f.flow_lpm,
        ] {
            if !ok(r) {
                return None;
            }
        }
        fs += f.supply_temp_c.value;
        fr += f.return_temp_c.value;
        rej += f.fan_power_kw.value + f.chiller_power_kw.value;
        pump += f.pump_power_kw.value;
        flow += f.flow_lpm.value;
    }
    let nh = m.facilities.len() as f64;
    let (mut cs, mut rise) = (0.0, 0.0);
    for c in &m.cdus {
        if !(ok(&c.supply_temp_c) && ok(&c.return_temp_c)) {
            return None;
        }
        cs += c.supply_temp_c.value;
        rise += c.return_temp_c.value - c.supply_temp_c.value;
    }
    let nc = m.cdus.len().max(1) as f64;
    Some([
        m.meter.it_power_kw.value,
        f0.outdoor_dry_bulb_c.value,
        f0.outdoor_wet_bulb_c.value,
        fs / nh,
        fr / nh,
        cs / nc,
        rise / nc,
        rej,
        pump,
        flow,
    ])
}

/// A plan's uniform setpoints for every CDU and hall (the heat-rejection mode only to halls
/// whose dry coolers have adiabatic assist; auto elsewhere).
fn plan_setpoints(l: &PlantLimits, sp: &PlanSetpoints) -> Setpoints {
    let mut out = l.uniform_setpoints(sp.cdu_supply_c, sp.cdu_flow_frac, sp.facility_supply_c);
    out.rejection = l
        .facilities
        .iter()
        .map(|f| {
            if f.adiabatic_assist {
                sp.rejection_mode
            } else {
                RejectionMode::Auto
            }
        })
        .collect();
    out
}

/// Samples the air model needs in each state of the adiabatic assist before the policy chooses
/// modes from it (an hour of slow ticks each).
const MODE_MIN_SAMPLES: usize = 60;

/// How long the policy waits for the firmware to stage the adiabatic assist by itself (the air
/// model's samples of it over a day's weather) before it probes the assist, s.
const PROBE_PATIENCE_S: f64 = 86_400.0;

/// Number of features of the air model.
const N_AIR: usize = 13;

/// Whether some hall's dry coolers have no trim chiller behind them.
fn no_trim_chiller(site: &Site, topo: &Topology) -> bool {
    (0..topo.halls.len()).any(|h| {
        let f = &topo.hall_spec(site, h).facility;
        f.dry_coolers.is_some() && f.chiller.is_none()
    })
}

/// Air entering the dry coolers' coils, °C: outdoor dry-bulb, or with the adiabatic assist on,
/// pre-cooled towards the wet-bulb by the pads' effectiveness.
fn coil_air_c(db: f64, wb: f64, eff: f64, assist_on: bool) -> f64 {
    if assist_on {
        db - eff * (db - wb).max(0.0)
    } else {
        db
    }
}

/// Features of the air model: the IT load and its square, the load times hinges of the coil
/// air's approach to the facility setpoint (the fans' and, past its capacity, the chiller's
/// power), the load times hinges of the facility setpoint itself (the air handlers), and three
/// shapes from the data sheets: the heat the dry coolers leave beyond their fans' full speed
/// (the trim chiller's load) at the facility water `w` ([`DryCoolerCurve`]), the load times what
/// the air handlers' chilled-water side draws per kW of air-side heat at the facility water and
/// the outdoor dry-bulb `db_c` ([`AirHandlerCurve`]), and, last, the dry coolers' fans. The
/// model learns the meters less the curve's fans ([`air_target`], [`air_predict`]), so that where
/// its samples say nothing (an approach the policy has not held) a prediction follows the data
/// sheet's convex rise to full speed, which moves with the load and the water flow, rather than
/// the hinges' straight lines at fixed approaches; and the air handlers' chiller, dearer in hot
/// air and cheaper with colder water, is told apart from the fans, which are the other way round
/// in the approach (`air − water`) the hinges see: with the fans' curve and no chiller shape,
/// the hinges took the chiller's rise with the outdoor air for a rise with the approach, and
/// the facility water the policy chose with it was worse (`RESULTS.md`, the air model).
fn air_features(cm: &CoolingModel, it_kw: f64, db_c: f64, air_c: f64, fac_c: f64, w: FacilityWater) -> [f64; N_AIR] {
    let curve = cm.dry_curve.as_ref();
    let x = air_c - fac_c;
    let h = |v: f64, k: f64| (v - k).max(0.0);
    let it = it_kw;
    let (fans, beyond) = curve
        .map(|c| c.fans_kw(w.c_w_kw_k * w.rise_k, fac_c + w.rise_k - air_c, w.c_w_kw_k))
        .unwrap_or((0.0, 0.0));
    [
        it,
        it * it / 1e4,
        it * h(x, -15.0) / 10.0,
        it * h(x, -10.0) / 10.0,
        it * h(x, -5.0) / 10.0,
        it * h(x, 0.0) / 10.0,
        it * h(x, 5.0) / 10.0,
        it * h(fac_c, 15.0) / 10.0,
        it * h(fac_c, 20.0) / 10.0,
        it * h(fac_c, 25.0) / 10.0,
        beyond,
        cm.air_curve.map_or(0.0, |c| it * c.kw_per_kw_air(fac_c, db_c)),
        fans,
    ]
}

/// What the air model learns from a sample of fans + chillers `kw` with features `x`: the
/// meters less the data sheet's fans.
fn air_target(x: &[f64; N_AIR], kw: f64) -> f64 {
    kw - x[N_AIR - 1]
}

/// Fans + chillers the air model predicts at features `x`, kW.
fn air_predict(f: &LinearFit, x: &[f64; N_AIR]) -> f64 {
    f.predict(x) + x[N_AIR - 1]
}

/// Whether every hall's adiabatic assist runs (`Some(true)`), none does (`Some(false)`), or
/// the halls differ (`None`: the sample belongs to neither model).
fn assist_state(m: &Measurements) -> Option<bool> {
    let on = m.facilities.iter().filter(|f| f.adiabatic_on).count();
    match on {
        0 => Some(false),
        n if n == m.facilities.len() => Some(true),
        _ => None,
    }
}

fn pump_features(flow_lpm: f64) -> [f64; 3] {
    let f = flow_lpm / 1000.0;
    [f, f * f, f * f * f]
}

impl CoolingModel {
    /// Where some hall has dry coolers and no trim chiller: whether facility water at `fac_c`,
    /// with the flow and rise `w` of a candidate, in heat-rejection `mode` (auto: the assist as
    /// it is now), needs more than the dry coolers' fans' full speed in the outdoor air `(dry
    /// bulb, wet bulb)`, by their data sheet. Such water would not be made: the fans saturate
    /// and the water runs warm, which the air model, flat at full speed, does not price. Always
    /// false with a trim chiller, or without the data sheet or the pads' effectiveness.
    fn beyond_full_speed_unchilled(
        &self,
        fac_c: f64,
        w: FacilityWater,
        mode: RejectionMode,
        assist_now: Option<bool>,
        (db, wb): (f64, f64),
    ) -> bool {
        let (true, Some(c), Some(eff)) = (self.no_trim_chiller, self.dry_curve.as_ref(), self.assist_eff) else {
            return false;
        };
        let on = match mode {
            RejectionMode::Dry => false,
            RejectionMode::Adiabatic => true,
            RejectionMode::Auto => assist_now.unwrap_or(false),
        };
        let air_c = coil_air_c(db, wb, eff, on);
        c.fans_kw(w.c_w_kw_k * w.rise_k, fac_c + w.rise_k - air_c, w.c_w_kw_k).1 > 0.0
    }

    /// The least heat rejection + chillers, kW, that facility water at `fac_c` (flow and rise
    /// `w`) can cost with the coils' air at `air_c` and the outdoor air `(dry bulb, wet bulb)`:
    /// the trim chiller's compressors taking, by its data sheet, the heat the dry coolers' data
    /// sheet leaves beyond their fans' full speed (0 without either sheet, or a trim chiller).
    /// No prediction of the air model for water colder than in force goes under it: fitted on
    /// the meters, the air model extrapolates linearly from the weather and water it has seen,
    /// and in a heat wave it predicted water 9 K colder than in force, which only the trim
    /// chiller could make in 38 °C air, at less than the fans and chillers it metered
    /// (`RESULTS.md`, "The trim chiller's floor").
    fn trim_floor_kw(&self, fac_c: f64, w: FacilityWater, air_c: f64, (db, wb): (f64, f64)) -> f64 {
        let (Some(curve), Some(chiller)) = (self.dry_curve.as_ref(), self.trim_chiller.as_ref()) else {
            return 0.0;
        };
        let (_, beyond) = curve.fans_kw(w.c_w_kw_k * w.rise_k, fac_c + w.rise_k - air_c, w.c_w_kw_k);
        chiller.power_kw(beyond, fac_c, db, wb)
    }

    /// The most heat rejection + chillers, kW, that facility water at `fac_c` (flow and rise `w`)
    /// warmer than the water in force `keep_c` (`w_keep`) can cost while the meters read
    /// `rej_now_kw`: the meters less what the trim chiller's compressors save between the two by
    /// their data sheets ([`CoolingModel::trim_floor_kw`]). `None` where the data sheets put
    /// no compressor load on the water in force (or there is no sheet): the air model then
    /// stands alone. The mirror of the floor: in a heat wave the air model priced water warmer
    /// than the 23 °C in force above the 0.9 MW of chillers it metered there
    /// (`RESULTS.md`, "The trim chiller's ceiling").
    #[allow(clippy::too_many_arguments)]
    fn trim_ceiling_kw(
        &self,
        rej_now_kw: f64,
        keep_c: f64,
        w_keep: FacilityWater,
        fac_c: f64,
        w: FacilityWater,
        air_c: f64,
        outdoor: (f64, f64),
    ) -> Option<f64> {
        let keep = self.trim_floor_kw(keep_c, w_keep, air_c, outdoor);
        (keep > 0.0 && fac_c > keep_c)
            .then(|| rej_now_kw - (keep - self.trim_floor_kw(fac_c, w, air_c, outdoor)).max(0.0))
    }

    fn new() -> Self {
        Self {
            rej: Samples::new(N_FAC + 3, 20_000),
            rej_air: Samples::new(N_AIR, 20_000),
            rej_air_fit: None,
            rej_air_prior: None,
            air_early_failed: false,
            air_n: [0, 0],
            assist_eff: None,
            dry_curve: None,
            air_curve: None,
            trim_chiller: None,
            no_trim_chiller: false,
            dtf: Samples::new(2, 20_000),
            pump: Samples::new(3, 20_000),
            rej_fit: None,
            dtf_fit: None,
            pump_fit: None,
            flow_seen: (f64::INFINITY, f64::NEG_INFINITY),
            approach_seen: (f64::INFINITY, f64::NEG_INFINITY),
        }
    }

    fn observe(&mut self, m: &Measurements) {
        if let Some([it, db, wb, fs, fr, cs, rise, rej, pump, flow]) = cooling_inputs(m) {
            self.rej.push(&rejection_features(it, db, wb, fs), rej);
            if let (Some(on), Some(eff)) = (assist_state(m), self.assist_eff) {
                let x = air_features(
                    self,
                    it,
                    db,
                    coil_air_c(db, wb, eff, on),
                    fs,
                    FacilityWater::new(flow, fr - fs),
                );
                self.rej_air.push(&x, air_target(&x, rej));
                self.air_n[on as usize] += 1;
            }
            self.dtf.push(&[cs - fs, rise], fr - fs);
            if flow > 0.0 {
                self.pump.push(&pump_features(flow), pump);
                self.flow_seen = (self.flow_seen.0.min(flow), self.flow_seen.1.max(flow));
            }
            let a = cs - fs;
            self.approach_seen = (self.approach_seen.0.min(a), self.approach_seen.1.max(a));
        }
    }

    /// The air model, once both states of the assist have their samples; until then the prior
    /// from the one state sampled.
    fn fit_air(&mut self) {
        self.rej_air_fit = (self.air_n.iter().all(|&n| n >= MODE_MIN_SAMPLES))
            .then(|| self.rej_air.fit(1e-4).ok())
            .flatten();
        self.rej_air_prior = (self.rej_air_fit.is_none() && self.air_n.iter().any(|&n| n >= MODE_MIN_SAMPLES))
            .then(|| self.rej_air.fit(1e-4).ok())
            .flatten();
    }

    /// Both states of the assist sampled and the air model not yet fitted on them.
    fn air_fit_due(&self) -> bool {
        self.rej_air_fit.is_none()
            && !self.air_early_failed
            && self.assist_eff.is_some()
            && self.air_n.iter().all(|&n| n >= MODE_MIN_SAMPLES)
    }

    fn fit(&mut self) -> bool {
        self.rej_fit = self.rej.fit(1e-4).ok();
        self.dtf_fit = self.dtf.fit(1e-4).ok();
        self.pump_fit = self.pump.fit(1e-4).ok();
        self.air_early_failed = false;
        self.fit_air();
        self.rej_fit.is_some() && self.dtf_fit.is_some() && self.pump_fit.is_some()
    }
}

/// The condensers of two-phase immersion tanks as the policy learns them from each skid's
/// meters and its tank's pool temperature (the vapour side condenses at the pool temperature,
/// so the coil is an exchanger with one isothermal side):
/// `ε = (T_return − T_supply − P_pump/ṁc_p) / (T_pool − T_supply)` (the skid pump's heat is in
/// the water's rise, not the condenser's), `UA = −ln(1 − ε)·ṁc_p` each slow tick,
/// `1/UA = R_cond + R_water·q^−0.8` with `q` the flow as a fraction of design (the water-side
/// film, Dittus–Boelter). A candidate's pool temperature is then
/// `T_pool = T_supply + Q / (ε(q)·ṁc_p(q))`: above the fluid's boiling point the tank's
/// pressure rises and every die with it; below it the tank sits at atmospheric pressure and the
/// dies do not move (boiling keeps its superheat over the saturation temperature).
#[derive(Debug, Clone)]
struct TankModel {
    /// Per CDU: `Some` where the CDU is a tank's condenser-water skid.
    tanks: Vec<Option<TankSide>>,
    /// Sums for the pooled slope of `1/UA` against `q^−0.8`: n, Σx, Σy, Σxx, Σxy, Σyy.
    sums: [f64; 6],
    /// Range of `q^−0.8` seen.
    x_seen: (f64, f64),
    /// Per CDU: its tank's gauge cross-checked against its pool thermometer (as the
    /// controller's guard does), so a gauge reading low does not hide a tank over its limit.
    checks: Vec<crate::TankCrossCheck>,
    /// How long each tank's heat is remembered for its planning heat, s (0: design heat).
    heat_memory_s: f64,
    /// Per CDU: the tank's heat readings of the last `heat_memory_s` as (time, kW), kept as a
    /// monotone queue (each entry above every later one), so its front is the highest.
    heat_log: Vec<std::collections::VecDeque<(f64, f64)>>,
    /// Per CDU: when the tank's heat was first read (its memory is full `heat_memory_s` later).
    heat_since_s: Vec<Option<f64>>,
    /// Per CDU: the last tick's heat reading was fresh.
    heat_fresh: Vec<bool>,
    /// Per CDU: the heat its tank is planned at this tick, kW ([`Self::plan_heat_kw`]).
    plan_kw: Vec<f64>,
}

#[derive(Debug, Clone, Copy)]
struct TankSide {
    /// The fluid's saturation temperature at atmospheric pressure, °C.
    t_boil_c: f64,
    /// Pool temperature at the pressure a tank may reach at its design heat, °C.
    t_limit_c: f64,
    /// The pressure it stands for, kPa above atmospheric.
    p_limit_kpa: f64,
    /// Pool temperature at the pressure a tank may settle at if it goes to its design heat
    /// while planned at less (`tank_full_load_frac`), °C, and that pressure, kPa.
    t_full_c: f64,
    p_full_kpa: f64,
    /// Design heat, kW.
    design_kw: f64,
    /// Die-to-boiling-surface resistance of an accelerator's package, K/W (nameplate).
    r_pkg_k_w: f64,
    /// Boiling curve (nameplate): wall superheat `sh_ref_k` at `sh_ref_w` per accelerator,
    /// superheat ∝ power^(1/`boil_n`).
    sh_ref_k: f64,
    sh_ref_w: f64,
    boil_n: f64,
    /// Condenser resistance `1/UA` referred to design flow, K/kW: a running mean of each
    /// slow tick's measurement, each moved to design flow along the water-side slope (all of
    /// the resistance on the water side while the slope is not known).
    r_design: Option<f64>,
    /// Running mean of `q^−0.8` at those readings (the flow they were taken at).
    x_ref: f64,
}

impl TankSide {
    /// Boiling superheat of an accelerator at `p_w`, K.
    fn superheat_k(&self, p_w: f64) -> f64 {
        self.sh_ref_k * (p_w.max(0.0) / self.sh_ref_w.max(1e-9)).powf(1.0 / self.boil_n.max(1.0))
    }
}

/// Samples of the condenser slope before it is trusted, the spread of `q^−0.8` they must cover
/// (about 10 % of flow), and the largest standard error it may have, relative to itself; until
/// then the whole resistance is taken to be on the water side when the flow falls, and no gain
/// when it rises: the conservative bound either way.
const TANK_SLOPE_MIN_N: f64 = 60.0;
const TANK_SLOPE_MIN_SPAN: f64 = 0.08;
const TANK_SLOPE_MAX_REL_SE: f64 = 0.2;
/// Headroom over the highest heat a tank carried that its plan allows for (`tank_heat_memory_s`).
pub const TANK_HEAT_MARGIN: f64 = 0.05;
/// Weight of each slow tick's condenser reading in its running mean.
const TANK_R_EWMA: f64 = 0.05;
/// Smallest temperature rise of the condenser water a reading needs, K (below it the sensors'
/// offsets dominate the effectiveness).
const TANK_MIN_RISE_K: f64 = 2.0;

/// Heat capacity rate of the condenser water at `lpm`, kW/K (the skids carry PG25, as CDUs do).
fn skid_cw_kw_k(lpm: f64) -> f64 {
    coolplane_core::fluid::pg25_lpm_to_kg_s(lpm) * coolplane_core::fluid::PG25_CP_J_KG_K / 1000.0
}

impl TankModel {
    /// From the site: the fluid's boiling point, the pool temperature allowed at design heat,
    /// the package and boiling curve.
    fn bind(site: &Site, topo: &Topology, pressure_frac: f64, full_frac: f64, heat_memory_s: f64) -> Option<Self> {
        let tanks: Vec<Option<TankSide>> = topo
            .cdus
            .iter()
            .map(|c| {
                let im = topo.hall_spec(site, c.hall).immersion.as_ref()?;
                let fluid = coolplane_core::dielectric::fluid_by_name(&im.fluid)?;
                let p_limit_kpa = (pressure_frac * im.relief_gauge_kpa).max(0.0);
                let p_full_kpa = (full_frac * im.relief_gauge_kpa).max(0.0);
                let t_sat = |kpa: f64| fluid.t_sat_c(coolplane_core::dielectric::P_ATM_PA + 1000.0 * kpa);
                Some(TankSide {
                    t_boil_c: fluid.boiling_point_c,
                    t_limit_c: t_sat(p_limit_kpa),
                    p_limit_kpa,
                    t_full_c: t_sat(p_full_kpa),
                    p_full_kpa,
                    design_kw: topo.hall_spec(site, c.hall).cdu.design_load_kw,
                    r_pkg_k_w: im.package_r_k_per_w,
                    sh_ref_k: im.superheat_ref_k,
                    sh_ref_w: im.superheat_ref_w_per_cm2 * im.boiling_area_cm2,
                    boil_n: im.boiling_exponent,
                    r_design: None,
                    x_ref: 1.0,
                })
            })
            .collect();
        tanks.iter().any(Option::is_some).then_some(Self {
            checks: vec![crate::TankCrossCheck::default(); tanks.len()],
            heat_memory_s,
            heat_log: vec![Default::default(); tanks.len()],
            heat_since_s: vec![None; tanks.len()],
            heat_fresh: vec![false; tanks.len()],
            plan_kw: tanks.iter().map(|t| t.map_or(f64::NAN, |t| t.design_kw)).collect(),
            tanks,
            sums: [0.0; 6],
            x_seen: (f64::INFINITY, f64::NEG_INFINITY),
        })
    }

    /// Every CDU is a tank's skid (the candidate ranges are then the tanks').
    fn all_tanks(&self) -> bool {
        self.tanks.iter().all(Option::is_some)
    }

    /// The skids' and pools' readings of this tick that are fresh (at most `stale_s` old at
    /// `now_s`: a reading frozen for longer is not learned from).
    fn observe(&mut self, m: &Measurements, l: &PlantLimits, now_s: f64, stale_s: f64) {
        for c in 0..self.tanks.len() {
            let (Some(x), Some(lim)) = (m.cdus.get(c), l.cdus.get(c)) else {
                continue;
            };
            if self.tanks[c].is_some() {
                self.checks[c].update(now_s, &lim.tank_pressure(x.tank.as_ref(), now_s, stale_s));
                let fresh = x.heat_kw.usable(now_s, stale_s) && x.heat_kw.value.is_finite();
                self.record_heat(c, now_s, fresh.then_some(x.heat_kw.value));
            }
            let Some(tank) = x.tank else { continue };
            let fresh = |r: &coolplane_core::signals::Reading| r.usable(now_s, stale_s);
            if fresh(&x.supply_temp_c) && fresh(&x.return_temp_c) && fresh(&x.flow_lpm) && fresh(&tank.pool_temp_c) {
                let pump_kw = if x.pump_power_kw.usable(now_s, stale_s) {
                    x.pump_power_kw.value
                } else {
                    0.0
                };
                self.push(
                    c,
                    x.supply_temp_c.value,
                    x.return_temp_c.value,
                    tank.pool_temp_c.value,
                    x.flow_lpm.value,
                    lim.flow_design_lpm,
                    pump_kw,
                );
            }
        }
    }

    /// One reading of the skid on CDU `c`: condenser water in and out, pool, flow (L/min), its
    /// design flow, and the skid pump's power (its heat is in the water's rise, not the
    /// condenser's). Readings that cannot be an exchange (no flow, a pool within a kelvin of the
    /// water, less than 2 K of rise, an effectiveness outside (0.05, 0.995)) are skipped.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        c: usize,
        t_in: f64,
        t_out: f64,
        t_pool: f64,
        flow_lpm: f64,
        flow_design_lpm: f64,
        pump_kw: f64,
    ) {
        let slope = self.slope();
        let Some(Some(side)) = self.tanks.get_mut(c) else {
            return;
        };
        let q = flow_lpm / flow_design_lpm.max(1e-9);
        let cw = skid_cw_kw_k(flow_lpm);
        let rise = t_out - t_in - pump_kw.max(0.0) / cw.max(1e-9);
        let span = t_pool - t_in;
        let eps = rise / span;
        if !(q >= 0.05 && span >= 1.0 && rise >= TANK_MIN_RISE_K && (0.05..0.995).contains(&eps)) {
            return;
        }
        let r = 1.0 / (-(1.0 - eps).ln() * cw);
        let xf = q.powf(-0.8);
        // Referred to design flow (x = 1): along the slope where it is known, else as if all of
        // it were on the water side.
        let r_d = match slope {
            Some(b) => r - b.clamp(0.0, r / xf) * (xf - 1.0),
            None => r / xf,
        };
        // One tick's reading scatters by several per cent (sensor noise on a few kelvin): a
        // running mean over about 20 ticks.
        match side.r_design {
            Some(r0) => {
                side.r_design = Some(r0 + TANK_R_EWMA * (r_d - r0));
                side.x_ref += TANK_R_EWMA * (xf - side.x_ref);
            }
            None => {
                side.r_design = Some(r_d);
                side.x_ref = xf;
            }
        }
        let s = &mut self.sums;
        s[0] += 1.0;
        s[1] += xf;
        s[2] += r;
        s[3] += xf * xf;
        s[4] += xf * r;
        s[5] += r * r;
        self.x_seen = (self.x_seen.0.min(xf), self.x_seen.1.max(xf));
    }

    /// The heat of the tank on CDU `c` read at `now_s` (None: not fresh): remembered, and the
    /// heat it is planned at updated.
    fn record_heat(&mut self, c: usize, now_s: f64, heat_kw: Option<f64>) {
        if self.tanks.get(c).copied().flatten().is_none() {
            return;
        }
        self.heat_fresh[c] = heat_kw.is_some();
        if let Some(h) = heat_kw.filter(|_| self.heat_memory_s > 0.0) {
            let q = &mut self.heat_log[c];
            let h = h.max(0.0);
            while q.back().is_some_and(|&(_, v)| v <= h) {
                q.pop_back();
            }
            q.push_back((now_s, h));
            while q.front().is_some_and(|&(t, _)| now_s - t > self.heat_memory_s) {
                q.pop_front();
            }
            self.heat_since_s[c].get_or_insert(now_s);
        }
        if let Some(h) = self.plan_heat_kw(c, heat_kw.unwrap_or(0.0).max(0.0), now_s) {
            self.plan_kw[c] = h;
        }
    }

    /// The heat the tank on CDU `c` is planned at, kW, at `now_s`: with a memory, the highest
    /// it carried over it plus [`TANK_HEAT_MARGIN`] (at least `heat_now_kw`, at most its design
    /// heat); its design heat without one, until the memory has filled once, or while its heat
    /// reading is not fresh. None: not a tank.
    fn plan_heat_kw(&self, c: usize, heat_now_kw: f64, now_s: f64) -> Option<f64> {
        let side = self.tanks.get(c).copied().flatten()?;
        let full = self.heat_memory_s > 0.0
            && self.heat_fresh[c]
            && self.heat_since_s[c].is_some_and(|t| now_s - t >= self.heat_memory_s - 1e-6);
        if !full {
            return Some(side.design_kw.max(heat_now_kw));
        }
        let peak = self.heat_log[c].front().map_or(side.design_kw, |&(_, v)| v);
        Some(
            (peak.max(heat_now_kw) * (1.0 + TANK_HEAT_MARGIN))
                .min(side.design_kw)
                .max(heat_now_kw),
        )
    }

    /// The pressure band at the planned heat, kPa above atmospheric (the highest of the tanks').
    fn band_kpa(&self) -> f64 {
        self.tanks
            .iter()
            .flatten()
            .map(|t| t.p_limit_kpa)
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// The heats the tanks are planned at in an operator's words, with a memory: the range
    /// over the tanks against their design heat, how many are planned at it, and the rule that
    /// holds them at full load. None without a memory.
    fn describe_heat(&self, full_frac: f64) -> Option<String> {
        if self.heat_memory_s <= 0.0 {
            return None;
        }
        let (mut lo, mut hi, mut at_design, mut n, mut design) = (f64::INFINITY, f64::NEG_INFINITY, 0, 0, 0.0f64);
        for (side, &kw) in self.tanks.iter().zip(&self.plan_kw) {
            let Some(side) = side else { continue };
            n += 1;
            lo = lo.min(kw);
            hi = hi.max(kw);
            design = design.max(side.design_kw);
            if kw >= side.design_kw - 1e-9 {
                at_design += 1;
            }
        }
        Some(format!(
            "tanks planned at {lo:.0}–{hi:.0} kW (design {design:.0} kW; {at_design} of {n} at it: a tank is planned at its design heat until its heat has been read for {:.0} h, or while its heat reading is stale): the highest heat each carried over the last {:.0} h plus {:.0} %; every candidate must also keep a tank that went to its design heat below {:.0} % of its relief pressure",
            self.heat_memory_s / 3600.0,
            self.heat_memory_s / 3600.0,
            TANK_HEAT_MARGIN * 100.0,
            full_frac * 100.0
        ))
    }

    /// Every tank has a condenser measurement.
    fn ready(&self) -> bool {
        self.tanks.iter().flatten().all(|t| t.r_design.is_some())
    }

    /// The pooled slope of `1/UA` against `q^−0.8`, where the flows seen span enough to tell it
    /// and it is positive with a standard error under a fifth of itself.
    fn slope(&self) -> Option<f64> {
        let [n, sx, sy, sxx, sxy, syy] = self.sums;
        if n < TANK_SLOPE_MIN_N || self.x_seen.1 - self.x_seen.0 < TANK_SLOPE_MIN_SPAN {
            return None;
        }
        let (vx, cxy, vy) = (sxx - sx * sx / n, sxy - sx * sy / n, syy - sy * sy / n);
        if vx.is_nan() || vx <= 0.0 {
            return None;
        }
        let b = cxy / vx;
        let se = ((vy - b * cxy).max(0.0) / (n - 2.0) / vx).sqrt();
        (b.is_finite() && b > 0.0 && se <= TANK_SLOPE_MAX_REL_SE * b).then_some(b)
    }

    /// The condenser model's state in an operator's words: whether the water-side slope is
    /// known, and if not what it waits for and how the predictions err meanwhile.
    fn describe(&self) -> String {
        let n = self.sums[0];
        // Flow fractions seen, from the span of q^−0.8.
        let (q_lo, q_hi) = (self.x_seen.1.powf(-1.25), self.x_seen.0.powf(-1.25));
        match self.slope() {
            Some(b) => format!(
                "condenser model: the water side's share is learned ({n:.0} readings at {:.0}–{:.0} % of design flow; slope {b:.4} K/kW per unit of (flow/design)^−0.8)",
                q_lo * 100.0,
                q_hi * 100.0
            ),
            None => format!(
                "condenser model: the water side's share is not learned yet ({n:.0} readings at {}; it needs {TANK_SLOPE_MIN_N:.0} over a span of {TANK_SLOPE_MIN_SPAN:.2} in (flow/design)^−0.8 and a clear slope): pools are predicted warm, as if all of the coil's resistance were on the water side when the flow falls and nothing were gained when it rises",
                if n > 0.0 {
                    format!("{:.0}–{:.0} % of design flow", q_lo * 100.0, q_hi * 100.0)
                } else {
                    "no flow yet".to_string()
                }
            ),
        }
    }

    /// Pool temperature of the tank on CDU `c` with condenser water at `supply_c`, flow `q`
    /// (fraction of design `flow_design_lpm`) and `heat_kw` into the pool, °C (None: not a
    /// tank, or not measured yet).
    fn pool_c(&self, c: usize, supply_c: f64, q: f64, flow_design_lpm: f64, heat_kw: f64) -> Option<f64> {
        let side = self.tanks.get(c).copied().flatten()?;
        let r_d = side.r_design?;
        let x = q.max(0.05).powf(-0.8);
        let r = match self.slope() {
            Some(b) => r_d + b.clamp(0.0, r_d) * (x - 1.0),
            // All of the resistance on the water side when the flow falls below the flow
            // measured at, nothing gained when it rises above it.
            None => r_d * x.max(side.x_ref),
        }
        .max(1e-6);
        let cw = skid_cw_kw_k(q.max(0.05) * flow_design_lpm);
        let eps = 1.0 - (-1.0 / (r * cw)).exp();
        Some(supply_c + heat_kw.max(0.0) / (eps * cw).max(1e-9))
    }
}

/// A heat-reuse heat pump's nameplate: it lifts heat from the facility return water to the
/// district-heating delivery temperature, at a fraction of the Carnot heating COP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeatPumpPlate {
    /// Delivery temperature, °C.
    pub delivery_c: f64,
    /// Fraction of the Carnot heating COP achieved.
    pub carnot_efficiency: f64,
}

impl From<&coolplane_core::site::HeatReuse> for HeatPumpPlate {
    fn from(hr: &coolplane_core::site::HeatReuse) -> Self {
        Self {
            delivery_c: hr.delivery_c,
            carnot_efficiency: hr.carnot_efficiency,
        }
    }
}

impl HeatPumpPlate {
    /// Heating COP drawing on source water at `source_c`, °C (within 1.5–8, the range of
    /// heat pumps' data sheets: a lift of a few kelvin is not a COP of 50).
    pub fn cop(&self, source_c: f64) -> f64 {
        let t_hot = self.delivery_c + KELVIN;
        let lift = (self.delivery_c - source_c).max(1.0);
        (self.carnot_efficiency * t_hot / lift).clamp(1.5, 8.0)
    }

    /// Electric power, kW, for the heat it delivers with `kw_now` metered at source water
    /// `source_now_c`, were the source water at `source_c`: the heat taken from the water is
    /// what district heating asks for, not what the water temperature allows, so the power
    /// scales as 1 / (COP − 1) (heat from the water = power × (COP − 1)).
    pub fn power_kw(&self, kw_now: f64, source_now_c: f64, source_c: f64) -> f64 {
        kw_now * (self.cop(source_now_c) - 1.0) / (self.cop(source_c) - 1.0)
    }
}

/// 0 °C in kelvin.
const KELVIN: f64 = 273.15;

#[derive(Debug, Clone)]
struct Bound {
    cooling: CoolingModel,
    twin: Twin,
    fac: FacilityModel,
    model: Option<HallModel>,
    last_fit_s: f64,
    gpu: GpuModel,
    tdp_w: f64,
    approach_k: Vec<f64>,
    design_load_kw: Vec<f64>,
    /// Two-phase immersion tanks' condensers (None: no tank on the site).
    tanks: Option<TankModel>,
    /// Per hall: the nameplate of a heat-reuse heat pump drawing on the facility return water
    /// (None: no heat pump in that hall).
    heat_pumps: Vec<Option<HeatPumpPlate>>,
    /// A refit that failed since the last plan (the models before it are kept), for the plan.
    refit_note: Option<String>,
    fac_seen: Option<(f64, f64)>,
    /// Site IT power, 5-minute means, for the load forecast.
    load: LoadHistory,
    /// The load forecaster, trained at each refit once a day and a half of history exists.
    forecaster: Option<Forecaster>,
    /// Why the last training of the load forecaster failed (cleared by the next that succeeds).
    forecast_note: Option<String>,
    /// Outdoor air measured, for the hours ahead.
    weather: WeatherLog,
}

/// Horizons of the plan's load forecast, s, from the start of the last completed 5-minute step
/// (5–10 minutes before the plan): their mean stands for the plan's hour, the last is its end.
const LOAD_HORIZONS_S: [f64; 6] = [900.0, 1500.0, 2100.0, 2700.0, 3300.0, 3900.0];
/// Step of the load history, s.
const LOAD_STEP_S: f64 = 300.0;
/// History the load forecaster needs before it is trained (a day of lags and half a day to
/// learn from), s; it is first trained at the refit after that.
const LOAD_MIN_HISTORY_S: f64 = 1.5 * 86_400.0;

/// Outdoor air the policy measured: one sample per [`WEATHER_STEP_S`] at most, kept
/// [`WEATHER_KEEP_S`], for the persistence forecast of the hours ahead (`ahead_s`).
#[derive(Debug, Clone, Default)]
struct WeatherLog {
    /// (time s, dry bulb °C, wet bulb °C), oldest first.
    samples: std::collections::VecDeque<(f64, f64, f64)>,
}

/// Least time between two samples of the weather log, s.
const WEATHER_STEP_S: f64 = 600.0;
/// How long the weather log keeps a sample, s (yesterday's air for up to a day ahead).
const WEATHER_KEEP_S: f64 = 2.0 * 86_400.0;
/// Today's difference from yesterday's air fades with this time constant over the hours ahead, s.
pub const WEATHER_BIAS_TAU_S: f64 = 6.0 * 3600.0;

/// The outdoor air of the hours ahead, as [`WeatherLog::ahead`] forecasts it.
#[derive(Debug, Clone, PartialEq)]
struct AirAhead {
    /// (dry bulb °C, wet bulb °C) now and at each whole hour after, over the horizon.
    points: Vec<(f64, f64)>,
    /// How many of the hours after now came from yesterday's record (the rest are the air now).
    from_record: usize,
    /// Today's difference from yesterday at this hour, dry bulb, K (None: no record of it).
    bias_db_k: Option<f64>,
}

impl WeatherLog {
    fn push(&mut self, t_s: f64, db: f64, wb: f64) {
        if !(t_s.is_finite() && db.is_finite() && wb.is_finite()) {
            return;
        }
        if self.samples.back().is_some_and(|(t, _, _)| t_s - t < WEATHER_STEP_S) {
            return;
        }
        self.samples.push_back((t_s, db, wb));
        while self.samples.front().is_some_and(|(t, _, _)| t_s - t > WEATHER_KEEP_S) {
            self.samples.pop_front();
        }
    }

    /// The sample nearest `t_s`, if one lies within [`WEATHER_STEP_S`] of it.
    fn at(&self, t_s: f64) -> Option<(f64, f64)> {
        let i = self.samples.partition_point(|(t, _, _)| *t < t_s);
        [i.checked_sub(1), Some(i)]
            .into_iter()
            .flatten()
            .filter_map(|j| self.samples.get(j))
            .filter(|(t, _, _)| (t - t_s).abs() <= WEATHER_STEP_S)
            .min_by(|a, b| (a.0 - t_s).abs().total_cmp(&(b.0 - t_s).abs()))
            .map(|(_, db, wb)| (*db, *wb))
    }

    /// The air now and at each whole hour after it up to `ahead_s`: yesterday's at that hour
    /// plus today's difference from yesterday now, fading over [`WEATHER_BIAS_TAU_S`]; the air
    /// now where yesterday left no record (at that hour, or now). The wet bulb never above the
    /// dry bulb.
    fn ahead(&self, now_s: f64, db: f64, wb: f64, ahead_s: f64) -> AirAhead {
        let hours = (ahead_s / 3600.0).round().max(0.0) as usize;
        let mut points = vec![(db, wb)];
        let base = self.at(now_s - 86_400.0);
        let mut from_record = 0;
        for k in 1..hours {
            let dt = k as f64 * 3600.0;
            let p = match (base, self.at(now_s + dt - 86_400.0)) {
                (Some((db0, wb0)), Some((db1, wb1))) => {
                    from_record += 1;
                    let fade = (-dt / WEATHER_BIAS_TAU_S).exp();
                    let d = db1 + (db - db0) * fade;
                    (d, (wb1 + (wb - wb0) * fade).min(d))
                }
                _ => (db, wb),
            };
            points.push(p);
        }
        AirAhead {
            points,
            from_record,
            bias_db_k: base.map(|(db0, _)| db - db0),
        }
    }
}

/// The site IT load the plan expects over its horizon.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadForecast {
    /// IT power metered at the plan, kW (the prediction's anchor; it may sit in a checkpoint dip).
    pub it_now_kw: f64,
    /// Mean of the last completed 5 minutes, kW.
    pub it_last_5min_kw: f64,
    /// Expected mean over the next hour (p50), kW.
    pub it_next_hour_kw: f64,
    /// p50 at the end of the hour (one hour after the plan, within the 5-minute step), kW.
    pub it_1h_p50_kw: f64,
    /// p90 at the end of the hour, kW.
    pub it_1h_p90_kw: f64,
}

/// The coordinated, twin-driven policy.
#[derive(Debug, Clone, Default)]
pub struct Coordinated {
    /// Tuning.
    pub params: CoordinatedParams,
    bound: Option<Box<Bound>>,
    fallback: TrimRespond,
    next_plan_s: f64,
    held: Option<PlanSetpoints>,
    optimising: bool,
    /// The fast loop holding the site power budget with DVFS caps.
    governor: Option<BudgetGovernor>,
    /// How long the policy's setpoints have stood between its moves, h (a running mean), and
    /// when it last moved, s.
    hold_h: f64,
    last_move_s: Option<f64>,
    /// The adiabatic probe in progress: when it started, s.
    probe_since_s: Option<f64>,
    /// No probe starts before this, s (a day after one that ended without its samples).
    probe_next_s: f64,
    /// Since when the policy has optimised without the air model's samples of the assist on, s.
    probe_wanted_since_s: Option<f64>,
    /// Where the dry coolers gave out while the plan asked for dry (the newest last).
    dry_gave_out: Vec<DryGaveOut>,
    /// A line for the next plan: dry given up since the last one.
    dry_note: Option<String>,
    /// The heat-rejection mode the plan last left, and when, s.
    mode_left: Option<(RejectionMode, f64)>,
    /// The facility-water moves the plans undid (`fac_regret_s`).
    fac_moves: FacMoves,
    /// The chillers' margin on the CDUs' approach is in force (`chiller_gap_margin_k`).
    chiller_gap_on: bool,
    /// The policy's moves in the last [`WRITE_WINDOW_S`]: when, s, and the writes each needed
    /// (to the CDUs, to the facility water systems).
    moves_writes: Vec<(f64, u32, u32)>,
    /// The end of the settling day that follows the first plan out of the learning day, s: its
    /// moves are made at the plain price of a write and not counted in the allowance.
    settle_until_s: Option<f64>,
}

/// The dry coolers gave out: the plan asked for dry (the assist off) and a hall's facility water
/// ran more than [`DRY_WARM_K`] above its setpoint, the condition on which the controller's
/// envelope gives dry up for auto. What the dry coolers reject grows with the water's approach
/// to the outdoor air and what they must reject with the load, so dry is not asked for again at
/// an approach as small as this one or smaller, at this load or more
/// ([`DRY_RETRY_APPROACH_K`], [`DRY_RETRY_LOAD`]), for [`DRY_MEMORY_S`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct DryGaveOut {
    t_s: f64,
    /// The hall's facility setpoint in force minus the outdoor dry bulb, K.
    approach_k: f64,
    /// Site IT power, kW.
    it_kw: f64,
    /// Outdoor dry bulb, °C, and the facility water and its setpoint, °C (for the plan's words).
    dry_bulb_c: f64,
    water_c: f64,
    setpoint_c: f64,
}

/// The facility water this far above its setpoint with the assist off means the dry coolers
/// (and the trim chiller behind them) are at capacity: the controller's envelope gives dry up.
pub const DRY_WARM_K: f64 = 2.0;
/// Dry is asked for again only at an approach (facility setpoint − dry bulb) this much larger
/// than where it gave out, K.
pub const DRY_RETRY_APPROACH_K: f64 = 1.0;
/// ... or at a load this fraction of the one it gave out at, or less.
pub const DRY_RETRY_LOAD: f64 = 0.95;
/// How long a give-out is remembered, s (a week: fouling and cleaning change the coolers).
pub const DRY_MEMORY_S: f64 = 7.0 * 86400.0;

impl DryGaveOut {
    /// Dry at this approach and load would be asked for where it gave out.
    fn blocks(&self, approach_k: f64, it_kw: f64) -> bool {
        approach_k < self.approach_k + DRY_RETRY_APPROACH_K && it_kw > DRY_RETRY_LOAD * self.it_kw
    }
}

/// One candidate's GPU-side sums.
#[derive(Debug, Clone, Copy)]
struct GpuSide {
    d_gpu_kw: f64,
    work: f64,
    hottest: f64,
    at_tdp: f64,
    /// Two-phase immersion: the worst tank's predicted pool above the pool temperature allowed,
    /// K (−∞ without tanks; +∞ where a tank's pool cannot be predicted), at the heat it is
    /// planned at (its design heat, or with `tank_heat_memory_s` its recent highest, and then
    /// also at its design heat against `tank_full_load_frac`), with that tank's pool, °C, its
    /// pressure limit, kPa, and the heat it was judged at, kW.
    tank_excess_k: f64,
    tank_pool_c: f64,
    tank_limit_kpa: f64,
    tank_heat_kw: f64,
}

impl Coordinated {
    /// With explicit tuning.
    pub fn new(params: CoordinatedParams) -> Self {
        Self {
            params,
            ..Default::default()
        }
    }

    /// The slow loop: learn, plan every 15 minutes, hold the plan in between.
    fn slow(&mut self, input: &PolicyInput<'_>) -> Decision {
        let now = input.now_s;
        let Some(b) = self.bound.as_mut() else {
            return self.fallback_decision(input, "not bound to a site (no nameplate)".into());
        };
        let m = input.image;
        b.twin.update(m);
        if let Some(t) = b.tanks.as_mut() {
            t.observe(m, input.limits, now, self.params.stale_s);
        }
        if m.meter.it_power_kw.quality == Quality::Good {
            b.load.push(now, m.meter.it_power_kw.value);
        }
        if let Some(f) = m.facilities.first() {
            let (d, w) = (&f.outdoor_dry_bulb_c, &f.outdoor_wet_bulb_c);
            if d.usable(now, self.params.stale_s) && w.usable(now, self.params.stale_s) {
                b.weather.push(now, d.value, w.value);
            }
        }
        b.fac.observe(m);
        b.cooling.observe(m);
        // Both states of the assist sampled (by a probe, or the firmware staging it): the air
        // model is fitted now rather than at the next six-hourly refit.
        if b.model.is_some() && b.cooling.air_fit_due() {
            b.cooling.fit_air();
            // A failed fit is reported by every plan ("the air model is not fitted yet").
            b.cooling.air_early_failed = b.cooling.rej_air_fit.is_none();
        }
        for f in &m.facilities {
            // The facility temperatures the plant has reached (not merely been asked for).
            if f.supply_temp_c.quality != Quality::Bad && f.supply_temp_c.value.is_finite() {
                let v = f.supply_temp_c.value;
                b.fac_seen = Some(b.fac_seen.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
            }
        }
        if b.twin.calibrated() && now - b.last_fit_s >= 6.0 * 3600.0 {
            b.last_fit_s = now;
            // The load forecaster: load history and calendar only (the policy sees neither the
            // weather forecast nor the scheduler).
            if b.load.known_s() >= LOAD_MIN_HISTORY_S {
                let none = |_: usize, _: usize| Exogenous::default();
                match Forecaster::train(&b.load.vals, LOAD_STEP_S, b.load.t0_s, &LOAD_HORIZONS_S, &none) {
                    Ok(f) => {
                        b.forecaster = Some(f);
                        b.forecast_note = None;
                    }
                    Err(e) => {
                        b.forecast_note = Some(format!(
                            "the load forecaster's training at {:.1} h failed ({e}): {}",
                            now / 3600.0,
                            if b.forecaster.is_some() {
                                "the forecaster from before is kept"
                            } else {
                                "there is no load forecast"
                            }
                        ))
                    }
                }
            }
            if b.fac.fit().is_ok() && b.cooling.fit() {
                b.model = Some(HallModel::from_twin(&b.twin, &b.fac));
            } else if b.model.is_some() {
                b.refit_note = Some(format!(
                    "the refit at {:.1} h failed (a ridge fit on the meters did not converge): the models from before are kept",
                    now / 3600.0
                ));
            }
        }
        if b.model.is_none() {
            let why = if b.twin.calibrated() {
                "the facility model could not be fitted from the meters yet".to_string()
            } else {
                "the twin is still learning the plant (no calibration yet)".to_string()
            };
            return self.fallback_decision(input, why);
        }
        if b.tanks.as_ref().is_some_and(|t| !t.ready()) {
            return self.fallback_decision(
                input,
                "a tank's condenser has no usable reading yet (skid supply, return, flow and pool temperature)".into(),
            );
        }
        if let Err(why) = self.inputs_fresh(m, now) {
            return self.fallback_decision(input, format!("{why}: the prediction cannot be trusted"));
        }
        self.watch_dry(input);
        let due = now >= self.next_plan_s - 1e-6 || !self.optimising || self.held.is_none();
        if due {
            return match self.optimise(input) {
                Some(d) => {
                    self.optimising = true;
                    self.next_plan_s = now + self.params.plan_period_s;
                    d
                }
                None => self.fallback_decision(
                    input,
                    "a facility reading the cooling model needs is missing or bad".into(),
                ),
            };
        }
        let sp = self.held.expect("held while optimising");
        Decision {
            setpoints: plan_setpoints(input.limits, &sp),
            power_limits: Vec::new(),
            placement: None,
            reasons: Vec::new(),
            plan: None,
        }
    }

    /// Every tick while a plan asking for dry is held: a hall whose facility water runs more
    /// than [`DRY_WARM_K`] above its setpoint in force (read fresh) means the dry coolers gave
    /// out. The approach and load are remembered, the plan in force asks for auto from now
    /// (what the controller's envelope does anyway, so the two do not fight), and the next plan
    /// says so.
    fn watch_dry(&mut self, input: &PolicyInput<'_>) {
        let now = input.now_s;
        let stale = self.params.stale_s;
        let Some(held) = self.held.as_mut() else {
            return;
        };
        if held.rejection_mode != RejectionMode::Dry {
            return;
        }
        let m = input.image;
        let db = m.facilities.first().map(|f| f.outdoor_dry_bulb_c);
        let Some(db) = db.filter(|r| r.usable(now, stale)).map(|r| r.value) else {
            return;
        };
        let it = m.meter.it_power_kw;
        if !it.usable(now, stale) {
            return;
        }
        let gave_out = m.facilities.iter().enumerate().find_map(|(h, f)| {
            let sp = *input.current.facilities.get(h)?;
            let w = f.supply_temp_c;
            (w.usable(now, stale) && w.value > sp + DRY_WARM_K).then_some((w.value, sp))
        });
        let Some((water_c, setpoint_c)) = gave_out else {
            return;
        };
        held.rejection_mode = RejectionMode::Auto;
        self.mode_left = Some((RejectionMode::Dry, now));
        // Giving dry up is a write to the mode of each hall with the assist: counted against
        // the week's write allowance as the plans' moves are (after the settling day).
        let n_assist = input.limits.facilities.iter().filter(|f| f.adiabatic_assist).count() as u32;
        if n_assist > 0 && self.settle_until_s.is_some_and(|t| now >= t - 1e-6) {
            self.moves_writes.push((now, 0, n_assist));
        }
        let g = DryGaveOut {
            t_s: now,
            approach_k: setpoint_c - db,
            it_kw: it.value,
            dry_bulb_c: db,
            water_c,
            setpoint_c,
        };
        self.dry_gave_out.retain(|x| now - x.t_s < DRY_MEMORY_S);
        self.dry_gave_out.push(g);
        self.dry_note = Some(format!(
            "dry gave out at {:.1} h: facility water {water_c:.1} °C against its {setpoint_c:.1} °C setpoint with the outdoor air at {db:.1} °C and {:.0} kW of IT: heat rejection back to auto, and dry is not asked for again at an approach (setpoint − dry bulb) under {:.1} K with more than {:.0} kW for a week",
            now / 3600.0,
            it.value,
            g.approach_k + DRY_RETRY_APPROACH_K,
            DRY_RETRY_LOAD * it.value
        ));
    }

    fn inputs_fresh(&self, m: &Measurements, now: f64) -> Result<(), String> {
        let s = self.params.stale_s;
        if now - m.gpus.t_s > s || m.gpus.temp_c.is_empty() {
            return Err("GPU telemetry stale".into());
        }
        let tanks = self.bound.as_ref().and_then(|b| b.tanks.as_ref());
        for (c, x) in m.cdus.iter().enumerate() {
            if !(x.supply_temp_c.usable(now, s) && x.flow_lpm.usable(now, s) && x.pump_power_kw.usable(now, s)) {
                return Err(format!("CDU {c} readings stale or bad"));
            }
            if tanks.is_some_and(|t| t.tanks.get(c).is_some_and(Option::is_some)) {
                let fresh = x.return_temp_c.usable(now, s)
                    && x.heat_kw.usable(now, s)
                    && x.tank.is_some_and(|t| t.pool_temp_c.usable(now, s));
                if !fresh {
                    return Err(format!("tank {c}'s pool or condenser readings stale or bad"));
                }
            }
        }
        for (h, f) in m.facilities.iter().enumerate() {
            if !(f.outdoor_dry_bulb_c.usable(now, s) && f.outdoor_wet_bulb_c.usable(now, s)) {
                return Err(format!("hall {h} weather readings stale or bad"));
            }
        }
        if !(m.meter.it_power_kw.usable(now, s) && m.meter.facility_power_kw.usable(now, s)) {
            return Err("site meter stale or bad".into());
        }
        Ok(())
    }

    fn fallback_decision(&mut self, input: &PolicyInput<'_>, why: String) -> Decision {
        let was = std::mem::replace(&mut self.optimising, false);
        self.held = None;
        self.probe_since_s = None;
        if was {
            // Bumpless: trim-respond starts from the setpoints in force, not from where it left
            // them when the policy last fell back.
            self.fallback = TrimRespond::starting_from(self.fallback.params, input.current);
        }
        let mut d = self.fallback.decide(input);
        let due = input.now_s >= self.next_plan_s - 1e-6;
        if due {
            self.next_plan_s = input.now_s + self.params.plan_period_s;
        }
        let line = format!("coordinated: {why}: trim-respond resets");
        if was || due {
            d.reasons.insert(0, line.clone());
        }
        if due {
            d.plan = Some(EnergyPlan {
                t_s: input.now_s,
                policy: self.name().into(),
                status: "fallback".into(),
                horizon_s: self.params.horizon_s,
                setpoints: None,
                predicted: None,
                keep: None,
                power_caps: "none planned".into(),
                placement_first: Vec::new(),
                binding: why,
                candidates: 0,
                reasons: d.reasons.clone(),
                load_forecast: None,
                write_allowance: None,
            });
        }
        d
    }

    /// Per candidate (supply, flow), the GPU-side sums, from each GPU's reading.
    #[allow(clippy::too_many_arguments)]
    fn gpu_side(
        b: &Bound,
        model: &HallModel,
        topo: &Topology,
        l: &PlantLimits,
        m: &Measurements,
        sup_now: &[f64],
        q_now: &[f64],
        supply: f64,
        q: f64,
    ) -> GpuSide {
        let g = &m.gpus;
        let (mut p0, mut p1, mut w1) = (0.0, 0.0, 0.0);
        let mut hottest = f64::NEG_INFINITY;
        let mut at_tdp = f64::NEG_INFINITY;
        let (mut tank_excess_k, mut tank_pool_c, mut tank_limit_kpa, mut tank_heat_kw) =
            (f64::NEG_INFINITY, f64::NAN, f64::NAN, f64::NAN);
        for (r, rack) in topo.racks.iter().enumerate() {
            let c = model.rack_cdu(r);
            let tank = b
                .tanks
                .as_ref()
                .and_then(|tm| Some((tm, tm.tanks.get(c).copied().flatten()?)));
            // Each die moves by `dsup + P·dflow`; a tank's by its pool's move above the boiling
            // point (`dflow` 0), and at full load by `d_tdp` over today's reading.
            let (dsup, dflow, d_tdp) = if let Some((tm, side)) = tank {
                let fd = l.cdus[c].flow_design_lpm;
                let x = &m.cdus[c];
                let heat = x.heat_kw.value;
                let pool_meas = x.tank.map_or(f64::NAN, |t| t.pool_temp_c.value);
                let plan_kw = tm.plan_kw.get(c).copied().unwrap_or(f64::NAN).max(heat);
                let pools = (
                    tm.pool_c(c, sup_now[c], q_now[c], fd, heat),
                    tm.pool_c(c, supply, q, fd, heat),
                    tm.pool_c(c, supply, q, fd, heat.max(b.design_load_kw[c])),
                    tm.pool_c(c, supply, q, fd, plan_kw),
                );
                match pools {
                    (Some(p_now), Some(p_new), Some(p_tdp), Some(p_plan)) if pool_meas.is_finite() => {
                        let tb = side.t_boil_c;
                        // The band at the heat the tank is planned at and, planned below its
                        // design heat, what it would settle at if it went there.
                        let rules = [
                            Some((p_plan - side.t_limit_c, p_plan, side.p_limit_kpa, plan_kw)),
                            (plan_kw < side.design_kw - 1e-9).then_some((
                                p_tdp - side.t_full_c,
                                p_tdp,
                                side.p_full_kpa,
                                side.design_kw.max(heat),
                            )),
                        ];
                        for (excess, pool, kpa, kw) in rules.into_iter().flatten() {
                            // A NaN excess is the worst, not skipped.
                            if excess.is_nan() || excess > tank_excess_k {
                                (tank_excess_k, tank_pool_c, tank_limit_kpa, tank_heat_kw) = (excess, pool, kpa, kw);
                            }
                        }
                        (
                            p_new.max(tb) - p_now.max(tb),
                            0.0,
                            Some((p_tdp.max(tb) - pool_meas.max(tb), side)),
                        )
                    }
                    _ => {
                        tank_excess_k = f64::INFINITY;
                        (0.0, 0.0, Some((0.0, side)))
                    }
                }
            } else {
                let f = model.rack_fit(r);
                let qn = q_now[c].max(0.05);
                at_tdp = at_tdp.max(supply + f[0] + b.tdp_w * (f[1] + f[2] * q.max(0.05).powf(-0.8)));
                (
                    supply - sup_now[c],
                    f[2] * (q.max(0.05).powf(-0.8) - qn.powf(-0.8)),
                    None,
                )
            };
            for i in rack.gpus.clone() {
                let (Some(&t), Some(&p), Some(&u), Some(&cap)) =
                    (g.temp_c.get(i), g.power_w.get(i), g.util.get(i), g.power_limit_w.get(i))
                else {
                    continue;
                };
                let (t, p, u, cap) = (t as f64, p as f64, u as f64, cap as f64);
                if !(t.is_finite() && p.is_finite() && u.is_finite() && cap.is_finite()) {
                    continue;
                }
                let t1 = t + dsup + p * dflow;
                if let Some((d, side)) = d_tdp {
                    // At TDP: the pool at design heat, the package and the boiling superheat at
                    // TDP instead of today's power.
                    let to_tdp = side.r_pkg_k_w * (b.tdp_w - p) + side.superheat_k(b.tdp_w) - side.superheat_k(p);
                    at_tdp = at_tdp.max(t + d + to_tdp.max(0.0));
                }
                let (a0, _) = b.gpu.power_and_speed(t, u, cap);
                let (a1, s1) = b.gpu.power_and_speed(t1, u, cap);
                p0 += a0;
                p1 += a1;
                w1 += u * s1;
                hottest = hottest.max(t1);
            }
        }
        GpuSide {
            d_gpu_kw: (p1 - p0) / 1000.0,
            work: w1,
            hottest,
            at_tdp,
            tank_excess_k,
            tank_pool_c,
            tank_limit_kpa,
            tank_heat_kw,
        }
    }

    fn optimise(&mut self, input: &PolicyInput<'_>) -> Option<Decision> {
        let p = self.params;
        let first_plan = !self.optimising;
        if first_plan && self.settle_until_s.is_none() {
            self.settle_until_s = Some(input.now_s + p.settle_s);
        }
        let settling = self.settle_until_s.is_some_and(|t| input.now_s < t - 1e-6);
        self.moves_writes.retain(|(t, _, _)| input.now_s - t < WRITE_WINDOW_S);
        let cdu_writes_used: u32 = self.moves_writes.iter().map(|(_, w, _)| *w).sum();
        let fac_writes_used: u32 = self.moves_writes.iter().map(|(_, _, w)| *w).sum();
        // One allowance for every write, or the CDUs' and the facility's apart.
        let split = p.facility_write_budget_per_hall_week > 0.0 && p.write_budget_per_cdu_week > 0.0;
        let writes_used = if split {
            cdu_writes_used
        } else {
            cdu_writes_used + fac_writes_used
        };
        let refit_note = self.bound.as_mut().and_then(|b| b.refit_note.take());
        let b = self.bound.as_ref().expect("bound");
        let model = b.model.as_ref().expect("model");
        let m = input.image;
        let topo = input.topology;
        let l = input.limits;
        let nc = topo.cdus.len();
        let sup_now: Vec<f64> = m.cdus.iter().map(|c| c.supply_temp_c.value).collect();
        let q_now: Vec<f64> = (0..nc)
            .map(|c| m.cdus[c].flow_lpm.value / l.cdus[c].flow_design_lpm.max(1e-9))
            .collect();
        let it_now = m.meter.it_power_kw.value;
        let db = m.facilities[0].outdoor_dry_bulb_c.value;
        let wb = m.facilities[0].outdoor_wet_bulb_c.value;
        let slow = l.gpu_slowdown_c;
        // The chillers run: the facility water is kept further below what the CDUs need.
        let chillers_kw: f64 = m
            .facilities
            .iter()
            .map(|f| f.chiller_power_kw)
            .filter(|r| r.usable(input.now_s, p.stale_s))
            .map(|r| r.value.max(0.0))
            .sum();
        let chiller_share = chillers_kw / it_now.max(1.0);
        let (chiller_gap_on, cdu_margin_k) = cdu_gap_margin(&p, self.chiller_gap_on, chiller_share);
        // Approach the CDU heat exchangers need at today's load.
        let gap = (0..nc)
            .map(|c| {
                // A tank's skid must hold its supply at design heat (the pressure check assumes it).
                let is_tank = b
                    .tanks
                    .as_ref()
                    .is_some_and(|t| t.tanks.get(c).is_some_and(Option::is_some));
                let load = if is_tank {
                    1.0
                } else {
                    m.cdus[c].heat_kw.value.max(0.0) / b.design_load_kw[c].max(1.0)
                };
                let margin = if is_tank { p.facility_gap_margin_k } else { cdu_margin_k };
                b.approach_k[c] * load.min(1.5) + margin
            })
            .fold(2.0f64, f64::max);
        // Candidate ranges: every CDU alike, within the equipment limits of all of them.
        let s_lo = l.cdus.iter().map(|c| c.supply_min_c).fold(f64::NEG_INFINITY, f64::max);
        let s_hi = l.cdus.iter().map(|c| c.supply_max_c).fold(f64::INFINITY, f64::min);
        let design_s = l.cdus.iter().map(|c| c.supply_design_c).sum::<f64>() / nc as f64;
        let q_lo = l
            .cdus
            .iter()
            .map(|c| c.flow_min_lpm / c.flow_design_lpm)
            .fold(f64::NEG_INFINITY, f64::max);
        let q_hi = l
            .cdus
            .iter()
            .map(|c| c.flow_max_lpm / c.flow_design_lpm)
            .fold(f64::INFINITY, f64::min);
        let f_lo = l
            .facilities
            .iter()
            .map(|f| f.supply_min_c)
            .fold(f64::NEG_INFINITY, f64::max);
        let f_design = l
            .facilities
            .iter()
            .map(|f| f.supply_design_c)
            .fold(f64::NEG_INFINITY, f64::max);
        let f_hi = l
            .facilities
            .iter()
            .map(|f| f.supply_max_c)
            .fold(f64::INFINITY, f64::min);
        let (seen_lo, seen_hi) = b.fac_seen.unwrap_or((f_lo, f_hi));
        // Tanks: colder condenser water is what lets the skids' flow fall (the dies sit on the
        // boiling pool, not on the water), so the range reaches further down and the flows lower.
        let has_tanks = b.tanks.as_ref().is_some_and(TankModel::all_tanks);
        let below_k = if has_tanks {
            p.tank_supply_below_design_k
        } else {
            p.supply_below_design_k
        };
        let mut supplies = Vec::new();
        let mut s = (design_s - below_k).round();
        while s <= design_s + p.supply_above_design_k + 1e-9 {
            if s >= s_lo - 1e-9 && s <= s_hi + 1e-9 {
                supplies.push(s);
            }
            s += 1.0;
        }
        let flow_fracs: &[f64] = if has_tanks { &p.tank_flow_fracs } else { &p.flow_fracs };
        let mut flows: Vec<f64> = flow_fracs
            .iter()
            .copied()
            .filter(|q| *q >= q_lo - 1e-9 && *q <= q_hi + 1e-9)
            .collect();
        if flows.is_empty() {
            flows.push(1.0f64.clamp(q_lo, q_hi));
        }
        // Keeping the setpoints in force (mean over CDUs and halls).
        let cur = input.current;
        let keep_sp = PlanSetpoints {
            cdu_supply_c: cur.cdus.iter().map(|c| c.supply_c).sum::<f64>() / nc as f64,
            cdu_flow_frac: (0..nc)
                .map(|c| cur.cdus[c].flow_lpm / l.cdus[c].flow_design_lpm)
                .sum::<f64>()
                / nc as f64,
            facility_supply_c: cur.facilities.iter().sum::<f64>() / cur.facilities.len().max(1) as f64,
            rejection_mode: cur.rejection_mode(0),
        };
        // The plant now, as measured: every prediction is today's meter reading plus the change
        // the models predict, so a model's bias cancels and only its slopes matter.
        let [_, _, _, fs_now, _, _, rise_now, rej_now, pump_now, flow_now] = cooling_inputs(m)?;
        let cdu_pumps_now: f64 = m.cdus.iter().map(|c| c.pump_power_kw.value).sum();
        let other_now = m.meter.facility_power_kw.value - it_now - cdu_pumps_now - rej_now - pump_now;
        let q_mean_now = q_now.iter().sum::<f64>() / nc as f64;
        let cm = &b.cooling;
        let (rej_fit, dtf_fit, pump_fit) = (cm.rej_fit.as_ref()?, cm.dtf_fit.as_ref()?, cm.pump_fit.as_ref()?);
        // Anchored at the setpoints in force, so that keeping them predicts what is measured.
        let (s_keep, f_keep) = (keep_sp.cdu_supply_c, keep_sp.facility_supply_c);
        // A tank already above the pressure the plan allows at design heat, at today's load: the
        // condenser model reads too cold (a sensor's offset, fouling it has not caught up with).
        // The setpoints in force are not kept, and only colder condenser water or more flow is
        // tried until the pressure is back.
        let tank_over: Option<(usize, f64, f64)> = b.tanks.as_ref().and_then(|tm| {
            tm.tanks.iter().enumerate().find_map(|(c, side)| {
                let side = (*side)?;
                // The gauge, or the higher of it and the pool thermometer while the two are
                // apart, or the pool when the gauge is lost.
                let pr = tm.checks.get(c)?.acted_on(&l.cdus.get(c)?.tank_pressure(
                    m.cdus.get(c)?.tank.as_ref(),
                    input.now_s,
                    self.params.stale_s,
                ))?;
                (pr > side.p_limit_kpa).then_some((c, pr, side.p_limit_kpa))
            })
        });
        let relieves = |s: f64, q: f64| {
            s <= s_keep + 1e-9
                && q >= keep_sp.cdu_flow_frac - 1e-9
                && (s < s_keep - 0.5 || q > keep_sp.cdu_flow_frac + 0.05)
        };
        let rej_base = rej_fit.predict(&rejection_features(it_now, db, wb, f_keep));
        let dtf_base = dtf_fit.predict(&[s_keep - f_keep, rise_now]).max(0.5);
        // The facility plant is not reaching its setpoint (at capacity): ask for nothing colder.
        let fac_short = fs_now > f_keep + 0.5;
        // The trim chiller runs: colder water costs compressor work, which the learned model of
        // staged equipment predicts least well; ask for nothing colder while it runs.
        let chiller_running = m.facilities.iter().any(|f| f.chiller_on);
        let pump_base = pump_fit.predict(&pump_features(flow_now));
        let other_base = model.facility_kw(it_now, db, wb, f_keep, assist_on_fraction(m))?.1;
        let cooling_now = cdu_pumps_now + rej_now + pump_now;
        // Heat-reuse heat pumps as metered: a candidate's heat pumps are today's power at the COP
        // of the return water it predicts (the hall's return now plus the change in its facility
        // supply from its own setpoint in force and the change in the facility rise). Each entry:
        // nameplate, metered kW, return water now °C, the hall's setpoint in force °C. None where
        // a hall has a heat pump whose meter or return water is not fresh: what colder water
        // costs it is then unknown, and the facility water is not taken below design.
        let heat_pumps_now: Option<Vec<(HeatPumpPlate, f64, f64, f64)>> = b
            .heat_pumps
            .iter()
            .enumerate()
            .filter_map(|(h, hp)| hp.map(|hp| (h, hp)))
            .map(|(h, hp)| {
                let f = m.facilities.get(h)?;
                let ok = |r: &coolplane_core::signals::Reading| r.usable(input.now_s, p.stale_s);
                (ok(&f.heat_pump_power_kw) && ok(&f.return_temp_c)).then_some((
                    hp,
                    f.heat_pump_power_kw.value.max(0.0),
                    f.return_temp_c.value,
                    cur.facilities.get(h).copied().unwrap_or(f_keep),
                ))
            })
            .collect();
        let heat_pump_blind = b.heat_pumps.iter().any(Option::is_some) && heat_pumps_now.is_none();
        let heat_pump_kw_now: f64 = heat_pumps_now.iter().flatten().map(|x| x.1).sum();
        let cdu_pumps_base: f64 = (0..nc).map(|c| model.cdu_pump_kw(c, q_now[c])).sum();
        let (flow_lo, flow_hi) = cm.flow_seen;
        // Heat-rejection modes: dry and adiabatic are predicted from the air model at the coil
        // air of each, anchored at the state the assist is in now (so that staying in it
        // predicts what is metered); auto as that state. Until the air model exists, every
        // candidate is auto, from the model of all samples.
        let n_assist = l.facilities.iter().filter(|f| f.adiabatic_assist).count();
        let assist_now = assist_state(m);
        let air_fit = cm.rej_air_fit.as_ref().zip(cm.assist_eff);
        // The facility water of the setpoints in force (the rise as the model predicts it there,
        // so that a candidate's water differs from it only by what the candidate changes).
        let water_keep = FacilityWater::new(flow_now, dtf_base);
        let anchor = match (assist_now, air_fit) {
            (Some(on), Some((f, eff))) => Some(air_predict(
                f,
                &air_features(cm, it_now, db, coil_air_c(db, wb, eff, on), f_keep, water_keep),
            )),
            _ => None,
        };
        let modes_ready = p.choose_rejection_mode && n_assist > 0 && anchor.is_some();
        let modes: &[RejectionMode] = if modes_ready {
            &[RejectionMode::Auto, RejectionMode::Dry, RejectionMode::Adiabatic]
        } else {
            &[RejectionMode::Auto]
        };
        // Whether the trim chiller's floor raised the last prediction, and how many of the
        // candidates' predictions it raised (for the plan's words).
        let floor_hit = std::cell::Cell::new(false);
        let floored = std::cell::Cell::new(0u32);
        // The same for the ceiling over warmer water (below).
        let ceil_hit = std::cell::Cell::new(false);
        let ceilinged = std::cell::Cell::new(0u32);
        let air_now = (db, wb);
        let rej_mode_at = |mode: RejectionMode, it: f64, fac: f64, w: FacilityWater, db: f64, wb: f64| -> f64 {
            // Auto is predicted to stay in the state the firmware has the assist in now (it
            // changes it only on saturation or after a quarter of an hour of dry air holding).
            let on = match mode {
                RejectionMode::Dry => Some(false),
                RejectionMode::Adiabatic => Some(true),
                RejectionMode::Auto => assist_now,
            };
            match (air_fit, on, anchor, modes_ready) {
                (Some((f, eff)), Some(on), Some(a), true) => {
                    let air_c = coil_air_c(db, wb, eff, on);
                    let rej = rej_now + air_predict(f, &air_features(cm, it, db, air_c, fac, w)) - a;
                    // Colder water than in force: never under the trim chiller's floor.
                    let floor = if fac < f_keep - 0.5 {
                        cm.trim_floor_kw(fac, w, air_c, (db, wb))
                    } else {
                        0.0
                    };
                    floor_hit.set(floor_hit.get() || floor > rej);
                    let rej = rej.max(floor);
                    // Warmer water than in force, in the air and assist state of now: never
                    // over the meters less what the trim chiller's data sheet says the warmer
                    // water saves its compressors (the mirror of the floor: in a heat wave the
                    // air model, extrapolating from the water it had seen, priced warmer water
                    // above the 0.9 MW of chillers it metered at 23 °C).
                    if fac > f_keep + 0.5 && Some(on) == assist_now && (db, wb) == air_now {
                        if let Some(ceiling) = cm.trim_ceiling_kw(rej_now, f_keep, water_keep, fac, w, air_c, (db, wb))
                        {
                            if ceiling < rej {
                                ceil_hit.set(true);
                                return ceiling;
                            }
                        }
                    }
                    rej
                }
                _ => rej_now + rej_fit.predict(&rejection_features(it, db, wb, fac)) - rej_base,
            }
        };
        let rej_mode = |mode: RejectionMode, it: f64, fac: f64, w: FacilityWater| rej_mode_at(mode, it, fac, w, db, wb);
        // The outdoor air of the hours ahead a candidate is judged over (the air now only
        // without `ahead_s`): what heat rejection then costs, against the hour's prediction.
        let air = b.weather.ahead(input.now_s, db, wb, p.ahead_s);
        let ahead_extra = |mode: RejectionMode, it: f64, fac: f64, w: FacilityWater| -> f64 {
            if air.points.len() <= 1 {
                return 0.0;
            }
            let mean = air
                .points
                .iter()
                .map(|(d, wb)| rej_mode_at(mode, it, fac, w, *d, *wb).max(0.0))
                .sum::<f64>()
                / air.points.len() as f64;
            mean - rej_mode(mode, it, fac, w).max(0.0)
        };
        let evaluate = |gs: &GpuSide, s: f64, q: f64, fac: f64, mode: RejectionMode| -> Option<PlanPrediction> {
            let it = it_now + gs.d_gpu_kw;
            let load = it / it_now.max(1.0);
            let cdu_pumps = cdu_pumps_now + (0..nc).map(|c| model.cdu_pump_kw(c, q)).sum::<f64>() - cdu_pumps_base;
            let rise = rise_now * load * q_mean_now / q.max(0.05);
            let dtf = dtf_fit.predict(&[s - fac, rise]).max(0.5);
            let flow = (flow_now * load * dtf_base / dtf).clamp(flow_lo, flow_hi);
            let water = FacilityWater::new(flow, dtf);
            floor_hit.set(false);
            ceil_hit.set(false);
            let rej = rej_mode(mode, it, fac, water).max(0.0);
            if floor_hit.get() {
                floored.set(floored.get() + 1);
            }
            if ceil_hit.get() {
                ceilinged.set(ceilinged.get() + 1);
            }
            let pump = (pump_now + pump_fit.predict(&pump_features(flow)) - pump_base).max(0.0);
            // The rest of the overhead (electrical losses, air-handler fans, electrical-room
            // cooling, misc) follows the IT load; its learned dependence on the facility water
            // temperature is not physical (it comes from the weather), so it is held at today's.
            let other = other_now + model.facility_kw(it, db, wb, f_keep, assist_on_fraction(m))?.1 - other_base;
            let cooling = cdu_pumps + rej + pump;
            let heat_pump = heat_pump_kw_now
                + heat_pumps_now
                    .iter()
                    .flatten()
                    .map(|(hp, kw, ret, sp)| hp.power_kw(*kw, *ret, ret + fac + dtf - (sp + dtf_base)) - kw)
                    .sum::<f64>();
            let facility = it + cooling + other - heat_pump_kw_now + heat_pump;
            let work = gs.work.max(1e-9);
            Some(PlanPrediction {
                facility_kw: facility,
                it_kw: it,
                cooling_kw: cooling,
                heat_pump_kw: heat_pump,
                pue: facility / it.max(1e-9),
                hottest_gpu_c: gs.hottest,
                hottest_at_tdp_c: gs.at_tdp,
                work_gpu_s_per_s: work,
                kwh_per_gpu_h: facility / work,
                facility_water: water,
            })
        };
        let keep_gs = Self::gpu_side(
            b,
            model,
            topo,
            l,
            m,
            &sup_now,
            &q_now,
            keep_sp.cdu_supply_c,
            keep_sp.cdu_flow_frac,
        );
        let keep = evaluate(
            &keep_gs,
            keep_sp.cdu_supply_c,
            keep_sp.cdu_flow_frac,
            keep_sp.facility_supply_c,
            keep_sp.rejection_mode,
        );
        // Keeping the setpoints in force, over the hours ahead, kWh per GPU-hour of work.
        let keep_ahead = keep.map(|k| {
            (k.facility_kw
                + ahead_extra(
                    keep_sp.rejection_mode,
                    k.it_kw,
                    keep_sp.facility_supply_c,
                    k.facility_water,
                ))
                / k.work_gpu_s_per_s.max(1e-9)
        });
        let feasible = |gs: &GpuSide| {
            gs.hottest <= slow - p.margin_now_k && gs.at_tdp <= slow - p.margin_tdp_k && gs.tank_excess_k <= 0.0
        };
        let feasible_move = |gs: &GpuSide| {
            gs.hottest <= slow - p.margin_now_k - p.margin_hysteresis_k
                && gs.at_tdp <= slow - p.margin_tdp_k - p.margin_hysteresis_k
                && gs.tank_excess_k <= -p.tank_margin_k
        };
        // A move's writes are paid for by the hours its setpoints stand: the policy's own recent
        // holds (a mean over its last moves, or the present hold if it is longer), at least the
        // plan's horizon, at most the cap.
        let holding_h = self.last_move_s.map_or(0.0, |t| (input.now_s - t) / 3600.0);
        let amortise_h = write_amortise_h(self.hold_h, holding_h, p.horizon_s, p.write_amortise_max_s);
        // The setpoints in force keep the plain limits (a move is then optional).
        let keep_ok = tank_over.is_none()
            && keep.is_some()
            && feasible(&keep_gs)
            && keep_sp.facility_supply_c <= keep_sp.cdu_supply_c - gap + 0.5;
        // The week's write allowance, where the operator set one: what is left of it, and the
        // price of a write raised as it is used.
        let n_halls = cur.facilities.len().max(1);
        let (budget_left, price_mult) = write_allowance(p.write_budget_per_cdu_week * nc as f64, writes_used);
        let price_mult = if settling { 1.0 } else { price_mult };
        // The facility's own allowance (split), or the one allowance for all writes.
        let fac_allowance = if split {
            let (left, mult) = write_allowance(p.facility_write_budget_per_hall_week * n_halls as f64, fac_writes_used);
            Some((left, if settling { 1.0 } else { mult }))
        } else {
            None
        };
        let fac_price_mult = fac_allowance.map_or(price_mult, |(_, m)| m);
        // A write's charge, kWh, in proportion to the load the site's CDUs carry.
        let write_base = p.write_cost_kwh * b.design_load_kw.iter().sum::<f64>()
            / (b.design_load_kw.len().max(1) as f64 * p.write_cost_ref_kw.max(1.0));
        let write_cost = price_mult * write_base;
        let fac_write_cost = fac_price_mult * write_base;
        // Writes a move needs (to the CDUs, to the facility water systems), and what they are
        // charged, kW over the horizon.
        let write_kw = |s: f64, q: f64, fac: f64, mode: RejectionMode| -> (u32, u32, f64) {
            let (mut wc, mut wf) = (0u32, 0u32);
            for (c, x) in cur.cdus.iter().enumerate() {
                wc += (s - x.supply_c).abs().ceil() as u32;
                if (q * l.cdus[c].flow_design_lpm - x.flow_lpm).abs() > 1.0 {
                    wc += 1;
                }
            }
            for x in &cur.facilities {
                wf += (fac - x).abs().ceil() as u32;
            }
            if mode != keep_sp.rejection_mode {
                wf += n_assist as u32;
            }
            // Leaving the fallback is a one-off transition: its writes are not charged, so the
            // first plan is not held near where trim-respond happened to leave the setpoints.
            let kwh = if first_plan {
                0.0
            } else {
                wc as f64 * write_cost + wf as f64 * fac_write_cost
            };
            (wc, wf, kwh / amortise_h)
        };
        let leaves_enough = |wc: u32, wf: u32| leaves_enough(budget_left, fac_allowance.map(|(l, _)| l), wc, wf);
        // Where the dry coolers gave out (remembered for a week): no dry candidate there.
        let dry_limits: Vec<DryGaveOut> = self
            .dry_gave_out
            .iter()
            .filter(|g| input.now_s - g.t_s < DRY_MEMORY_S)
            .copied()
            .collect();
        let (mut dry_short, mut dry_blocked) = (0u32, None::<DryGaveOut>);
        // The mode the plan left less than `mode_return_s` ago is not chosen again yet.
        let mode_left = self.mode_left.filter(|(_, t)| input.now_s - t < p.mode_return_s);
        let returning = |mode: RejectionMode| mode_left.is_some_and(|(m0, _)| m0 == mode);
        let mut mode_returns = 0u32;
        // A facility-water move the plans undid (`fac_regret_s`).
        // Only optional moves: a move the limits force may go anywhere they allow.
        let regret = self
            .fac_moves
            .regret
            .filter(|g| keep_ok && input.now_s - g.t_s < p.fac_regret_s);
        let mut regret_refused = 0u32;
        // (setpoints, the hour's prediction, score, writes, kWh per GPU-hour over the hours ahead)
        let mut best: Option<(PlanSetpoints, PlanPrediction, f64, u32, f64)> = None;
        // The best forced move beyond the week's write allowance (taken only if none fits it).
        let mut best_over: Option<(PlanSetpoints, PlanPrediction, f64, u32, f64)> = None;
        let mut n = 0u32;
        let mut sides = Vec::new();
        let (mut hot_refused, mut tdp_refused, mut tank_refused, mut implausible) = (0u32, 0u32, 0u32, 0u32);
        let mut beyond_fans = 0u32;
        let mut budget_refused = 0u32;
        // Two-stage (`ahead_two_stage`): the CDU setpoints (a write per CDU a kelvin) are judged
        // over the hours ahead with the facility setpoint and mode (a write a hall) chosen again
        // at each hour; the offset of the day's value over the hour's best, per (supply, flow),
        // is what a candidate adds to its hour's prediction. For the CDU setpoints in force, where
        // they are on the grid (otherwise keeping is judged as one stage).
        let two_stage = p.ahead_two_stage && air.points.len() > 1;
        let mut keep_day_off: Option<f64> = None;
        for &s in &supplies {
            for &q in &flows {
                let gs = Self::gpu_side(b, model, topo, l, m, &sup_now, &q_now, s, q);
                n += 1;
                sides.push((s, q, gs));
                if gs.hottest > slow - p.margin_now_k {
                    hot_refused += 1;
                }
                if gs.at_tdp > slow - p.margin_tdp_k {
                    tdp_refused += 1;
                }
                if gs.tank_excess_k > -p.tank_margin_k {
                    tank_refused += 1;
                }
                let is_keep = (s - keep_sp.cdu_supply_c).abs() < 1e-6 && (q - keep_sp.cdu_flow_frac).abs() < 1e-6;
                let movable = (tank_over.is_none() || relieves(s, q)) && feasible_move(&gs);
                if !(movable || two_stage && is_keep) {
                    continue;
                }
                // (facility setpoint, mode, the hour's prediction) that pass the filters.
                let mut cands: Vec<(f64, RejectionMode, PlanPrediction)> = Vec::new();
                let fac_max = f_hi.min(s - gap).min(seen_hi + p.facility_explore_k);
                let mut fac_min = f_lo.max(seen_lo - p.facility_explore_k);
                if heat_pump_blind {
                    // Colder facility water raises the heat pump's lift, which is unknown while
                    // its meter or the return water cannot be read: never below design.
                    fac_min = fac_min.max(f_design);
                }
                let mut fac = fac_max.floor();
                while fac >= fac_min - 1e-9 {
                    if (s - fac) < cm.approach_seen.0 - p.facility_explore_k
                        || (s - fac) > cm.approach_seen.1 + p.facility_explore_k
                    {
                        fac -= 1.0;
                        continue;
                    }
                    if (fac_short || chiller_running) && fac < f_keep - 1e-9 {
                        fac -= 1.0;
                        continue;
                    }
                    if (fac - f_keep).abs() > 0.5
                        && regret.is_some_and(|g| g.blocks(fac, db, input.now_s, p.fac_regret_s))
                    {
                        if movable {
                            regret_refused += 1;
                        }
                        fac -= 1.0;
                        continue;
                    }
                    for &mode in modes {
                        if mode != keep_sp.rejection_mode && returning(mode) {
                            if movable {
                                mode_returns += 1;
                            }
                            continue;
                        }
                        if mode == RejectionMode::Dry {
                            // The assist holds water the plant is short of now: not given up.
                            if fac_short && assist_now == Some(true) {
                                if movable {
                                    dry_short += 1;
                                }
                                continue;
                            }
                            // Where the dry coolers gave out at the approach of the hour (two
                            // stages: dry is then not chosen at that hour) or of any hour ahead.
                            let hours = if two_stage { &air.points[..1] } else { &air.points[..] };
                            if let Some(g) = hours
                                .iter()
                                .find_map(|(d, _)| dry_limits.iter().rev().find(|g| g.blocks(fac - d, it_now)))
                            {
                                if movable {
                                    dry_blocked.get_or_insert(*g);
                                }
                                continue;
                            }
                        }
                        let Some(pred) = evaluate(&gs, s, q, fac, mode) else {
                            continue;
                        };
                        // Without a trim chiller, water colder than the setpoint in force that
                        // the dry coolers' data sheet says needs more than their fans' full
                        // speed would not be made (the fans saturate and the water runs warm,
                        // which the air model, flat at full speed, does not price).
                        if fac < f_keep - 1e-9
                            && cm.beyond_full_speed_unchilled(fac, pred.facility_water, mode, assist_now, (db, wb))
                        {
                            if movable {
                                beyond_fans += 1;
                            }
                            continue;
                        }
                        // A prediction that cooling falls below 30 % of today's is the model
                        // extrapolating, not the plant: such a candidate is not taken.
                        if pred.cooling_kw < 0.3 * cooling_now {
                            if movable {
                                implausible += 1;
                            }
                            continue;
                        }
                        cands.push((fac, mode, pred));
                    }
                    fac -= 1.0;
                }
                let hour_min = cands.iter().map(|c| c.2.facility_kw).fold(f64::INFINITY, f64::min);
                let day_off = (two_stage && !cands.is_empty()).then(|| {
                    let day = air
                        .points
                        .iter()
                        .enumerate()
                        .map(|(k, (d, w))| {
                            cands
                                .iter()
                                .filter(|(fac, mode, _)| {
                                    k == 0
                                        || *mode != RejectionMode::Dry
                                        || !dry_limits.iter().any(|g| g.blocks(fac - d, it_now))
                                })
                                .map(|(fac, mode, pred)| {
                                    pred.facility_kw
                                        + if k == 0 {
                                            0.0
                                        } else {
                                            rej_mode_at(*mode, pred.it_kw, *fac, pred.facility_water, *d, *w).max(0.0)
                                                - rej_mode(*mode, pred.it_kw, *fac, pred.facility_water).max(0.0)
                                        }
                                })
                                .fold(f64::INFINITY, f64::min)
                        })
                        // An hour whose every candidate is dry where the dry coolers gave out
                        // (none can be: auto or adiabatic stays) counts at the hour's best.
                        .map(|v| if v.is_finite() { v } else { hour_min })
                        .sum::<f64>()
                        / air.points.len() as f64;
                    day - hour_min
                });
                if is_keep {
                    keep_day_off = day_off;
                }
                if !movable {
                    continue;
                }
                for (fac, mode, pred) in cands {
                    let extra = day_off.unwrap_or_else(|| ahead_extra(mode, pred.it_kw, fac, pred.facility_water));
                    let (wc, wf, wkw) = write_kw(s, q, fac, mode);
                    let writes = wc + wf;
                    // An optional move is made only if what is left of the week's write
                    // allowance after it would undo it: a move is judged on the hours ahead,
                    // and one that spends the allowance leaves the setpoints where they are
                    // for the rest of the week, however the weather turns. A move the limits
                    // force (the setpoints in force break one) takes the best candidate that
                    // fits the same way, and goes beyond the allowance only when none does.
                    let score = (pred.facility_kw + extra + wkw) / pred.work_gpu_s_per_s;
                    let ahead_kwh = (pred.facility_kw + extra) / pred.work_gpu_s_per_s;
                    let fits = first_plan || settling || leaves_enough(wc, wf);
                    let slot = if fits {
                        &mut best
                    } else {
                        budget_refused += 1;
                        if keep_ok {
                            continue;
                        }
                        &mut best_over
                    };
                    if slot.as_ref().is_none_or(|b| score < b.2) {
                        *slot = Some((
                            PlanSetpoints {
                                cdu_supply_c: s,
                                cdu_flow_frac: q,
                                facility_supply_c: fac,
                                rejection_mode: mode,
                            },
                            pred,
                            score,
                            writes,
                            ahead_kwh,
                        ));
                    }
                }
            }
        }
        // Keeping, judged as the candidates are: two stages where the CDU setpoints in force are
        // on the grid.
        let keep_ahead = match (keep_day_off, keep) {
            (Some(off), Some(k)) => Some((k.facility_kw + off) / k.work_gpu_s_per_s.max(1e-9)),
            _ => keep_ahead,
        };
        let mut reasons = Vec::new();
        reasons.extend(refit_note);
        if best.is_none() && best_over.is_some() {
            best = best_over;
            reasons.push("the setpoints in force break a limit the plan keeps and no move that restores it leaves enough of the week's write allowance to undo it: the best move beyond the allowance".into());
        }
        reasons.extend(self.dry_note.take());
        if chiller_gap_on && cdu_margin_k > p.facility_gap_margin_k {
            reasons.push(format!(
                "the chillers draw {chillers_kw:.0} kW ({:.2} % of IT): facility water kept at least {cdu_margin_k:.1} K below what the CDUs' heat exchangers need at today's load ({:.1} K without chillers), so that the air handlers' warm coils take more of the air's heat and the CDUs need less facility flow",
                100.0 * chiller_share,
                p.facility_gap_margin_k
            ));
        }
        if let (Some(g), true) = (regret, regret_refused > 0) {
            reasons.push(format!(
                "facility water not taken {} {:.1} °C before {:.1} h ({regret_refused} facility setpoints of the CDU candidates): the plan moved it {:.1} → {:.1} °C and back within {:.0} h (undone at {:.1} h, dry bulb {:.1} °C), the cooling model's error there; until the dry bulb is {:.0} K {} than then",
                if g.to_c < g.from_c { "to or below" } else { "to or above" },
                0.5 * (g.from_c + g.to_c),
                (g.t_s + p.fac_regret_s) / 3600.0,
                g.from_c,
                g.to_c,
                FAC_UNDO_WINDOW_S / 3600.0,
                g.t_s / 3600.0,
                g.dry_bulb_c,
                FAC_REGRET_AIR_K,
                if g.to_c < g.from_c { "cooler" } else { "warmer" },
            ));
        }
        if floored.get() > 0 {
            reasons.push(format!(
                "{} candidates' heat rejection raised to the trim chiller's floor: for facility water colder than in force the air model predicted less than the trim chiller's compressors need by its data sheet, for the heat the dry coolers' curve leaves beyond their fans' full speed",
                floored.get()
            ));
        }
        if ceilinged.get() > 0 {
            reasons.push(format!(
                "{} candidates' heat rejection lowered to the trim chiller's ceiling: for facility water warmer than in force the air model predicted more than the fans and chillers metered now less what the trim chiller's compressors save by its data sheet",
                ceilinged.get()
            ));
        }
        if dry_short > 0 {
            reasons.push(format!(
                "dry not offered: the facility water at {fs_now:.1} °C is not reaching its {f_keep:.1} °C setpoint with the adiabatic assist on, and dry would take the assist away"
            ));
        }
        if let (Some((m0, t0)), true) = (mode_left, mode_returns > 0) {
            reasons.push(format!(
                "heat rejection {} not chosen again before {:.1} h: the plan left it at {:.1} h (a mode is not returned to within {:.1} h of leaving it)",
                m0.name(),
                (t0 + p.mode_return_s) / 3600.0,
                t0 / 3600.0,
                p.mode_return_s / 3600.0
            ));
        }
        if let Some(g) = dry_blocked {
            reasons.push(format!(
                "dry not offered where the approach (facility setpoint − dry bulb, {db:.1} °C now) is under {:.1} K: the dry coolers gave out at {:.1} h at an approach of {:.1} K ({:.1} °C water against {:.1} °C, air {:.1} °C, {:.0} kW of IT)",
                g.approach_k + DRY_RETRY_APPROACH_K,
                g.t_s / 3600.0,
                g.approach_k,
                g.water_c,
                g.setpoint_c,
                g.dry_bulb_c,
                g.it_kw
            ));
        }
        if heat_pump_blind {
            reasons.push(format!(
                "heat-reuse heat pump: its power meter or the facility return water cannot be read, so what colder water costs it is unknown: facility water not below its design {f_design:.0} °C"
            ));
        }
        if let (Some(_), true) = (budget_left, settling) {
            reasons.push(format!(
                "write allowance: settling until {:.1} h, the first day of plans out of the learning day: the twin is still calibrating and the setpoints move with it at the plain price of a write, outside the allowance of {:.0} writes a week ({:.1} a CDU{}), which starts then",
                self.settle_until_s.unwrap_or(input.now_s) / 3600.0,
                (p.write_budget_per_cdu_week * nc as f64).floor(),
                p.write_budget_per_cdu_week,
                if split {
                    format!(
                        ", the CDUs' writes only; the facility water's and the heat-rejection mode's: {:.0} a week, {:.1} a hall",
                        (p.facility_write_budget_per_hall_week * n_halls as f64).floor(),
                        p.facility_write_budget_per_hall_week
                    )
                } else {
                    String::new()
                },
            ));
        } else if let Some(left) = budget_left {
            reasons.push(format!(
                "write allowance: {writes_used} of {:.0} setpoint writes{} used in the last 7 days ({:.1} a CDU a week), {left} left; a write is charged {:.1} × its price{}{}",
                (p.write_budget_per_cdu_week * nc as f64).floor(),
                if split { " to the CDUs" } else { "" },
                p.write_budget_per_cdu_week,
                price_mult,
                match fac_allowance {
                    Some((fac_left, m)) => format!(
                        "; to the facility water systems (setpoint and heat-rejection mode) {fac_writes_used} of {:.0} ({:.1} a hall a week), {} left, a write charged {m:.1} × its price",
                        (p.facility_write_budget_per_hall_week * n_halls as f64).floor(),
                        p.facility_write_budget_per_hall_week,
                        fac_left.unwrap_or(0)
                    ),
                    None => String::new(),
                },
                if budget_refused > 0 {
                    format!("; {budget_refused} candidates need more than half the writes left (a move must leave enough to undo it) and are not made")
                } else {
                    String::new()
                }
            ));
        }
        if air.points.len() > 1 {
            let (lo, hi) = air
                .points
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (d, _)| {
                    (lo.min(*d), hi.max(*d))
                });
            reasons.push(format!(
                "candidates judged over the next {} h of outdoor air, dry bulb {lo:.1} to {hi:.1} °C: {}",
                air.points.len(),
                match air.bias_db_k {
                    Some(d) if air.from_record > 0 => format!(
                        "yesterday's air at those hours ({} of {} from the record, the rest the air now), {d:+.1} K today's difference fading over {:.0} h",
                        air.from_record,
                        air.points.len() - 1,
                        WEATHER_BIAS_TAU_S / 3600.0
                    ),
                    _ => "no record of yesterday's air yet: the air now for every hour".to_string(),
                }
            ));
        }
        // The plan moves by its own choice (an optional move from the candidates), not because
        // the limits force it, to design or to relieve a tank.
        let mut chosen_by_choice = false;
        let (mut chosen, mut pred) = match (best, keep) {
            (Some((sp, _, score, writes, ahead_kwh)), Some(k))
                if keep_ok && !first_plan && score >= keep_ahead.unwrap_or(k.kwh_per_gpu_h) * (1.0 - p.min_gain) =>
            {
                reasons.push(format!(
                    "holding CDU supply {:.1} °C, flow {:.0} % of design, facility water {:.1} °C, heat rejection {}: the best candidate ({:.0} °C, {:.0} %, {:.0} °C, {}) would save {:.3} % of facility energy per unit of work{}, not enough for its {writes} setpoint writes (each charged {} over the {amortise_h:.1} h its setpoints are expected to stand) and the {:.2} % threshold",
                    keep_sp.cdu_supply_c,
                    keep_sp.cdu_flow_frac * 100.0,
                    keep_sp.facility_supply_c,
                    keep_sp.rejection_mode.name(),
                    sp.cdu_supply_c,
                    sp.cdu_flow_frac * 100.0,
                    sp.facility_supply_c,
                    sp.rejection_mode.name(),
                    (1.0 - ahead_kwh / keep_ahead.unwrap_or(k.kwh_per_gpu_h)) * 100.0,
                    if air.points.len() > 1 {
                        format!(" over the next {} h of outdoor air", air.points.len())
                    } else {
                        String::new()
                    },
                    if split {
                        format!("{write_cost:.1} kWh a CDU write, {fac_write_cost:.1} kWh a facility write")
                    } else {
                        format!("{write_cost:.1} kWh")
                    },
                    p.min_gain * 100.0
                ));
                (keep_sp, k)
            }
            (Some((sp, pred, _, writes, ahead_kwh)), k) => {
                chosen_by_choice = keep_ok;
                if let Some(k) = k {
                    reasons.push(format!(
                        "CDU supply {:.1} → {:.0} °C, flow {:.0} → {:.0} % of design, facility water {:.1} → {:.0} °C, heat rejection {} → {}: predicted facility {:.0} → {:.0} kW ({:+.0} kW of cooling, {:+.0} kW of IT from die temperature), work {:+.3} %, energy per unit of work {:+.3} % ({writes} setpoint writes)",
                        keep_sp.cdu_supply_c,
                        sp.cdu_supply_c,
                        keep_sp.cdu_flow_frac * 100.0,
                        sp.cdu_flow_frac * 100.0,
                        keep_sp.facility_supply_c,
                        sp.facility_supply_c,
                        keep_sp.rejection_mode.name(),
                        sp.rejection_mode.name(),
                        k.facility_kw,
                        pred.facility_kw,
                        pred.cooling_kw - k.cooling_kw,
                        pred.it_kw - k.it_kw,
                        (pred.work_gpu_s_per_s / k.work_gpu_s_per_s - 1.0) * 100.0,
                        (pred.kwh_per_gpu_h / k.kwh_per_gpu_h - 1.0) * 100.0
                    ));
                    if let (true, Some(ka)) = (air.points.len() > 1, keep_ahead) {
                        reasons.push(format!(
                            "over the next {} h of outdoor air: energy per unit of work {:+.3} %",
                            air.points.len(),
                            (ahead_kwh / ka - 1.0) * 100.0
                        ));
                    }
                    if heat_pumps_now.as_ref().is_some_and(|v| !v.is_empty()) {
                        reasons.push(format!(
                            "heat-reuse heat pump {:.1} → {:.1} kW at the return water the move predicts (its COP from the nameplate's delivery temperature and share of Carnot; the heat it takes is what district heating asks for)",
                            k.heat_pump_kw,
                            pred.heat_pump_kw
                        ));
                    }
                    if !keep_ok {
                        reasons.push("the setpoints in force break a limit the plan keeps (hottest-GPU margin, facility approach or a tank's pressure): moving".into());
                    }
                } else {
                    reasons.push(format!(
                        "CDU supply {:.0} °C, flow {:.0} % of design, facility water {:.0} °C, heat rejection {}: predicted facility {:.0} kW",
                        sp.cdu_supply_c,
                        sp.cdu_flow_frac * 100.0,
                        sp.facility_supply_c,
                        sp.rejection_mode.name(),
                        pred.facility_kw
                    ));
                }
                (sp, pred)
            }
            (None, Some(k)) if keep_ok && !first_plan && (budget_refused > 0 || regret_refused > 0) => {
                let why = match (budget_refused > 0, regret_refused > 0) {
                    (true, false) => "needs more than half the setpoint writes the week's allowance has left (a move must leave enough to undo it)",
                    (false, true) => "takes the facility water where the plans undid a move (above)",
                    _ => "needs more than half the setpoint writes the week's allowance has left (a move must leave enough to undo it) or takes the facility water where the plans undid a move (above)",
                };
                reasons.push(format!(
                    "holding CDU supply {:.1} °C, flow {:.0} % of design, facility water {:.1} °C, heat rejection {}: every move that passes the limits {why}",
                    keep_sp.cdu_supply_c,
                    keep_sp.cdu_flow_frac * 100.0,
                    keep_sp.facility_supply_c,
                    keep_sp.rejection_mode.name(),
                ));
                (keep_sp, k)
            }
            (None, _) if tank_over.is_some() => {
                // A tank over its pressure and no relieving candidate passes the limits (the
                // coldest water and fullest flow tried may already be in force): never back to
                // design, which may be warmer water at less flow; the most relieving setpoints.
                // From the coldest supply and fullest flow any skid holds now (the controller's
                // tank guard may hold one colder than the rest): no skid is asked for warmer water
                // or less flow while a tank is over.
                let extreme = PlanSetpoints {
                    cdu_supply_c: cur.cdus.iter().map(|c| c.supply_c).fold(f64::INFINITY, f64::min),
                    cdu_flow_frac: (0..nc)
                        .map(|c| cur.cdus[c].flow_lpm / l.cdus[c].flow_design_lpm)
                        .fold(f64::NEG_INFINITY, f64::max),
                    ..keep_sp
                };
                let sp = relief_setpoints(&supplies, &flows, extreme, gap, f_lo);
                let gs = Self::gpu_side(
                    b,
                    model,
                    topo,
                    l,
                    m,
                    &sup_now,
                    &q_now,
                    sp.cdu_supply_c,
                    sp.cdu_flow_frac,
                );
                let pred = evaluate(
                    &gs,
                    sp.cdu_supply_c,
                    sp.cdu_flow_frac,
                    sp.facility_supply_c,
                    sp.rejection_mode,
                )
                .or(keep)
                .unwrap_or_default();
                reasons.push(format!(
                    "no candidate that relieves the tank's pressure passes the limits: the coldest condenser water and fullest flow in range ({:.0} °C, {:.0} % of design), never warmer or less than in force, heat rejection auto",
                    sp.cdu_supply_c,
                    sp.cdu_flow_frac * 100.0
                ));
                (sp, pred)
            }
            (None, _) => {
                // Nothing passes the limits: design setpoints, the commissioned safe point.
                let d = l.design_setpoints();
                let sp = PlanSetpoints {
                    cdu_supply_c: design_s,
                    cdu_flow_frac: 1.0,
                    facility_supply_c: d.facilities.iter().sum::<f64>() / d.facilities.len().max(1) as f64,
                    rejection_mode: RejectionMode::Auto,
                };
                reasons.push(format!(
                    "no candidate keeps the hottest GPU {:.0} K below slowdown at today's load and {:.0} K at TDP{}: design setpoints, heat rejection auto",
                    p.margin_now_k,
                    p.margin_tdp_k,
                    if has_tanks {
                        format!(
                            " and every tank at its design heat within {:.0} % of its relief pressure",
                            p.tank_pressure_frac * 100.0
                        )
                    } else {
                        String::new()
                    }
                ));
                let pred = keep.unwrap_or_default();
                (sp, pred)
            }
        };
        // The adiabatic probe. The air model has samples of the assist off only (the firmware
        // never staged it while the policy learned), so the two states cannot be compared, and
        // under auto the firmware stages it only when the fans saturate, which the warmer water
        // the policy then asks for may never make them do. Where the air model fitted on dry air
        // alone predicts that the assist would save energy now, the assist is held on until the
        // air model has its samples of it (at most `probe_assist_s`), and the plan says so.
        let now = input.now_s;
        let probe_allowed = p.probe_assist_s > 0.0
            && p.choose_rejection_mode
            && n_assist > 0
            && !modes_ready
            && tank_over.is_none()
            && cm.air_n[1] < MODE_MIN_SAMPLES;
        // What the assist would save now at the chosen setpoints, kW, from the dry-air prior.
        let prior_saving_kw = cm.rej_air_prior.as_ref().zip(cm.assist_eff).map(|(f, eff)| {
            let at = |on: bool| {
                air_predict(
                    f,
                    &air_features(
                        cm,
                        it_now,
                        db,
                        coil_air_c(db, wb, eff, on),
                        chosen.facility_supply_c,
                        water_keep,
                    ),
                )
            };
            at(false) - at(true)
        });
        let facility_now = m.meter.facility_power_kw.value;
        let probe_threshold_kw = (p.min_gain * facility_now).max(1.0);
        // The firmware has a day first: staging the assist itself over a day's weather gives the
        // air model samples from a wider band of it than an hour's probe.
        let wanted_since = if probe_allowed {
            *self.probe_wanted_since_s.get_or_insert(now)
        } else {
            self.probe_wanted_since_s = None;
            now
        };
        let mut probe_on = false;
        match self.probe_since_s {
            Some(t0) if !probe_allowed => {
                self.probe_since_s = None;
                reasons.push(format!(
                    "adiabatic probe ended after {:.1} h: the air model has {} samples with the assist on and {} with it off{}",
                    (now - t0) / 3600.0,
                    cm.air_n[1],
                    cm.air_n[0],
                    if modes_ready { "; the mode is now chosen from it" } else { "" }
                ));
            }
            Some(t0) if now - t0 >= p.probe_assist_s - 1e-6 => {
                self.probe_since_s = None;
                self.probe_next_s = now + 86_400.0;
                reasons.push(format!(
                    "adiabatic probe given up after {:.1} h with {} of the {MODE_MIN_SAMPLES} samples with the assist on the air model needs (the assist did not run all that time: refused by the controller's envelope or not staged by the firmware): not probed again before {:.1} h",
                    (now - t0) / 3600.0,
                    cm.air_n[1],
                    self.probe_next_s / 3600.0
                ));
            }
            Some(t0) => {
                probe_on = true;
                reasons.push(format!(
                    "adiabatic probe since {:.1} h: the assist held on until the air model has {MODE_MIN_SAMPLES} samples with it (has {})",
                    t0 / 3600.0,
                    cm.air_n[1]
                ));
            }
            None if probe_allowed && now - wanted_since < PROBE_PATIENCE_S - 1e-6 => {}
            None if probe_allowed && assist_now == Some(false) && now >= self.probe_next_s - 1e-6 => {
                match prior_saving_kw {
                    Some(kw) if kw >= probe_threshold_kw => {
                        probe_on = true;
                        self.probe_since_s = Some(now);
                        reasons.push(format!(
                            "adiabatic probe: the air model has {} samples with the assist off and {} with it on, so the two cannot be compared, and the firmware has not staged it in {:.0} h of plans; fitted on dry air alone it predicts the assist would save {kw:.0} kW now: the assist is held on (at most {:.1} h) to learn what it saves",
                            cm.air_n[0],
                            cm.air_n[1],
                            (now - wanted_since) / 3600.0,
                            p.probe_assist_s / 3600.0
                        ));
                    }
                    Some(kw) => reasons.push(format!(
                        "adiabatic assist not probed: fitted on dry air alone, the air model predicts it would save {kw:.1} kW now (less than {probe_threshold_kw:.1} kW)"
                    )),
                    None => {}
                }
            }
            None => {}
        }
        if probe_on {
            chosen.rejection_mode = RejectionMode::Adiabatic;
            // The prediction is the chosen setpoints' with the assist's saving from the prior.
            if let Some(kw) = prior_saving_kw.filter(|_| chosen.rejection_mode != keep_sp.rejection_mode) {
                pred.facility_kw -= kw;
                pred.cooling_kw -= kw;
                pred.pue = pred.facility_kw / pred.it_kw.max(1e-9);
                pred.kwh_per_gpu_h = pred.facility_kw / pred.work_gpu_s_per_s.max(1e-9);
            }
        }
        // The hold that ends with a move feeds the expected hold (the first plan after the
        // fallback starts the first hold). A move is a target other than the last plan's: the
        // setpoints in force may lag it (the ramp, a guard), which is not a new move.
        // The plan leaves a mode by its own choice (not for the probe): remembered, so that it
        // is not returned to within `mode_return_s`.
        if !first_plan && !probe_on && chosen.rejection_mode != keep_sp.rejection_mode {
            self.mode_left = Some((keep_sp.rejection_mode, now));
        }
        // A facility-water move back to where the last one came from, within the undo window:
        // remembered (`fac_regret_s`). The move is from the last plan's target (the setpoints in
        // force may lag it), noted where the plan chose it; any other change of target (forced
        // by the limits, to design, relieving a tank, out of a fallback) starts afresh.
        let fac_from = self.held.map_or(keep_sp.facility_supply_c, |h| h.facility_supply_c);
        if !first_plan && chosen_by_choice {
            self.fac_moves.note(now, fac_from, chosen.facility_supply_c, db);
        } else if first_plan || (chosen.facility_supply_c - fac_from).abs() > 0.5 {
            self.fac_moves.last = None;
        }
        // A move's writes count against the week's allowance, and so does a return from a
        // fallback (stale inputs) after the first plan; the first move out of the learning day
        // does not.
        let had_moved = self.last_move_s.is_some();
        let moved = note_target(
            self.held,
            (&mut self.hold_h, &mut self.last_move_s),
            p.write_amortise_max_s,
            now,
            chosen,
            first_plan,
        );
        if moved && (!first_plan || had_moved) && !settling {
            let (wc, wf, _) = write_kw(
                chosen.cdu_supply_c,
                chosen.cdu_flow_frac,
                chosen.facility_supply_c,
                chosen.rejection_mode,
            );
            if wc + wf > 0 {
                self.moves_writes.push((now, wc, wf));
            }
        }
        let write_allowance = budget_left.map(|_| {
            let allowance = (p.write_budget_per_cdu_week * nc as f64).floor() as u32;
            let used_c: u32 = self.moves_writes.iter().map(|(_, w, _)| *w).sum();
            let used_f: u32 = self.moves_writes.iter().map(|(_, _, w)| *w).sum();
            let used = if split { used_c } else { used_c + used_f };
            WriteAllowance {
                allowance,
                used,
                left: allowance.saturating_sub(used),
                refused_candidates: budget_refused,
                settling,
                facility: split.then(|| {
                    let allowance = (p.facility_write_budget_per_hall_week * n_halls as f64).floor() as u32;
                    WritePool {
                        allowance,
                        used: used_f,
                        left: allowance.saturating_sub(used_f),
                    }
                }),
            }
        });
        // Which constraint binds, from the neighbours of the choice.
        let binding = {
            let colder_flow = sides.iter().find(|(s, q, _)| {
                (*s - chosen.cdu_supply_c).abs() < 1e-9
                    && *q < chosen.cdu_flow_frac - 1e-9
                    && (chosen.cdu_flow_frac - *q) < 0.11
            });
            // At the flow of the grid nearest the choice (a held choice may be off the grid).
            let warmer = sides
                .iter()
                .filter(|(s, q, _)| {
                    (*s - chosen.cdu_supply_c - 1.0).abs() < 1e-9 && (*q - chosen.cdu_flow_frac).abs() < 0.06
                })
                .min_by(|a, b| {
                    (a.1 - chosen.cdu_flow_frac)
                        .abs()
                        .total_cmp(&(b.1 - chosen.cdu_flow_frac).abs())
                });
            let mut parts = Vec::new();
            let warmer_what = if has_tanks {
                "1 K warmer condenser water"
            } else {
                "1 K warmer CDU water"
            };
            for (what, nb) in [("less flow", colder_flow), (warmer_what, warmer)] {
                match nb {
                    Some((_, _, gs)) if gs.tank_excess_k > -p.tank_margin_k => parts.push(if gs.tank_excess_k.is_finite() {
                        format!(
                            "{what} would let a tank at {:.0} kW{} reach a {:.1} °C pool (limit {:.1} °C: {:.1} kPa above atmospheric; a move keeps {:.1} K below it)",
                            gs.tank_heat_kw,
                            if p.tank_heat_memory_s > 0.0 && gs.tank_limit_kpa > b.tanks.as_ref().map_or(f64::INFINITY, TankModel::band_kpa) + 1e-9 {
                                " (its design heat, were it to go there)"
                            } else if p.tank_heat_memory_s > 0.0 {
                                " (the heat it is planned at)"
                            } else {
                                " (its design heat)"
                            },
                            gs.tank_pool_c,
                            gs.tank_pool_c - gs.tank_excess_k,
                            gs.tank_limit_kpa,
                            p.tank_margin_k
                        )
                    } else {
                        format!("{what}: a tank's pool cannot be predicted (its condenser is not measured)")
                    }),
                    Some((_, _, gs)) if gs.at_tdp > slow - p.margin_tdp_k => parts.push(format!(
                        "{what} would let a rack at TDP reach {:.1} °C (limit {:.1} °C)",
                        gs.at_tdp,
                        slow - p.margin_tdp_k
                    )),
                    Some((_, _, gs)) if gs.hottest > slow - p.margin_now_k => parts.push(format!(
                        "{what} would take the hottest GPU to {:.1} °C (limit {:.1} °C)",
                        gs.hottest,
                        slow - p.margin_now_k
                    )),
                    Some(_) => parts.push(format!(
                        "{what} is allowed but predicted to cost more ({})",
                        if has_tanks {
                            "pumps and fans, or dies above the boiling point"
                        } else {
                            "die leakage and lost speed outweigh the cooling saved"
                        }
                    )),
                    None if what == "less flow" && flows.iter().all(|q| *q >= chosen.cdu_flow_frac - 1e-9) => {
                        parts.push(format!("{what}: at the end of the range tried"))
                    }
                    None if what != "less flow" && supplies.iter().all(|s| *s <= chosen.cdu_supply_c + 1e-9) => {
                        parts.push(format!("{what}: at the end of the range tried"))
                    }
                    None => parts.push(format!("{what}: not among this plan's candidates")),
                }
            }
            parts.join("; ")
        };
        reasons.push(format!("binding: {binding}"));
        if hot_refused + tdp_refused > 0 {
            reasons.push(format!(
                "{n} CDU candidates, {hot_refused} refused for the hottest GPU at today's load, {tdp_refused} for a rack at TDP"
            ));
        }
        if tank_refused > 0 {
            reasons.push(if p.tank_heat_memory_s > 0.0 {
                format!(
                    "{n} condenser-water candidates, {tank_refused} refused because a tank would run its pool above the {:.0} % of relief pressure allowed at the heat it is planned at, or above {:.0} % at its design heat",
                    p.tank_pressure_frac * 100.0,
                    p.tank_full_load_frac * 100.0
                )
            } else {
                format!(
                    "{n} condenser-water candidates, {tank_refused} refused because a tank at its design heat would run its pool above the {:.0} % of relief pressure allowed",
                    p.tank_pressure_frac * 100.0
                )
            });
        }
        if let Some(tm) = b.tanks.as_ref().filter(|_| has_tanks) {
            reasons.push(tm.describe());
            reasons.extend(tm.describe_heat(p.tank_full_load_frac));
        }
        if beyond_fans > 0 {
            reasons.push(format!(
                "{beyond_fans} candidates not taken: colder facility water than the setpoint in force that the dry coolers' data sheet says needs more than their fans' full speed, with no trim chiller to take the rest"
            ));
        }
        if implausible > 0 {
            reasons.push(format!(
                "{implausible} candidates not taken: the cooling model predicted less than 30 % of today's cooling power for them (outside what it has learned)"
            ));
        }
        if n_assist > 0 && p.choose_rejection_mode && !modes_ready && !probe_on {
            reasons.push(format!(
                "heat-rejection mode left to the firmware (auto): {}",
                if cm.air_n.iter().any(|&n| n < MODE_MIN_SAMPLES) {
                    format!(
                        "choosing dry or adiabatic needs the air model's samples of both states of the assist, {MODE_MIN_SAMPLES} each (have {} dry, {} adiabatic)",
                        cm.air_n[0], cm.air_n[1]
                    )
                } else if assist_now.is_none() {
                    "the halls' assist is not in one state".to_string()
                } else {
                    "the air model is not fitted yet (it is refitted with the twin, every six hours)".to_string()
                }
            ));
        }
        if let Some((c, pr, lim)) = tank_over {
            reasons.push(format!(
                "tank {c} is at {pr:.1} kPa above atmospheric at today's load, above the {lim:.1} kPa the plan allows at design heat: the condenser model reads it too cold, so only colder condenser water or more flow is tried until the pressure is back"
            ));
        }
        if chiller_running && !fac_short {
            reasons.push("the trim chiller runs: no colder facility water is asked for".into());
        }
        if fac_short {
            reasons.push(format!(
                "facility water at {fs_now:.1} °C is not reaching its {f_keep:.1} °C setpoint: nothing colder is asked for"
            ));
        }
        // The load over the horizon: the forecast's mean for the hour against today's reading
        // scales the predicted powers (the choice itself is made at today's load).
        let load_forecast = b.forecaster.as_ref().and_then(|f| {
            let h = &b.load;
            let k = h.vals.len().checked_sub(1)?;
            let fc = f.forecast(&h.vals, k, h.t0_s + k as f64 * h.step_s, &|_, _| Exogenous::default());
            let p50: Vec<f64> = fc.iter().flatten().map(|x| x.p50).filter(|v| v.is_finite()).collect();
            let last = fc.last().copied().flatten()?;
            (p50.len() == LOAD_HORIZONS_S.len()).then(|| LoadForecast {
                it_now_kw: it_now,
                it_last_5min_kw: h.vals[k],
                it_next_hour_kw: p50.iter().sum::<f64>() / p50.len() as f64,
                it_1h_p50_kw: last.p50,
                it_1h_p90_kw: last.p90,
            })
        });
        let scale = load_forecast
            .map(|lf| lf.it_next_hour_kw / it_now.max(1e-9))
            .filter(|r| r.is_finite() && (0.5..=1.5).contains(r));
        // Power and work scale together (the load is the jobs'), all but a heat-reuse heat pump,
        // which delivers what district heating asks for: PUE and energy per unit of work are
        // recomputed at the forecast load.
        let at_load = |x: PlanPrediction| match scale {
            Some(r) => {
                let facility_kw = (x.facility_kw - x.heat_pump_kw) * r + x.heat_pump_kw;
                let (it_kw, work) = (x.it_kw * r, x.work_gpu_s_per_s * r);
                PlanPrediction {
                    facility_kw,
                    it_kw,
                    cooling_kw: x.cooling_kw * r,
                    pue: facility_kw / it_kw.max(1e-9),
                    work_gpu_s_per_s: work,
                    kwh_per_gpu_h: facility_kw / work.max(1e-9),
                    ..x
                }
            }
            None => x,
        };
        let (pred, keep) = (at_load(pred), keep.map(at_load));
        match (load_forecast, scale) {
            (Some(lf), Some(_)) => reasons.push(format!(
                "load forecast: site IT {:.0} kW over the next hour (metered now {:.0} kW, last 5 minutes {:.0} kW; in an hour p50 {:.0}, p90 {:.0} kW): the plan's predicted powers are at that load (the comparisons above at today's)",
                lf.it_next_hour_kw, lf.it_now_kw, lf.it_last_5min_kw, lf.it_1h_p50_kw, lf.it_1h_p90_kw
            )),
            (Some(lf), None) => reasons.push(format!(
                "load forecast of {:.0} kW for the next hour is more than half off today's {:.0} kW: not used, the predicted powers are at today's load",
                lf.it_next_hour_kw, lf.it_now_kw
            )),
            (None, _) if b.forecast_note.is_some() && b.forecaster.is_none() => {
                reasons.extend(b.forecast_note.clone().map(|n| format!("{n}: the predicted powers are at today's load")))
            }
            (None, _) if b.forecaster.is_some() => reasons.push(
                "load forecast unavailable (the last 5 minutes or the lags it needs have no good IT reading): the predicted powers are at today's load".into(),
            ),
            (None, _) => reasons.push(
                "no load forecast yet (it needs a day and a half of load history): the predicted powers are at today's load".into(),
            ),
        }
        if b.forecaster.is_some() {
            reasons.extend(b.forecast_note.clone());
        }
        self.held = Some(chosen);
        self.chiller_gap_on = chiller_gap_on;
        // Placement: racks with the most headroom at TDP first (tanks: the coolest predicted
        // pool at design heat under the chosen condenser water, i.e. the most condenser to spare).
        let mut order: Vec<(f64, u32)> = (0..model.racks())
            .map(|r| {
                let c = model.rack_cdu(r);
                let q = chosen.cdu_flow_frac.max(0.05);
                let tank_pool = b.tanks.as_ref().and_then(|tm| {
                    let pool = |kw: f64| tm.pool_c(c, chosen.cdu_supply_c, q, l.cdus[c].flow_design_lpm, kw);
                    let heat = m.cdus[c].heat_kw.value;
                    let at_design = pool(heat.max(b.design_load_kw[c]))?;
                    if p.tank_heat_memory_s > 0.0 {
                        // Planned below design heat: first the tanks with the most heat to
                        // spare before they pass the heat they are planned at.
                        let planned = tm.plan_kw.get(c).copied().unwrap_or(f64::NAN).max(heat);
                        Some(at_design + pool(heat)? - pool(planned)?)
                    } else {
                        Some(at_design)
                    }
                });
                let key = tank_pool.unwrap_or_else(|| {
                    let f = model.rack_fit(r);
                    chosen.cdu_supply_c + f[0] + b.tdp_w * (f[1] + f[2] * q.powf(-0.8))
                });
                (key, r as u32)
            })
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        let plan = EnergyPlan {
            t_s: input.now_s,
            policy: self.name().into(),
            status: "optimised".into(),
            horizon_s: p.horizon_s,
            setpoints: Some(chosen),
            predicted: Some(pred),
            keep,
            power_caps: "none planned: no budget or thermal limit needs one".into(),
            placement_first: order.iter().take(10).map(|x| x.1).collect(),
            binding,
            candidates: n,
            reasons: reasons.clone(),
            load_forecast,
            write_allowance,
        };
        Some(Decision {
            setpoints: plan_setpoints(l, &chosen),
            power_limits: Vec::new(),
            placement: Some(PlacementAdvice {
                rack_order: order.iter().map(|x| x.1).collect(),
            }),
            reasons,
            plan: Some(plan),
        })
    }
}

impl Policy for Coordinated {
    fn tank_pressure_frac(&self) -> Option<f64> {
        Some(self.params.tank_pressure_frac)
    }

    fn name(&self) -> &'static str {
        if self.params.choose_rejection_mode {
            "coordinated"
        } else {
            "coordinated-auto"
        }
    }

    fn label(&self) -> String {
        let d = CoordinatedParams::default();
        let mut s = self.name().to_string();
        if self.params.write_cost_kwh != d.write_cost_kwh {
            s.push_str(&format!(":write-kwh={}", self.params.write_cost_kwh));
        }
        if self.params.write_amortise_max_s != d.write_amortise_max_s {
            s.push_str(&format!(":write-hold-h={}", self.params.write_amortise_max_s / 3600.0));
        }
        if self.params.write_budget_per_cdu_week != d.write_budget_per_cdu_week {
            s.push_str(&format!(":write-budget={}", self.params.write_budget_per_cdu_week));
        }
        if self.params.facility_write_budget_per_hall_week != d.facility_write_budget_per_hall_week {
            s.push_str(&format!(
                ":facility-write-budget={}",
                self.params.facility_write_budget_per_hall_week
            ));
        }
        if self.params.settle_s != d.settle_s {
            s.push_str(&format!(":settle-h={}", self.params.settle_s / 3600.0));
        }
        if self.params.ahead_s != d.ahead_s {
            s.push_str(&format!(":ahead-h={}", self.params.ahead_s / 3600.0));
        }
        if self.params.ahead_two_stage != d.ahead_two_stage {
            s.push_str(&format!(
                ":ahead-stages={}",
                if self.params.ahead_two_stage { 2 } else { 1 }
            ));
        }
        if self.params.probe_assist_s != d.probe_assist_s {
            s.push_str(&format!(":probe-h={}", self.params.probe_assist_s / 3600.0));
        }
        if self.params.mode_return_s != d.mode_return_s {
            s.push_str(&format!(":mode-return-h={}", self.params.mode_return_s / 3600.0));
        }
        if self.params.fac_regret_s != d.fac_regret_s {
            s.push_str(&format!(":regret-h={}", self.params.fac_regret_s / 3600.0));
        }
        if self.params.chiller_gap_margin_k != d.chiller_gap_margin_k {
            s.push_str(&format!(":chiller-margin-k={}", self.params.chiller_gap_margin_k));
        }
        if self.params.tank_pressure_frac != d.tank_pressure_frac {
            s.push_str(&format!(":tank-pressure-frac={}", self.params.tank_pressure_frac));
        }
        if self.params.tank_heat_memory_s != d.tank_heat_memory_s {
            s.push_str(&format!(":tank-heat-h={}", self.params.tank_heat_memory_s / 3600.0));
        }
        if self.params.tank_full_load_frac != d.tank_full_load_frac {
            s.push_str(&format!(":tank-full-frac={}", self.params.tank_full_load_frac));
        }
        s
    }

    fn bind(&mut self, site: &Site, topo: &Topology) {
        let np = Nameplate::from_site(site);
        let mut approach_k = Vec::new();
        let mut design_load_kw = Vec::new();
        for c in &topo.cdus {
            let spec = &topo.hall_spec(site, c.hall).cdu;
            approach_k.push(spec.hx_design_approach_k);
            design_load_kw.push(spec.design_load_kw);
        }
        let tanks = TankModel::bind(
            site,
            topo,
            self.params.tank_pressure_frac,
            self.params.tank_full_load_frac,
            self.params.tank_heat_memory_s,
        );
        let heat_pumps = (0..topo.halls.len())
            .map(|h| {
                topo.hall_spec(site, h)
                    .facility
                    .heat_reuse
                    .as_ref()
                    .map(HeatPumpPlate::from)
            })
            .collect();
        // Pads' nameplate effectiveness (the mean over halls that have them).
        let mut cooling = CoolingModel::new();
        cooling.assist_eff = pads_effectiveness(site, topo);
        cooling.dry_curve = DryCoolerCurve::from_site(site, topo);
        cooling.air_curve = AirHandlerCurve::from_site(site, topo);
        cooling.trim_chiller = TrimChillerCurve::from_site(site, topo);
        cooling.no_trim_chiller = no_trim_chiller(site, topo);
        let fac = FacilityModel::with_assist_effectiveness(cooling.assist_eff.unwrap_or(0.0));
        self.bound = Some(Box::new(Bound {
            cooling,
            twin: Twin::new(np, TwinConfig::default()),
            fac,
            model: None,
            last_fit_s: f64::NEG_INFINITY,
            gpu: site.gpu.clone(),
            tdp_w: site.gpu.tdp_w,
            approach_k,
            design_load_kw,
            tanks,
            heat_pumps,
            refit_note: None,
            fac_seen: None,
            // Held over up to an hour of empty steps: a slow loop of up to an hour leaves them.
            load: LoadHistory::new(LOAD_STEP_S, (8.0 * 86_400.0 / LOAD_STEP_S) as usize)
                .with_hold((3600.0 / LOAD_STEP_S) as usize),
            forecaster: None,
            forecast_note: None,
            weather: WeatherLog::default(),
        }));
        let gc = GovernorConfig::default();
        self.governor = Some(BudgetGovernor::new(&site.gpu, topo, gc).with_electrical(&site.electrical));
    }

    fn decide(&mut self, input: &PolicyInput<'_>) -> Decision {
        let mut d = self.slow(input);
        if let (Some(plan), Some(g)) = (d.plan.as_mut(), &self.governor) {
            plan.power_caps = g.status().describe();
        }
        d
    }

    fn fast(&mut self, input: &PolicyInput<'_>) -> FastDecision {
        match self.governor.as_mut() {
            Some(g) => g.tick(input),
            None => FastDecision::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlantLimits;
    use coolplane_core::signals::{CduMeasurement, RackMeasurement, Reading};
    use coolplane_core::site::builtin_site;

    fn image(topo: &Topology, t: f64) -> Measurements {
        let mut m = Measurements {
            t_s: t,
            racks: vec![
                RackMeasurement {
                    gpu_temp_max_c: Reading::good(70.0, t),
                    ..Default::default()
                };
                topo.racks.len()
            ],
            cdus: vec![
                CduMeasurement {
                    valve_pct: Reading::good(50.0, t),
                    supply_temp_c: Reading::good(40.0, t),
                    ..Default::default()
                };
                topo.cdus.len()
            ],
            ..Default::default()
        };
        m.gpus.t_s = t;
        m
    }

    /// The plan asks for dry and the facility water runs more than 2 K above its setpoint: the
    /// policy gives dry up at once (the plan in force asks for auto, as the envelope would), keeps
    /// where it gave out, says so in the next plan, and holds dry back for `mode_return_s`; at
    /// 1.9 K over it does nothing. The remembered give-out blocks dry at the same or a smaller
    /// approach at as much load or more, and not at a larger approach or a lighter load.
    #[test]
    fn the_dry_coolers_giving_out_is_learned_and_dry_is_not_asked_for_again_there() {
        use coolplane_core::signals::FacilityMeasurement;
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let mut cur = limits.design_setpoints();
        cur.facilities = vec![30.0; cur.facilities.len()];
        let t = 80.0 * 3600.0;
        let run = |water_c: f64| {
            let mut img = image(&topo, t);
            img.meter.it_power_kw = Reading::good(14_000.0, t);
            img.facilities = vec![
                FacilityMeasurement {
                    supply_temp_c: Reading::good(water_c, t),
                    outdoor_dry_bulb_c: Reading::good(36.0, t),
                    outdoor_wet_bulb_c: Reading::good(19.0, t),
                    ..Default::default()
                };
                cur.facilities.len()
            ];
            let mut p = Coordinated {
                held: Some(PlanSetpoints {
                    cdu_supply_c: 36.0,
                    cdu_flow_frac: 0.8,
                    facility_supply_c: 30.0,
                    rejection_mode: RejectionMode::Dry,
                }),
                ..Default::default()
            };
            p.watch_dry(&PolicyInput {
                now_s: t,
                image: &img,
                limits: &limits,
                topology: &topo,
                current: &cur,
            });
            p
        };
        let holding = run(31.9);
        assert_eq!(holding.held.unwrap().rejection_mode, RejectionMode::Dry);
        assert!(holding.dry_gave_out.is_empty() && holding.dry_note.is_none() && holding.mode_left.is_none());

        let p = run(32.3);
        assert_eq!(p.held.unwrap().rejection_mode, RejectionMode::Auto);
        assert_eq!(p.mode_left, Some((RejectionMode::Dry, t)));
        let g = p.dry_gave_out[0];
        assert!((g.approach_k - (30.0 - 36.0)).abs() < 1e-9 && (g.it_kw - 14_000.0).abs() < 1e-9);
        let note = p.dry_note.as_deref().unwrap();
        assert!(
            note.contains("dry gave out at 80.0 h") && note.contains("32.3 °C"),
            "{note}"
        );
        // Blocked: the same approach, a smaller one, up to 1 K larger, at as much load or more.
        assert!(g.blocks(-6.0, 14_000.0) && g.blocks(-9.0, 15_000.0) && g.blocks(-5.1, 13_400.0));
        // Not blocked: 1 K larger approach (warmer water or cooler air), or 5 % less load.
        assert!(!g.blocks(-5.0, 14_000.0) && !g.blocks(-6.0, 13_300.0));
    }

    /// The guard where dry coolers have no trim chiller (supernode-2pic: 1,300 kW per hall at a
    /// 5 K approach and 8 K range at full speed): at the design heat, facility water 3 K above
    /// the dry air needs more than full speed and is refused; 6 K above it is not; the same
    /// 3 K with the assist on (the pads cool the air 8 K) is not; auto follows the assist as it
    /// is. A site with a trim chiller (hall-10k) never refuses.
    #[test]
    fn colder_water_than_the_fans_can_make_is_refused_only_without_a_trim_chiller() {
        let site = builtin_site("supernode-2pic").unwrap();
        let topo = Topology::new(&site);
        assert!(no_trim_chiller(&site, &topo));
        let mut cm = CoolingModel::new();
        cm.no_trim_chiller = true;
        cm.dry_curve = DryCoolerCurve::from_site(&site, &topo);
        cm.assist_eff = pads_effectiveness(&site, &topo);
        assert!(cm.dry_curve.is_some() && cm.assist_eff.is_some());
        let halls = topo.halls.len() as f64;
        let w = FacilityWater {
            c_w_kw_k: halls * 1300.0 / 8.0,
            rise_k: 8.0,
        };
        let air = (30.0, 20.0);
        assert!(cm.beyond_full_speed_unchilled(33.0, w, RejectionMode::Dry, None, air));
        assert!(!cm.beyond_full_speed_unchilled(36.0, w, RejectionMode::Dry, None, air));
        assert!(!cm.beyond_full_speed_unchilled(33.0, w, RejectionMode::Adiabatic, None, air));
        assert!(cm.beyond_full_speed_unchilled(33.0, w, RejectionMode::Auto, Some(false), air));
        assert!(!cm.beyond_full_speed_unchilled(33.0, w, RejectionMode::Auto, Some(true), air));
        // Half the heat at the same flow: 3 K is within the fans' reach.
        let half = FacilityWater { rise_k: 4.0, ..w };
        assert!(!cm.beyond_full_speed_unchilled(33.0, half, RejectionMode::Dry, None, air));
        // With a trim chiller behind the dry coolers the chiller takes the rest.
        cm.no_trim_chiller = false;
        assert!(!cm.beyond_full_speed_unchilled(33.0, w, RejectionMode::Dry, None, air));
        let hall = builtin_site("hall-10k").unwrap();
        assert!(!no_trim_chiller(&hall, &Topology::new(&hall)));
    }

    /// A deterministic stream of uniform numbers in [0, 1) (64-bit LCG, top 53 bits).
    fn uniform(seed: u64) -> impl FnMut() -> f64 {
        let mut k = seed;
        move || {
            k = k
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (k >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A snapshot of one hall for the air model: IT load, facility water (supply, rise, flow),
    /// outdoor air (dry and wet bulb, assist on) and fans + chillers metered as `kw`.
    fn air_image(
        topo: &Topology,
        t: f64,
        it: f64,
        (fs, rise, flow): (f64, f64, f64),
        (db, wb, on): (f64, f64, bool),
        kw: f64,
    ) -> Measurements {
        use coolplane_core::signals::FacilityMeasurement;
        let mut img = image(topo, t);
        img.meter.it_power_kw = Reading::good(it, t);
        img.facilities = vec![FacilityMeasurement {
            supply_temp_c: Reading::good(fs, t),
            return_temp_c: Reading::good(fs + rise, t),
            fan_power_kw: Reading::good(kw, t),
            chiller_power_kw: Reading::good(0.0, t),
            pump_power_kw: Reading::good(40.0, t),
            flow_lpm: Reading::good(flow, t),
            outdoor_dry_bulb_c: Reading::good(db, t),
            outdoor_wet_bulb_c: Reading::good(wb, t),
            adiabatic_on: on,
            ..Default::default()
        }];
        for c in img.cdus.iter_mut() {
            c.return_temp_c = Reading::good(50.0, t);
        }
        img
    }

    /// The air model near the fans' full speed. Samples from a week whose coil air stays 6–14 K
    /// below the facility water's setpoint, from dry coolers whose fans draw 10 % more than their
    /// data sheet says (plus an air-handler chiller that follows the facility water): asked 2 K
    /// from the setpoint, where the fans run near full speed, the model with the data sheet's
    /// curve predicts within a tenth of the fans' power; the same samples on the hinges alone
    /// (the features less the curve's, fitted the same way) under-predict by more than a third
    /// of it.
    #[test]
    fn the_air_model_follows_the_fans_to_full_speed_beyond_its_samples() {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let curve = DryCoolerCurve::from_site(&site, &topo).unwrap();
        let mut cm = CoolingModel::new();
        cm.assist_eff = Some(0.8);
        cm.dry_curve = Some(curve);
        // Fans + chillers as the plant draws them: c_w from the flow, heat = c_w × rise.
        let truth = |it: f64, air: f64, fs: f64, flow: f64, rise: f64| {
            let w = FacilityWater::new(flow, rise);
            let (fans, beyond) = curve.fans_kw(w.c_w_kw_k * rise, fs + rise - air, w.c_w_kw_k);
            1.1 * fans + beyond / 4.0 + 0.0005 * it * (fs - 15.0).max(0.0)
        };
        let mut hinges = Samples::new(N_AIR - 3, 20_000);
        let bare = CoolingModel::new();
        let mut next = uniform(0u64);
        for i in 0..2_000 {
            let t = i as f64 * 60.0;
            let on = i % 2 == 1;
            let it = 11_000.0 + 4_000.0 * next();
            let fs = 24.0 + 10.0 * next();
            let rise = 10.0 + 6.0 * next();
            let flow = it / FacilityWater::new(1.0, rise).c_w_kw_k / rise;
            let x = -14.0 + 8.0 * next();
            let (db, wb) = if on {
                // Coil air = db − 0.8 (db − wb) with wb 8 K below db.
                (fs + x + 6.4, fs + x - 1.6)
            } else {
                (fs + x, fs + x - 8.0)
            };
            let air = coil_air_c(db, wb, 0.8, on);
            let kw = truth(it, air, fs, flow, rise);
            cm.observe(&air_image(&topo, t, it, (fs, rise, flow), (db, wb, on), kw));
            let xf = air_features(&bare, it, db, air, fs, FacilityWater::new(flow, rise));
            hinges.push(&xf[..N_AIR - 3], kw);
        }
        cm.fit_air();
        let fit = cm
            .rej_air_fit
            .as_ref()
            .expect("the air model fits on both states of the assist");
        let hinge_fit = hinges.fit(1e-4).unwrap();
        let (it, fs, rise) = (14_000.0, 30.0, 13.0);
        let flow = it / FacilityWater::new(1.0, rise).c_w_kw_k / rise;
        let air = fs - 2.0;
        let w = FacilityWater::new(flow, rise);
        let want = truth(it, air, fs, flow, rise);
        let x = air_features(&cm, it, air, air, fs, w);
        let with_curve = air_predict(fit, &x);
        let alone = hinge_fit.predict(&x[..N_AIR - 3]);
        // The fans' part of it (the chiller's, 0.0005 × IT × 15 K, aside).
        let fans = want - 0.0005 * it * (fs - 15.0);
        assert!(fans > 250.0, "the fans near full speed there: {fans} kW");
        assert!(
            (with_curve - want).abs() < 0.1 * fans,
            "with the curve {with_curve} kW against {want}"
        );
        assert!(alone < want - fans / 3.0, "the hinges alone {alone} kW against {want}");
    }

    /// The air handlers' chiller told apart from the fans. Samples from weeks in which the
    /// facility water follows the outdoor air (2 ± 1.5 K above it, as a policy holds it), the
    /// meters drawing the dry coolers' fans and an air-handler chiller on 8 % of the heat: asked
    /// what 4 K colder water (30 → 26 °C) saves in 25 °C air with the pads on (17 kW: the
    /// chiller's saving less the fans' extra), the model with the air handlers' curve answers
    /// within a fifth of it; without that curve (the same features less that one, fitted the
    /// same way, on the meters less the fans' curve) the hinges carry the chiller's rise with the
    /// outdoor air as a rise with the approach and miss by more than half (40 kW).
    #[test]
    fn the_air_model_tells_the_air_handlers_chiller_from_the_fans() {
        use coolplane_twin::whatif::AirHandlerCurve;
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let mut cm = CoolingModel::new();
        cm.assist_eff = Some(0.8);
        cm.dry_curve = DryCoolerCurve::from_site(&site, &topo);
        cm.air_curve = AirHandlerCurve::from_site(&site, &topo);
        let (fan_curve, air_curve) = (cm.dry_curve.unwrap(), cm.air_curve.unwrap());
        let truth = |it: f64, db: f64, air: f64, fs: f64, flow: f64, rise: f64| {
            let w = FacilityWater::new(flow, rise);
            let (fans, beyond) = fan_curve.fans_kw(w.c_w_kw_k * rise, fs + rise - air, w.c_w_kw_k);
            fans + beyond / 4.0 + 0.08 * it * air_curve.kw_per_kw_air(fs, db)
        };
        let mut without = Samples::new(N_AIR - 1, 20_000);
        let mut next = uniform(7u64);
        for i in 0..2_000 {
            let t = i as f64 * 60.0;
            let on = i % 2 == 1;
            let it = 11_000.0 + 4_000.0 * next();
            let db = 15.0 + 20.0 * next();
            let wb = db - 6.0;
            let fs = db + 0.5 + 3.0 * next();
            let rise = 10.0 + 6.0 * next();
            let flow = it / FacilityWater::new(1.0, rise).c_w_kw_k / rise;
            let air = coil_air_c(db, wb, 0.8, on);
            let kw = truth(it, db, air, fs, flow, rise);
            cm.observe(&air_image(&topo, t, it, (fs, rise, flow), (db, wb, on), kw));
            let x = air_features(&cm, it, db, air, fs, FacilityWater::new(flow, rise));
            let mut xw = x[..N_AIR - 1].to_vec();
            xw[N_AIR - 2] = 0.0;
            without.push(&xw, air_target(&x, kw));
        }
        cm.fit_air();
        let fit = cm
            .rej_air_fit
            .as_ref()
            .expect("the air model fits on both states of the assist");
        let without = without.fit(1e-4).unwrap();
        let (it, db, rise) = (14_000.0, 25.0, 13.0);
        let air = coil_air_c(db, db - 6.0, 0.8, true);
        let flow = it / FacilityWater::new(1.0, rise).c_w_kw_k / rise;
        let w = FacilityWater::new(flow, rise);
        let at = |fs: f64| {
            let x = air_features(&cm, it, db, air, fs, w);
            let mut xw = x[..N_AIR - 1].to_vec();
            xw[N_AIR - 2] = 0.0;
            (
                truth(it, db, air, fs, flow, rise),
                air_predict(fit, &x),
                without.predict(&xw) + x[N_AIR - 1],
            )
        };
        let ((t1, m1, n1), (t0, m0, n0)) = (at(30.0), at(26.0));
        let (want, with_curve, alone) = (t1 - t0, m1 - m0, n1 - n0);
        assert!(want > 10.0, "4 K colder water saves there: {want} kW");
        assert!(
            (with_curve - want).abs() < 0.2 * want,
            "with the curve {with_curve} kW against {want}"
        );
        assert!(
            (alone - want).abs() > 0.5 * want,
            "without it {alone} kW against {want}"
        );
    }

    /// hall-10k's cooling model with only the dry coolers' and the trim chiller's data sheets,
    /// and its facility water carrying 14 MW with a 15 K rise (and that rise).
    fn trim_model() -> (CoolingModel, FacilityWater, f64) {
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let mut cm = CoolingModel::new();
        cm.dry_curve = DryCoolerCurve::from_site(&site, &topo);
        cm.trim_chiller = TrimChillerCurve::from_site(&site, &topo);
        let (it, rise) = (14_000.0, 15.0);
        (
            cm,
            FacilityWater::new(it / FacilityWater::new(1.0, rise).c_w_kw_k / rise, rise),
            rise,
        )
    }

    /// The trim chiller's floor: water the dry coolers' fans can make at full speed costs no
    /// compressor work; water colder than that, in hot air, costs the trim chiller's data-sheet
    /// power for the heat left beyond the fans, more the colder the water; none without a trim
    /// chiller or without the dry coolers' sheet.
    #[test]
    fn the_trim_chillers_floor_prices_water_the_dry_coolers_cannot_make() {
        let (mut cm, w, rise) = trim_model();
        let (curve, chiller) = (cm.dry_curve.unwrap(), cm.trim_chiller.unwrap());
        // 32 °C water in 20 °C air: within the fans.
        assert_eq!(cm.trim_floor_kw(32.0, w, 20.0, (20.0, 15.0)), 0.0);
        // 21 °C water with the coils' air at 25 °C (38 °C outdoors, the pads on).
        let floor = cm.trim_floor_kw(21.0, w, 25.0, (38.0, 22.0));
        let beyond = curve.fans_kw(w.c_w_kw_k * rise, 21.0 + rise - 25.0, w.c_w_kw_k).1;
        assert!(beyond > 1000.0, "{beyond}");
        assert!((floor - chiller.power_kw(beyond, 21.0, 38.0, 22.0)).abs() < 1e-9);
        assert!(floor > 200.0, "{floor}");
        assert!(cm.trim_floor_kw(19.0, w, 25.0, (38.0, 22.0)) > floor);
        cm.trim_chiller = None;
        assert_eq!(cm.trim_floor_kw(21.0, w, 25.0, (38.0, 22.0)), 0.0);
    }

    /// The mirror of the floor: water warmer than in force never costs more than the meters
    /// less what the trim chiller's data sheet says it saves; no ceiling where the sheet puts no
    /// compressor load on the water in force, for water no warmer, or without a trim chiller.
    #[test]
    fn the_trim_chillers_ceiling_prices_warmer_water_at_the_meters_less_its_saving() {
        let (mut cm, w, _) = trim_model();
        // 23 °C water in force in 42 °C air, the pads on (coils' air 27 °C), 1,200 kW metered.
        let (air_c, out, now) = (27.0, (42.0, 24.0), 1200.0);
        let keep = cm.trim_floor_kw(23.0, w, air_c, out);
        let warmer = cm.trim_floor_kw(30.0, w, air_c, out);
        assert!(keep > warmer && warmer >= 0.0, "{keep} {warmer}");
        let c = cm.trim_ceiling_kw(now, 23.0, w, 30.0, w, air_c, out).unwrap();
        assert!((c - (now - (keep - warmer))).abs() < 1e-9);
        assert!(c < now);
        // Warmer still saves more.
        assert!(cm.trim_ceiling_kw(now, 23.0, w, 33.0, w, air_c, out).unwrap() <= c);
        // Not for water no warmer than in force.
        assert_eq!(cm.trim_ceiling_kw(now, 23.0, w, 23.0, w, air_c, out), None);
        // Not where the sheet has the compressors off at the water in force (within the fans).
        assert_eq!(cm.trim_ceiling_kw(now, 32.0, w, 34.0, w, 20.0, (20.0, 15.0)), None);
        cm.trim_chiller = None;
        assert_eq!(cm.trim_ceiling_kw(now, 23.0, w, 30.0, w, air_c, out), None);
    }

    /// The chillers' margin on the CDUs' approach: on from 0.5 % of the IT power drawn by the
    /// chillers, held until they draw less than 0.25 % (no toggling, and no writes, as the
    /// chillers cycle around the threshold).
    #[test]
    fn the_chillers_margin_on_the_cdu_approach_has_hysteresis() {
        let p = CoordinatedParams::default();
        assert_eq!(cdu_gap_margin(&p, false, 0.0), (false, 1.0));
        assert_eq!(cdu_gap_margin(&p, false, 0.0049), (false, 1.0));
        assert_eq!(cdu_gap_margin(&p, false, 0.005), (true, 3.0));
        assert_eq!(cdu_gap_margin(&p, true, 0.003), (true, 3.0));
        assert_eq!(cdu_gap_margin(&p, true, 0.0024), (false, 1.0));
        // Never less than the plain margin.
        let q = CoordinatedParams {
            facility_gap_margin_k: 4.0,
            ..p
        };
        assert_eq!(cdu_gap_margin(&q, false, 0.01), (true, 4.0));
    }

    /// The persistence forecast of the outdoor air: yesterday's at each hour plus today's
    /// difference, fading; the air now where there is no record.
    #[test]
    fn the_air_ahead_is_yesterdays_corrected_by_todays_difference() {
        let mut w = WeatherLog::default();
        // Yesterday: dry bulb 20 °C at midnight rising 1 K an hour; wet bulb 5 K under it.
        for i in 0..(24 * 6) {
            let t = i as f64 * 600.0;
            w.push(t, 20.0 + t / 3600.0, 15.0 + t / 3600.0);
        }
        // A second sample within the step is not kept; a non-finite one never.
        let n = w.samples.len();
        w.push(23.9 * 3600.0, 99.0, 99.0);
        w.push(f64::NAN, 1.0, 1.0);
        assert_eq!(w.samples.len(), n);
        // Now (a day later, midnight) 3 K warmer than yesterday at this hour.
        let now = 86_400.0;
        let a = w.ahead(now, 23.0, 17.0, 6.0 * 3600.0);
        assert_eq!(a.points.len(), 6);
        assert_eq!(a.points[0], (23.0, 17.0));
        assert_eq!(a.from_record, 5);
        assert!((a.bias_db_k.unwrap() - 3.0).abs() < 1e-9);
        for (k, (db, wb)) in a.points.iter().enumerate().skip(1) {
            let fade = (-(k as f64) * 3600.0 / WEATHER_BIAS_TAU_S).exp();
            assert!((db - (20.0 + k as f64 + 3.0 * fade)).abs() < 1e-9, "{k}: {db}");
            assert!((wb - (15.0 + k as f64 + 2.0 * fade)).abs() < 1e-9, "{k}: {wb}");
        }
        // No horizon: the air now only. No record of yesterday: the air now for every hour.
        assert_eq!(w.ahead(now, 23.0, 17.0, 0.0).points, vec![(23.0, 17.0)]);
        let b = WeatherLog::default().ahead(now, 23.0, 17.0, 4.0 * 3600.0);
        assert_eq!(b.points, vec![(23.0, 17.0); 4]);
        assert_eq!((b.from_record, b.bias_db_k), (0, None));
        // The wet bulb is never put above the dry bulb by the correction.
        let c = w.ahead(now, 20.0, 19.9, 3.0 * 3600.0);
        assert!(c.points.iter().all(|(d, wb)| wb <= d), "{:?}", c.points);
        // Samples older than two days are dropped.
        w.push(3.0 * 86_400.0, 10.0, 5.0);
        assert!(w.samples.front().unwrap().0 >= 86_400.0 - 1e-9);
    }

    /// Split, the CDUs' writes and the facility's are each held against their own allowance;
    /// not split, all against the one.
    #[test]
    fn a_split_allowance_keeps_the_cdus_writes_off_the_facilitys() {
        // One allowance: every write against it.
        assert!(leaves_enough(Some(26), None, 12, 1));
        assert!(!leaves_enough(Some(24), None, 12, 1));
        assert!(leaves_enough(None, None, 500, 500));
        // Split: the CDUs' writes against theirs, the facility's against its own.
        assert!(leaves_enough(Some(24), Some(Some(2)), 12, 1));
        assert!(!leaves_enough(Some(23), Some(Some(50)), 12, 0));
        assert!(!leaves_enough(Some(24), Some(Some(1)), 0, 1));
        assert!(leaves_enough(Some(0), Some(Some(40)), 0, 20));
        assert!(!leaves_enough(Some(0), Some(Some(40)), 1, 0));
    }

    /// A facility move undone within the window is remembered; a small step or an undo after
    /// the window is not; the memory blocks halfway or further towards where the move went while
    /// the air is as it was, and lapses.
    #[test]
    fn a_facility_move_the_plans_undo_is_not_made_again_while_the_air_is_as_it_was() {
        let mut p = Coordinated::new(CoordinatedParams {
            fac_regret_s: 12.0 * 3600.0,
            ..Default::default()
        });
        let h = 3600.0;
        p.fac_moves.note(61.0 * h, 30.0, 24.0, 31.0);
        assert!(p.fac_moves.regret.is_none());
        p.fac_moves.note(62.25 * h, 24.0, 30.0, 31.5);
        let g = p.fac_moves.regret.expect("an undo within 3 h is remembered");
        assert_eq!((g.from_c, g.to_c, g.dry_bulb_c), (30.0, 24.0, 31.5));
        let hold = 12.0 * h;
        assert!(g.blocks(27.0, 31.5, 63.0 * h, hold), "halfway is refused");
        assert!(
            g.blocks(24.0, 30.0, 63.0 * h, hold),
            "air under 2 K cooler: still refused"
        );
        assert!(!g.blocks(28.0, 31.5, 63.0 * h, hold), "less than halfway is free");
        assert!(
            !g.blocks(27.0, 29.4, 63.0 * h, hold),
            "air more than 2 K cooler frees it"
        );
        assert!(!g.blocks(24.0, 31.5, 74.5 * h, hold), "the memory lapses");
        // The other way: a move to warmer water undone.
        let w = FacRegret {
            t_s: 0.0,
            from_c: 26.0,
            to_c: 30.0,
            dry_bulb_c: 20.0,
        };
        assert!(w.blocks(28.0, 20.0, 1.0, hold) && w.blocks(31.0, 21.9, 1.0, hold));
        assert!(!w.blocks(27.0, 20.0, 1.0, hold) && !w.blocks(30.0, 22.1, 1.0, hold));
        // An undo after the window, or of a 1 K step, is not remembered.
        let mut q = Coordinated::new(p.params);
        q.fac_moves.note(0.0, 30.0, 26.0, 25.0);
        q.fac_moves.note(3.5 * h, 26.0, 30.0, 25.0);
        assert!(q.fac_moves.regret.is_none());
        q.fac_moves.note(4.0 * h, 30.0, 29.0, 25.0);
        q.fac_moves.note(4.5 * h, 29.0, 30.0, 25.0);
        assert!(q.fac_moves.regret.is_none());
        // Going back again after an undo is a new move, not a mistake in the other direction:
        // the memory stays the first one's.
        let mut u = FacMoves::default();
        u.note(0.0, 30.0, 24.0, 30.0);
        u.note(0.5 * h, 24.0, 30.0, 30.0);
        u.note(1.0 * h, 30.0, 24.0, 27.0);
        assert_eq!(u.regret.map(|g| (g.from_c, g.to_c)), Some((30.0, 24.0)));
        assert_eq!(u.last, Some((1.0 * h, 30.0, 24.0)));
        // Holding is not a move: the last move stays the one an undo is judged against.
        q.fac_moves.note(5.0 * h, 30.0, 27.0, 25.0);
        q.fac_moves.note(5.5 * h, 27.0, 27.0, 25.0);
        q.fac_moves.note(6.0 * h, 27.0, 30.0, 25.0);
        assert!(q.fac_moves.regret.is_some());
    }

    /// A plan that keeps the setpoints in force reads them back as means over the CDUs, off the
    /// last plan's grid value by a rounding error: that is a hold, not a move, and the hold goes
    /// on until the next real move (fails with the targets compared exactly: the first hold
    /// after each move ended a 15-minute "hold").
    #[test]
    fn a_hold_read_back_off_by_a_rounding_error_is_not_a_move() {
        let cap = CoordinatedParams::default().write_amortise_max_s;
        let (mut held, mut hold_h, mut last_move_s) = (None, 0.0, None);
        let design = 1_234.5;
        let grid = PlanSetpoints {
            cdu_supply_c: 38.0,
            cdu_flow_frac: 0.7,
            facility_supply_c: 31.0,
            rejection_mode: RejectionMode::Auto,
        };
        // Twelve CDUs at 70 % of design flow, read back as a mean of fractions.
        let read_back = PlanSetpoints {
            cdu_flow_frac: (0..12).map(|_| (0.7 * design) / design).sum::<f64>() / 12.0,
            ..grid
        };
        assert_ne!(
            read_back.cdu_flow_frac, grid.cdu_flow_frac,
            "the read-back differs in the last bits"
        );
        assert!(read_back.same_target(&grid));
        for other in [
            PlanSetpoints {
                cdu_supply_c: 38.1,
                ..grid
            },
            PlanSetpoints {
                cdu_flow_frac: 0.8,
                ..grid
            },
            PlanSetpoints {
                facility_supply_c: 30.0,
                ..grid
            },
            PlanSetpoints {
                rejection_mode: RejectionMode::Dry,
                ..grid
            },
        ] {
            assert!(!other.same_target(&grid), "{other:?} is a move");
        }
        let h = 3600.0;
        assert!(
            note_target(held, (&mut hold_h, &mut last_move_s), cap, 0.0, grid, true),
            "the first plan is a move"
        );
        held = Some(grid);
        for k in 1..24 {
            assert!(
                !note_target(
                    held,
                    (&mut hold_h, &mut last_move_s),
                    cap,
                    k as f64 * 0.25 * h,
                    read_back,
                    false
                ),
                "hold {k}"
            );
            held = Some(read_back);
        }
        assert_eq!(last_move_s, Some(0.0));
        assert_eq!(hold_h, 0.0, "no hold has ended yet");
        let moved_to = PlanSetpoints {
            cdu_supply_c: 39.0,
            ..grid
        };
        assert!(note_target(
            held,
            (&mut hold_h, &mut last_move_s),
            cap,
            6.0 * h,
            moved_to,
            false
        ));
        assert_eq!(last_move_s, Some(6.0 * h));
        assert!(
            (hold_h - 0.3 * 4.0).abs() < 1e-12,
            "one 6 h hold, capped at 4 h: {}",
            hold_h
        );
    }

    /// The week's write allowance: what is left, and a price that rises as it is used, capped;
    /// none without an allowance (0, NaN); an allowance of less than a write leaves nothing.
    #[test]
    fn the_write_allowance_counts_down_and_raises_the_price_as_it_runs_out() {
        assert_eq!(write_allowance(0.0, 0), (None, 1.0));
        assert_eq!(write_allowance(-1.0, 0), (None, 1.0));
        assert_eq!(write_allowance(0.5, 0), (Some(0), WRITE_PRICE_MAX_MULT));
        assert_eq!(write_allowance(f64::NAN, 3), (None, 1.0));
        assert_eq!(write_allowance(60.0, 0), (Some(60), 1.0));
        assert_eq!(write_allowance(60.0, 30), (Some(30), 4.0));
        assert_eq!(write_allowance(60.0, 45), (Some(15), 16.0));
        // From 90 % of it, and past all of it (moves the limits forced), the price stays 100 ×.
        assert_eq!(write_allowance(60.0, 54), (Some(6), WRITE_PRICE_MAX_MULT));
        assert_eq!(write_allowance(60.0, 57), (Some(3), WRITE_PRICE_MAX_MULT));
        assert_eq!(write_allowance(60.0, 75), (Some(0), WRITE_PRICE_MAX_MULT));
        // A fractional allowance is whole writes, for what is left and for the price.
        assert_eq!(write_allowance(60.9, 0), (Some(60), 1.0));
        assert_eq!(write_allowance(60.9, 30), (Some(30), 4.0));
    }

    #[test]
    fn an_over_pressure_with_nothing_relieving_holds_the_coldest_water_and_fullest_flow() {
        let supplies: Vec<f64> = (26..=41).map(f64::from).collect();
        let flows = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1];
        let sp = |s: f64, q: f64, fac: f64| PlanSetpoints {
            cdu_supply_c: s,
            cdu_flow_frac: q,
            facility_supply_c: fac,
            rejection_mode: RejectionMode::Dry,
        };
        // Already at the coldest and fullest: held there (design would be 38 °C at 100 %).
        let r = relief_setpoints(&supplies, &flows, sp(26.0, 1.1, 22.0), 3.0, 15.0);
        assert_eq!(
            (r.cdu_supply_c, r.cdu_flow_frac, r.facility_supply_c),
            (26.0, 1.1, 22.0)
        );
        assert_eq!(r.rejection_mode, RejectionMode::Auto);
        // Warm water at low flow: the coldest and fullest of the ranges, facility water an
        // approach below the supply.
        let r = relief_setpoints(&supplies, &flows, sp(37.0, 0.5, 33.0), 3.0, 15.0);
        assert_eq!(
            (r.cdu_supply_c, r.cdu_flow_frac, r.facility_supply_c),
            (26.0, 1.1, 23.0)
        );
        // In force colder or fuller than the ranges (an operator's or the guard's): never warmer
        // nor less; the facility water not below its own minimum.
        let r = relief_setpoints(&supplies, &flows, sp(24.0, 1.2, 21.0), 3.0, 21.5);
        assert_eq!(
            (r.cdu_supply_c, r.cdu_flow_frac, r.facility_supply_c),
            (24.0, 1.2, 21.5)
        );
        // No supply candidate at all: the supply in force.
        let r = relief_setpoints(&[], &flows, sp(30.0, 0.8, 26.0), 3.0, 15.0);
        assert_eq!((r.cdu_supply_c, r.cdu_flow_frac), (30.0, 1.1));
    }

    #[test]
    fn writes_are_charged_over_the_hours_setpoints_stand() {
        let (hor, cap) = (3600.0, 4.0 * 3600.0);
        // Moving at every plan (15-minute holds): the charge stays spread over the horizon.
        let mut h = 0.0;
        for _ in 0..20 {
            h = next_hold_h(h, 0.25, cap);
        }
        assert!((write_amortise_h(h, 0.25, hor, cap) - 1.0).abs() < 1e-12);
        // Holding for a day at a time: the mean of the holds reaches the cap, no further.
        let mut h = 0.0;
        for _ in 0..20 {
            h = next_hold_h(h, 24.0, cap);
        }
        assert!(h > 3.99 && h <= 4.0, "{h}");
        assert!((write_amortise_h(h, 0.0, hor, cap) - 4.0).abs() < 1e-2);
        // A hold in progress longer than the mean counts: 3 h so far after short holds.
        assert!((write_amortise_h(0.25, 3.0, hor, cap) - 3.0).abs() < 1e-12);
        // A cap below the horizon leaves the horizon; a cap that is not a number does not panic.
        assert!((write_amortise_h(10.0, 10.0, hor, 600.0) - 1.0).abs() < 1e-12);
        assert_eq!(next_hold_h(1.0, 2.0, -3600.0), 0.7);
        assert!(write_amortise_h(next_hold_h(1.0, 2.0, f64::NAN), 0.5, hor, f64::NAN) >= 1.0);
    }

    fn decide(p: &mut Coordinated, site: &str, t: f64) -> Decision {
        let site = builtin_site(site).unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let cur = limits.design_setpoints();
        let img = image(&topo, t);
        p.decide(&PolicyInput {
            now_s: t,
            image: &img,
            limits: &limits,
            topology: &topo,
            current: &cur,
        })
    }

    /// Until it can predict, the policy runs trim-respond and says why, in its reasons and in a
    /// plan every 15 minutes: unbound (no nameplate), learning, and on a two-phase immersion site.
    #[test]
    fn falls_back_to_trim_respond_and_says_why() {
        let mut unbound = Coordinated::default();
        let d = decide(&mut unbound, "hall-10k", 0.0);
        assert!(d.reasons[0].contains("not bound"), "{:?}", d.reasons);
        let plan = d.plan.expect("a plan at the first tick");
        assert_eq!(plan.status, "fallback");
        // The same setpoints as trim-respond on the same input.
        let mut tr = TrimRespond::default();
        let site = builtin_site("hall-10k").unwrap();
        let topo = Topology::new(&site);
        let limits = PlantLimits::from_site(&site, &topo);
        let cur = limits.design_setpoints();
        let img = image(&topo, 0.0);
        let d_tr = tr.decide(&PolicyInput {
            now_s: 0.0,
            image: &img,
            limits: &limits,
            topology: &topo,
            current: &cur,
        });
        assert_eq!(d.setpoints, d_tr.setpoints);

        let mut learning = Coordinated::default();
        learning.bind(&site, &topo);
        let d = decide(&mut learning, "hall-10k", 0.0);
        assert!(d.reasons[0].contains("still learning"), "{:?}", d.reasons);
        // No plan again before 15 minutes, then one.
        assert!(decide(&mut learning, "hall-10k", 60.0).plan.is_none());
        let p = decide(&mut learning, "hall-10k", 900.0).plan.expect("plan at 15 min");
        assert_eq!(p.status, "fallback");
        assert!(p.binding.contains("learning"));

        let site2 = builtin_site("supernode-2pic").unwrap();
        let topo2 = Topology::new(&site2);
        let mut tanks = Coordinated::default();
        tanks.bind(&site2, &topo2);
        let d = decide(&mut tanks, "supernode-2pic", 0.0);
        assert!(d.reasons[0].contains("still learning"), "{:?}", d.reasons);
    }

    /// The tanks' condenser model, fed skid readings made by the plant's own law (ε-NTU with the
    /// condensing side at the pool temperature; 40 % of the resistance on the water side, as on
    /// `supernode-2pic`; the skid pump's heat in the water): from one flow it errs warm at a
    /// lower flow (as if all the resistance were on the water side) and at a higher one (as if
    /// more flow gained nothing), never cold; once the flow has varied it learns the water-side
    /// slope and predicts the pool at another flow and supply within 0.1 K. Readings that are no
    /// exchange are skipped.
    #[test]
    fn the_tank_condenser_model_learns_the_coil_and_errs_warm_until_the_flow_has_varied() {
        let site = builtin_site("supernode-2pic").unwrap();
        let topo = Topology::new(&site);
        let l = PlantLimits::from_site(&site, &topo);
        let fd = l.cdus[0].flow_design_lpm;
        let (r_c, r_w, pump_kw) = (0.6 / 18.0, 0.4 / 18.0, 0.45);
        // (pool, water out) for condenser water in at `s`, flow fraction `q`, `heat` kW.
        let truth = |s: f64, q: f64, heat: f64| {
            let cw = skid_cw_kw_k(q * fd);
            let eps = 1.0 - (-1.0 / ((r_c + r_w * q.powf(-0.8)) * cw)).exp();
            (s + heat / (eps * cw), s + (heat + pump_kw) / cw)
        };
        let mut tm = TankModel::bind(&site, &topo, 0.2, 0.9, 0.0).expect("tanks");
        assert!(tm.all_tanks());
        let side = tm.tanks[0].expect("CDU 0 is a tank's skid");
        // Novec 649 boils at 49 °C; 2 kPa above atmospheric is about 0.6 K more.
        assert_eq!(side.t_boil_c, 49.0);
        assert!(side.t_limit_c > 49.3 && side.t_limit_c < 50.0, "{}", side.t_limit_c);
        // The boiling curve through its reference point, rising with power.
        assert!((side.superheat_k(side.sh_ref_w) - side.sh_ref_k).abs() < 1e-9);
        assert!(side.superheat_k(100.0) > side.superheat_k(50.0));
        assert!(!tm.ready() && tm.pool_c(0, 38.0, 1.0, fd, 72.0).is_none());
        // Not an exchange: no flow, a pool at the water's temperature, water out above the pool,
        // a rise of a kelvin (sensor offsets would dominate).
        tm.push(0, 38.0, 39.0, 45.0, 0.0, fd, pump_kw);
        tm.push(0, 38.0, 38.2, 38.5, fd, fd, pump_kw);
        tm.push(0, 38.0, 46.0, 45.0, fd, fd, pump_kw);
        tm.push(0, 38.0, 39.0, 48.0, fd, fd, pump_kw);
        assert!(tm.tanks[0].unwrap().r_design.is_none() && tm.sums[0] == 0.0);
        // Every tank at 80 % flow.
        for c in 0..topo.cdus.len() {
            let (pool, out) = truth(36.0, 0.8, 60.0);
            tm.push(c, 36.0, out, pool, 0.8 * fd, fd, pump_kw);
        }
        assert!(tm.ready() && tm.slope().is_none());
        let said = tm.describe();
        assert!(
            said.contains("not learned yet") && said.contains("80–80 % of design flow"),
            "{said}"
        );
        // At the flow seen, the pool at another supply and heat is exact.
        let same = tm.pool_c(0, 34.0, 0.8, fd, 72.0).unwrap();
        assert!((same - truth(34.0, 0.8, 72.0).0).abs() < 0.01, "{same}");
        // At 60 % flow and at design flow: warm, not cold, and not by much.
        for q in [0.6, 1.0] {
            let want = truth(32.0, q, 72.0).0;
            let warm = tm.pool_c(0, 32.0, q, fd, 72.0).unwrap();
            assert!(warm > want + 0.05 && warm < want + 1.5, "at {q}: {warm} vs {want}");
        }
        // Readings at 70–110 % flow: the slope is learned and the prediction comes true.
        for k in 0..100 {
            let q = [0.7, 0.8, 0.9, 1.0, 1.1][k % 5];
            for c in 0..topo.cdus.len() {
                let (pool, out) = truth(35.0, q, 60.0);
                tm.push(c, 35.0, out, pool, q * fd, fd, pump_kw);
            }
        }
        let b = tm.slope().expect("slope once the flow has varied");
        assert!((b - r_w).abs() < 0.02 * r_w, "{b} vs {r_w}");
        let said = tm.describe();
        assert!(
            said.contains("is learned") && said.contains("70–110 % of design flow"),
            "{said}"
        );
        for q in [0.6, 1.0] {
            let want = truth(32.0, q, 72.0).0;
            let got = tm.pool_c(0, 32.0, q, fd, 72.0).unwrap();
            assert!((got - want).abs() < 0.1, "at {q}: {got} vs {want}");
        }
    }

    /// With a memory, a tank is planned at the highest heat it carried over it plus 5 %, never
    /// above its design heat nor below its heat now; at its design heat until the memory has
    /// filled once and while its heat reading is stale; a peak is forgotten once older than the
    /// memory. Without a memory, always at its design heat. The full-load limit is the
    /// saturation temperature of its fraction of the relief pressure.
    #[test]
    fn a_tank_is_planned_at_its_recent_highest_heat_with_a_memory_and_at_design_heat_without() {
        let site = builtin_site("supernode-2pic").unwrap();
        let topo = Topology::new(&site);
        let design = topo.hall_spec(&site, 0).cdu.design_load_kw;
        assert_eq!(design, 72.0);
        let mut none = TankModel::bind(&site, &topo, 0.4, 0.9, 0.0).expect("tanks");
        none.record_heat(0, 0.0, Some(30.0));
        none.record_heat(0, 1e6, Some(30.0));
        assert_eq!(none.plan_kw[0], design);
        assert!(none.describe_heat(0.9).is_none());
        let mut tm = TankModel::bind(&site, &topo, 0.4, 0.9, 3600.0).expect("tanks");
        let side = tm.tanks[0].unwrap();
        assert!(side.t_full_c > side.t_limit_c && (side.p_full_kpa - 9.0).abs() < 1e-9);
        // The first hour: design heat.
        for k in 0..60 {
            let h = if k == 10 { 50.0 } else { 40.0 };
            tm.record_heat(0, k as f64 * 60.0, Some(h));
            assert_eq!(tm.plan_kw[0], design, "minute {k}");
        }
        // Full: the peak of 50 kW (at minute 10) plus 5 %.
        tm.record_heat(0, 3600.0, Some(40.0));
        assert!((tm.plan_kw[0] - 52.5).abs() < 1e-9, "{}", tm.plan_kw[0]);
        // Stale: design heat; fresh again: the memory is kept.
        tm.record_heat(0, 3660.0, None);
        assert_eq!(tm.plan_kw[0], design);
        tm.record_heat(0, 3720.0, Some(40.0));
        assert!((tm.plan_kw[0] - 52.5).abs() < 1e-9);
        // Minute 10's peak is forgotten after an hour: 40 kW plus 5 %.
        tm.record_heat(0, 600.0 + 3600.0 + 60.0, Some(40.0));
        assert!((tm.plan_kw[0] - 42.0).abs() < 1e-9, "{}", tm.plan_kw[0]);
        // At least the heat now, at most design heat.
        tm.record_heat(0, 4400.0, Some(80.0));
        assert_eq!(tm.plan_kw[0], 80.0);
        tm.record_heat(0, 4460.0, Some(70.0));
        assert_eq!(tm.plan_kw[0], design);
        // Other tanks were never read: design heat, and the description says how many are.
        let said = tm.describe_heat(0.9).unwrap();
        assert!(
            said.contains("(design 72 kW; 16 of 16 at it") && said.contains("over the last 1 h plus 5 %"),
            "{said}"
        );
    }

    #[test]
    fn coordinated_is_known_by_name() {
        assert_eq!(crate::by_name("coordinated").unwrap().name(), "coordinated");
        assert_eq!(crate::by_name("coordinated-auto").unwrap().name(), "coordinated-auto");
        assert!(crate::POLICY_NAMES.contains(&"coordinated"));
    }
}
