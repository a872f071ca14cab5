//! Two-phase immersion tanks (plant-model.md §12), hooked into the plant at two points: the GPU
//! kernel sees the tank's boiling pool as its "coolant" and the boiling curve as its "resistance"
//! ([`Immersion::prepare_rack`]), and a tank's condenser-water skid (the CDU slot of the tank)
//! sees the condensing heat as the heat entering its loop ([`Immersion::substep`]). Everything
//! else (the GPU power kernel with leakage, caps, slowdown and shutdown; the skid's pumps, HX and
//! PI loops; facility water and heat rejection) is the plant's own code, so changes there apply
//! to immersion too.
//!
//! # Physics, per tank
//!
//! - **Pool**: the liquid, the submerged hardware and the tank shell are one thermal mass
//!   `C = m_fluid·c_p + C_hardware` at the pool temperature `T_pool`. Vapour above it is
//!   saturated: the tank pressure is `p = max(p_sat(T_pool), p_atm)` (Clausius–Clapeyron,
//!   `coolplane_core::dielectric`); below atmospheric a breather lets air in, so the pool can be
//!   subcooled at 1 atm. Energy: `C·dT_pool/dt = Q_IT − Q_cond − Q_loss − Q_vent`.
//! - **Condenser**: a coil in the vapour space, condensing side isothermal at `T_pool`, so
//!   `Q_cond = ε·C_w·(T_pool − T_w,in)` with `ε = 1 − e^(−UA/C_w)` (ε-NTU at capacity ratio 0;
//!   for small NTU this is `UA·(T_pool − T_w)`). `1/UA = R_cond + R_water·(ṁ_design/ṁ)^0.8`: the
//!   water-side film follows Dittus–Boelter, the condensing film does not depend on the water flow.
//!   The pool is stepped exactly over each loop sub-step (`Q_cond` is linear in `T_pool`).
//!   Condensing less than is boiled raises `T_pool`, the pressure, the saturation temperature
//!   and every die temperature together.
//! - **Relief**: at `relief_gauge_kpa` above atmospheric the relief valve holds the pressure; the
//!   heat the condenser cannot take leaves as vented vapour, `m = Q_vent·Δt / h_fg`, counted as
//!   fluid loss. Seals and breathing lose `seal_loss_kg_per_year · p_vapour / p_atm`.
//! - **Die**: `T_die = T_sat(p) + ΔT_sup(q'') + R_pkg,i·P`, with the nucleate-boiling curve
//!   `q'' ∝ ΔT_sup^n` (Rohsenow's form, n = 3) through the site's reference point. Subcooled
//!   boiling keeps the wall superheat over the saturation temperature at the tank pressure, so a
//!   pool colder than the boiling point does not cool the dies further. The kernel takes
//!   `T_in + P·(R_i + R_flow)`: the curve enters as its tangent at the rack's mean power of the
//!   last step (`ΔT_sup ≈ a + b·P`, `a = ΔT_0·(1 − 1/n)`, `b = ΔT_0/(n·P_0)`), exact at that
//!   power and within about 1 K from idle to TDP for a 100 W, 9 cm² surface, always on the hot
//!   side (a concave curve lies under its tangent).
//! - **Critical heat flux**: each accelerator whose heat flux of the last step exceeded
//!   `chf_enhancement × q_chf,Zuber(p)` dries out: its surface is blanketed by vapour and the
//!   coefficient falls to the film-boiling value, so the die runs away into slowdown and shutdown
//!   (the kernel's limits). It rewets only below Zuber's minimum heat flux (boiling hysteresis).
//!   A tank whose charge falls below `min_fluid_mass_kg` uncovers boards: all of them dry out.
//!
//! # Parameters of `supernode-2pic` and their sources
//!
//! - Fluid data: `coolplane_core::dielectric` (3M product information).
//! - Boiling surface 9 cm² per accelerator (a 30 × 30 mm boiler plate on the lid): 11 W/cm² at
//!   100 W. Superheat 5 K at 10 W/cm² and CHF × 1.6 are those of microporous boiling-enhancement
//!   coatings in fluorinated liquids (Chang & You, Int. J. Heat Mass Transfer 40 (1997) 4437 and
//!   4449: coatings cut the superheat of plain surfaces, 15–20 K near 10 W/cm², by about 80 % and
//!   raise CHF by 50–100 %). Film boiling 250 W/(m²·K): the order Berenson's correlation gives for
//!   fluorocarbons at 100–300 K of superheat.
//! - Package resistance 0.12 K/W, σ 8 %: die-to-lid of a 100 W package (the cold-plate sites'
//!   conduction resistance for the same part).
//! - Condenser UA 18 kW/K: sized so that 72 kW condense at 49 °C with 108 L/min of 38 °C water
//!   (ε ≈ 0.9); 40 % of the resistance on the water side.
//! - Relief 10 kPa, rating 20 kPa gauge, seal and breathing loss 10 kg/year per tank (about 1 %
//!   of the charge): design assumptions of a lightly built sealed tank, not published figures;
//!   the KPI `fluid_loss_kg` makes them visible.

use crate::hx::lag;
use crate::plant::lag_mean_factor;
use coolplane_core::dielectric::{fluid_by_name, DielectricFluid, P_ATM_PA};
use coolplane_core::fluid::{pg25_lpm_to_kg_s, PG25_CP_J_KG_K};
use coolplane_core::signals::{Reading, TankMeasurement};
use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use std::ops::Range;

const SECONDS_PER_YEAR: f64 = 365.0 * 86_400.0;
/// Flow exponent of the water-side film of the condenser coil (Dittus–Boelter).
const WATER_FILM_EXPONENT: f64 = 0.8;
/// Lowest rack power at which the boiling curve is linearised, fraction of TDP.
const TANGENT_MIN_FRAC: f64 = 0.3;

/// Constants of the tanks of one `[[halls]]` entry.
#[derive(Debug, Clone)]
struct TankParams {
    fluid: DielectricFluid,
    c_pool_j_k: f64,
    area_m2: f64,
    sh_ref_k: f64,
    q_ref_w_m2: f64,
    n: f64,
    chf_enh: f64,
    r_film_k_w: f64,
    r_cond_side: f64,
    r_water_design: f64,
    f_design_kg_s: f64,
    t_relief_c: f64,
    leak_kg_s_at_atm: f64,
    charge_kg: f64,
    min_fluid_kg: f64,
    tdp_w: f64,
}

/// State of one tank.
#[derive(Debug, Clone)]
struct Tank {
    p: usize,
    gpus: Range<usize>,
    t_pool_c: f64,
    fluid_kg: f64,
    q_it_w: f64,
    venting: bool,
    dried: u32,
}

/// The two-phase immersion tanks of a site (absent when no hall has `[halls.immersion]`).
#[derive(Debug, Clone)]
pub struct Immersion {
    params: Vec<TankParams>,
    tank_of_cdu: Vec<Option<usize>>,
    tanks: Vec<Tank>,
    r_pkg: Vec<f32>,
    r_eff: Vec<f32>,
    dry: Vec<bool>,
    step_in_j: f64,
    step_cond_j: f64,
    step_vent_j: f64,
    step_leak_j: f64,
    step_lost_kg: f64,
    step_vented_kg: f64,
    step_max_gauge_kpa: f64,
}

/// Fluid and pressure figures of one plant step, summed over tanks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TankStep {
    /// Heat the boards put into the pools, J (rack power of the tanks' racks × time).
    pub heat_in_j: f64,
    /// Heat condensed onto the coils (into the skids' loops), J, from each coil's ε-NTU with its
    /// water inlet and the pool temperature.
    pub condensed_j: f64,
    /// Heat that left as vapour through the relief valves, J (from the pool temperature above
    /// the relief temperature × pool heat capacity).
    pub vented_heat_j: f64,
    /// Heat that left as vapour through seals and breathing, J (leak rate × latent heat).
    pub leak_heat_j: f64,
    /// Fluid lost (relief venting, seals and breathing), kg.
    pub fluid_lost_kg: f64,
    /// Of which vented through the relief valve, kg.
    pub fluid_vented_kg: f64,
    /// Highest tank pressure above atmospheric during the step, kPa.
    pub max_gauge_kpa: f64,
}

impl Immersion {
    /// Tanks of every immersion hall of `site`, with seeded package spread; `None` if the site
    /// has no immersion hall. The spread comes from its own generator (derived from `seed`), so
    /// the plant's other seeded effects do not change when a hall becomes immersion-cooled.
    pub fn new(site: &Site, topo: &Topology, seed: u64) -> Option<Self> {
        if site.halls.iter().all(|h| h.immersion.is_none()) {
            return None;
        }
        let mut idx = vec![None; site.halls.len()];
        let mut params = Vec::new();
        for (i, h) in site.halls.iter().enumerate() {
            let Some(im) = &h.immersion else { continue };
            // Validation guarantees a known fluid.
            let fluid = fluid_by_name(&im.fluid)?;
            let area = im.boiling_area_cm2 * 1e-4;
            let ua = im.condenser_ua_kw_per_k * 1000.0;
            let p_relief = P_ATM_PA + im.relief_gauge_kpa * 1000.0;
            idx[i] = Some(params.len());
            params.push(TankParams {
                fluid,
                c_pool_j_k: im.fluid_mass_kg * fluid.liquid_cp_j_kg_k + im.hardware_heat_capacity_kj_per_k * 1000.0,
                area_m2: area,
                sh_ref_k: im.superheat_ref_k,
                q_ref_w_m2: im.superheat_ref_w_per_cm2 * 1e4,
                n: im.boiling_exponent,
                chf_enh: im.chf_enhancement,
                r_film_k_w: 1.0 / (im.film_boiling_w_per_m2_k * area),
                r_cond_side: (1.0 - im.condenser_water_side_frac) / ua,
                r_water_design: im.condenser_water_side_frac / ua,
                f_design_kg_s: pg25_lpm_to_kg_s(h.cdu.design_flow_lpm()),
                t_relief_c: fluid.t_sat_c(p_relief),
                leak_kg_s_at_atm: im.seal_loss_kg_per_year / SECONDS_PER_YEAR,
                charge_kg: im.fluid_mass_kg,
                min_fluid_kg: im.min_fluid_mass_kg,
                tdp_w: site.gpu.tdp_w,
            });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x2b1c_0f1e_5eed_0002);
        let mut r_pkg = vec![0.0f32; topo.gpu_count];
        let mut tank_of_cdu = vec![None; topo.cdus.len()];
        let mut tanks = Vec::new();
        for (ci, c) in topo.cdus.iter().enumerate() {
            let spec = topo.halls[c.hall].spec;
            let (Some(pi), Some(im)) = (idx[spec], &site.halls[spec].immersion) else {
                continue;
            };
            // One rack (the tank) per CDU (the tank's skid): checked by site validation.
            let rack = &topo.racks[c.racks.start];
            for g in rack.gpus.clone() {
                let z: f64 = StandardNormal.sample(&mut rng);
                let r = im.package_r_k_per_w * (1.0 + im.package_r_spread_pct / 100.0 * z.clamp(-4.0, 4.0));
                r_pkg[g] = r.max(0.5 * im.package_r_k_per_w) as f32;
            }
            tank_of_cdu[ci] = Some(tanks.len());
            let p = &params[pi];
            tanks.push(Tank {
                p: pi,
                gpus: rack.gpus.clone(),
                t_pool_c: p.fluid.boiling_point_c,
                fluid_kg: p.charge_kg,
                q_it_w: 0.0,
                venting: false,
                dried: 0,
            });
        }
        Some(Self {
            params,
            tank_of_cdu,
            tanks,
            r_eff: r_pkg.clone(),
            r_pkg,
            dry: vec![false; topo.gpu_count],
            step_in_j: 0.0,
            step_cond_j: 0.0,
            step_vent_j: 0.0,
            step_leak_j: 0.0,
            step_lost_kg: 0.0,
            step_vented_kg: 0.0,
            step_max_gauge_kpa: 0.0,
        })
    }

    /// Whether CDU `cdu` is a tank's condenser-water skid.
    pub fn is_tank(&self, cdu: usize) -> bool {
        self.tank_of_cdu.get(cdu).is_some_and(|t| t.is_some())
    }

    /// Per-GPU resistance the kernel uses for tank GPUs (package + film boiling where dried out), K/W.
    pub fn r_eff(&self) -> &[f32] {
        &self.r_eff
    }

    /// Prepare the GPU kernel for the tank of CDU `cdu` (GPUs `gpus`), given each GPU's power of
    /// the last step: update dry-out, and return the kernel's coolant temperature and
    /// flow-dependent resistance `(T_sat + a, b)`. `None` if the CDU is not a tank's.
    pub fn prepare_rack(&mut self, cdu: usize, gpus: Range<usize>, last_power_w: &[f32]) -> Option<(f32, f32)> {
        let ti = (*self.tank_of_cdu.get(cdu)?)?;
        let tank = &mut self.tanks[ti];
        let p = &self.params[tank.p];
        let p_tank = tank_pressure_pa(p, tank.t_pool_c);
        let t_sat = p.fluid.t_sat_c(p_tank);
        let q_chf = p.chf_enh * p.fluid.chf_zuber_w_m2(p_tank);
        let q_min = p.chf_enh * p.fluid.q_min_zuber_w_m2(p_tank);
        let uncovered = tank.fluid_kg < p.min_fluid_kg;
        let mut sum = 0.0f64;
        let mut alive = 0usize;
        let mut dried = 0u32;
        for (&pw, g) in last_power_w.iter().zip(gpus.clone()) {
            let q = pw as f64 / p.area_m2;
            if pw > 0.0 {
                sum += pw as f64;
                alive += 1;
            }
            let d = &mut self.dry[g];
            if uncovered || q > q_chf {
                *d = true;
            } else if *d && q < q_min {
                *d = false;
            }
            dried += *d as u32;
            self.r_eff[g] = self.r_pkg[g] + if *d { p.r_film_k_w as f32 } else { 0.0 };
        }
        tank.dried = dried;
        let p0 = if alive > 0 { sum / alive as f64 } else { 0.0 }.max(TANGENT_MIN_FRAC * p.tdp_w);
        let dt0 = p.sh_ref_k * (p0 / p.area_m2 / p.q_ref_w_m2).powf(1.0 / p.n);
        let a = dt0 * (1.0 - 1.0 / p.n);
        let b = dt0 / (p.n * p0);
        Some(((t_sat + a) as f32, b as f32))
    }

    /// Start a plant step: `q_it_w(cdu)` is the heat each tank's boards put into the pool (its
    /// rack's power) over the step.
    pub fn begin_step(&mut self, q_it_w: impl Fn(usize) -> f64) {
        for (ci, t) in self.tank_of_cdu.iter().enumerate() {
            if let Some(ti) = *t {
                self.tanks[ti].q_it_w = q_it_w(ci);
                self.tanks[ti].venting = false;
            }
        }
        self.step_in_j = 0.0;
        self.step_cond_j = 0.0;
        self.step_vent_j = 0.0;
        self.step_leak_j = 0.0;
        self.step_lost_kg = 0.0;
        self.step_vented_kg = 0.0;
        self.step_max_gauge_kpa = 0.0;
    }

    /// Advance the pool of CDU `cdu`'s tank by `h` seconds with condenser water entering at
    /// `t_w_in_c` and `m_w_kg_s`; returns the mean heat condensed onto the coil (into the skid's
    /// loop), W. `None` if the CDU is not a tank's.
    pub fn substep(&mut self, cdu: usize, t_w_in_c: f64, m_w_kg_s: f64, h: f64) -> Option<f64> {
        let ti = (*self.tank_of_cdu.get(cdu)?)?;
        let tank = &mut self.tanks[ti];
        let p = &self.params[tank.p];
        let c = p.c_pool_j_k;
        let m_w = m_w_kg_s.max(1e-6);
        let ua = 1.0 / (p.r_cond_side + p.r_water_design * (p.f_design_kg_s / m_w).powf(WATER_FILM_EXPONENT));
        let c_w = m_w * PG25_CP_J_KG_K;
        let g = c_w * (1.0 - (-ua / c_w).exp());
        // Seals and breathing: vapour at its partial pressure (explicit over the sub-step).
        let p_v = p.fluid.p_sat_pa(tank.t_pool_c);
        let leak_kg_s = p.leak_kg_s_at_atm * p_v / P_ATM_PA;
        let q_leak = leak_kg_s * p.fluid.h_fg_j_kg;
        let q_net = tank.q_it_w - q_leak;
        let t_old = tank.t_pool_c;
        let t_ss = t_w_in_c + q_net / g;
        let tau = c / g;
        let mut t_new = lag(t_old, t_ss, h, tau);
        // Heat condensed onto the coil, from the coil's own ε-NTU with the water inlet and the
        // pool temperature (mean of the exact lag over the sub-step): not "heat in minus storage",
        // so the energy ledger's tank term checks it.
        let t_mean = t_ss + (t_old - t_ss) * lag_mean_factor(h / tau);
        let e_cond = g * (t_mean - t_w_in_c) * h;
        // Relief: the pool is held at the relief temperature; the heat above it leaves as vapour.
        let mut e_vent = 0.0;
        if t_new > p.t_relief_c {
            e_vent = c * (t_new - p.t_relief_c);
            t_new = p.t_relief_c;
            tank.venting = true;
        }
        tank.t_pool_c = t_new;
        let vented_kg = e_vent / p.fluid.h_fg_j_kg;
        let lost_kg = vented_kg + leak_kg_s * h;
        tank.fluid_kg -= lost_kg;
        self.step_in_j += tank.q_it_w * h;
        self.step_cond_j += e_cond;
        self.step_vent_j += e_vent;
        self.step_leak_j += q_leak * h;
        self.step_lost_kg += lost_kg;
        self.step_vented_kg += vented_kg;
        let gauge = (tank_pressure_pa(p, t_new) - P_ATM_PA) / 1000.0;
        self.step_max_gauge_kpa = self.step_max_gauge_kpa.max(gauge);
        Some(e_cond / h)
    }

    /// Totals of the step since [`Immersion::begin_step`].
    pub fn step_totals(&self) -> TankStep {
        TankStep {
            heat_in_j: self.step_in_j,
            condensed_j: self.step_cond_j,
            vented_heat_j: self.step_vent_j,
            leak_heat_j: self.step_leak_j,
            fluid_lost_kg: self.step_lost_kg,
            fluid_vented_kg: self.step_vented_kg,
            max_gauge_kpa: self.step_max_gauge_kpa,
        }
    }

    /// Thermal energy stored in the pools relative to 0 °C, J.
    pub fn stored_heat_j(&self) -> f64 {
        self.tanks
            .iter()
            .map(|t| self.params[t.p].c_pool_j_k * t.t_pool_c)
            .sum()
    }

    /// True pool temperature of CDU `cdu`'s tank, °C.
    pub fn pool_temp_c(&self, cdu: usize) -> Option<f64> {
        Some(self.tanks[(*self.tank_of_cdu.get(cdu)?)?].t_pool_c)
    }

    /// True tank pressure above atmospheric of CDU `cdu`'s tank, kPa.
    pub fn gauge_kpa(&self, cdu: usize) -> Option<f64> {
        let t = &self.tanks[(*self.tank_of_cdu.get(cdu)?)?];
        Some((tank_pressure_pa(&self.params[t.p], t.t_pool_c) - P_ATM_PA) / 1000.0)
    }

    /// Saturation temperature at the tank pressure of CDU `cdu`'s tank, °C.
    pub fn t_sat_c(&self, cdu: usize) -> Option<f64> {
        let t = &self.tanks[(*self.tank_of_cdu.get(cdu)?)?];
        let p = &self.params[t.p];
        Some(p.fluid.t_sat_c(tank_pressure_pa(p, t.t_pool_c)))
    }

    /// Fluid charge left in CDU `cdu`'s tank, kg.
    pub fn fluid_kg(&self, cdu: usize) -> Option<f64> {
        Some(self.tanks[(*self.tank_of_cdu.get(cdu)?)?].fluid_kg)
    }

    /// Accelerators of CDU `cdu`'s tank whose boiling surface is dried out.
    pub fn dried_out(&self, cdu: usize) -> Option<u32> {
        Some(self.tanks[(*self.tank_of_cdu.get(cdu)?)?].dried)
    }

    /// Remove `kg` of fluid from CDU `cdu`'s tank (a leak, for tests and fault studies).
    pub fn drain_kg(&mut self, cdu: usize, kg: f64) {
        if let Some(Some(ti)) = self.tank_of_cdu.get(cdu) {
            self.tanks[*ti].fluid_kg -= kg.max(0.0);
        }
    }

    /// What the tank of CDU `cdu` reports: pressure (0.1 kPa), pool temperature (0.1 K) and level
    /// (0.1 %), with the given sensor noise added; `None` if the CDU is not a tank's.
    pub fn measurement(&self, cdu: usize, t_s: f64, noise_kpa: f64, noise_k: f64) -> Option<TankMeasurement> {
        let t = &self.tanks[(*self.tank_of_cdu.get(cdu)?)?];
        let p = &self.params[t.p];
        let gauge = (tank_pressure_pa(p, t.t_pool_c) - P_ATM_PA) / 1000.0;
        let q = |x: f64| (x * 10.0).round() / 10.0;
        Some(TankMeasurement {
            pressure_gauge_kpa: Reading::good(q(gauge + noise_kpa), t_s),
            pool_temp_c: Reading::good(q(t.t_pool_c + noise_k), t_s),
            fluid_level_pct: Reading::good(q(100.0 * t.fluid_kg / p.charge_kg), t_s),
            venting: t.venting,
        })
    }

    /// GPUs of every tank (for tests).
    pub fn tank_gpus(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.tanks.iter().map(|t| t.gpus.clone())
    }
}

/// Tank pressure: saturated vapour, held at atmospheric by the breather when the pool is subcooled.
fn tank_pressure_pa(p: &TankParams, t_pool_c: f64) -> f64 {
    p.fluid.p_sat_pa(t_pool_c).max(P_ATM_PA)
}
