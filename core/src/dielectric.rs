//! Dielectric fluids for two-phase immersion cooling (plant-model.md §12): saturation pressure
//! and temperature (Clausius–Clapeyron), vapour density, and the pool-boiling limits
//! (Zuber's critical and minimum heat flux). SI units inside; `_c`, `_kpa` at the edges.
//!
//! Property data (at 25 °C unless stated; manufacturer product information sheets):
//!
//! | fluid | boiling point at 1 atm | molar mass | latent heat at bp | liquid density | c_p liquid | surface tension | vapour pressure 25 °C |
//! |---|---|---|---|---|---|---|---|
//! | `novec-649` (3M Novec 649, FK-5-1-12) | 49 °C | 316 g/mol | 88 kJ/kg | 1,600 kg/m³ | 1,103 J/(kg·K) | 10.8 mN/m | 40.4 kPa |
//! | `hfe-7100` (3M Novec 7100, methoxy-nonafluorobutane) | 61 °C | 250 g/mol | 112 kJ/kg | 1,510 kg/m³ | 1,183 J/(kg·K) | 13.6 mN/m | 27 kPa |
//! | `hfe-7000` (3M Novec 7000, methoxy-heptafluoropropane) | 34 °C | 200 g/mol | 142 kJ/kg | 1,400 kg/m³ | 1,300 J/(kg·K) | 12.4 mN/m | 65 kPa |
//!
//! Sources: 3M Novec 649 Engineered Fluid, Novec 7100 and Novec 7000 Engineered Fluid product
//! information sheets (typical properties tables). Chemours Opteon 2P50 (boiling point 49 °C) is
//! not tabulated here: its published sheet does not give the vapour-pressure and surface-tension
//! points this module needs, and a number without a source is not put in.
//!
//! The Clausius–Clapeyron slope is not taken from h_fg·M/R alone (that assumes a constant
//! latent heat and ideal vapour): it is fitted through the two published points of each fluid,
//! the normal boiling point and the 25 °C vapour pressure, `ln p = ln p_atm − B (1/T − 1/T_bp)`,
//! which is exact at both points and accurate to about 1 % in pressure between them and a few
//! kelvin above the boiling point, the range a tank works in. For Novec 649 `B` ≈ 3,720 K, i.e.
//! about 3.4 kPa per kelvin at the boiling point.
//!
//! Critical heat flux (Kutateladze–Zuber, flat horizontal heater, constant 0.131; Lienhard &
//! Dhir 1973 give 0.149 for large heaters):
//! `q_chf = 0.131 · h_fg · ρ_v^½ · [σ g (ρ_l − ρ_v)]^¼`; with the 25 °C liquid density and surface
//! tension (both a little lower at the boiling point, which lowers q_chf by a few %) Novec 649
//! gives ≈ 13 W/cm² at 1 atm, within the 10–20 W/cm² measured for plain surfaces in
//! fluorinated dielectric liquids (e.g. FC-72, HFE-7100: Chang & You, Int. J. Heat Mass Transfer
//! 40 (1997) 4437). q_chf rises with pressure through ρ_v. Minimum (Leidenfrost) heat flux of
//! film boiling (Zuber 1959): `q_min = 0.09 · ρ_v · h_fg · [σ g (ρ_l − ρ_v) / (ρ_l + ρ_v)²]^¼`.

/// Standard atmosphere, Pa.
pub const P_ATM_PA: f64 = 101_325.0;
/// Universal gas constant, J/(mol·K).
pub const R_GAS_J_MOL_K: f64 = 8.314_462;
const G_M_S2: f64 = 9.806_65;
const KELVIN: f64 = 273.15;

/// Property data of one dielectric fluid (see the module table for sources).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DielectricFluid {
    /// Name as used in site files.
    pub name: &'static str,
    /// Normal boiling point (saturation temperature at 101.325 kPa), °C.
    pub boiling_point_c: f64,
    /// Molar mass, kg/mol.
    pub molar_mass_kg_mol: f64,
    /// Latent heat of vaporisation at the boiling point, J/kg.
    pub h_fg_j_kg: f64,
    /// Liquid density at 25 °C, kg/m³.
    pub liquid_density_kg_m3: f64,
    /// Liquid specific heat at 25 °C, J/(kg·K).
    pub liquid_cp_j_kg_k: f64,
    /// Surface tension at 25 °C, N/m.
    pub surface_tension_n_m: f64,
    /// Vapour pressure at 25 °C, Pa.
    pub vapour_pressure_25c_pa: f64,
}

/// The fluids a site file may name.
pub const FLUIDS: [DielectricFluid; 3] = [
    DielectricFluid {
        name: "novec-649",
        boiling_point_c: 49.0,
        molar_mass_kg_mol: 0.316,
        h_fg_j_kg: 88_000.0,
        liquid_density_kg_m3: 1600.0,
        liquid_cp_j_kg_k: 1103.0,
        surface_tension_n_m: 0.0108,
        vapour_pressure_25c_pa: 40_400.0,
    },
    DielectricFluid {
        name: "hfe-7100",
        boiling_point_c: 61.0,
        molar_mass_kg_mol: 0.250,
        h_fg_j_kg: 112_000.0,
        liquid_density_kg_m3: 1510.0,
        liquid_cp_j_kg_k: 1183.0,
        surface_tension_n_m: 0.0136,
        vapour_pressure_25c_pa: 27_000.0,
    },
    DielectricFluid {
        name: "hfe-7000",
        boiling_point_c: 34.0,
        molar_mass_kg_mol: 0.200,
        h_fg_j_kg: 142_000.0,
        liquid_density_kg_m3: 1400.0,
        liquid_cp_j_kg_k: 1300.0,
        surface_tension_n_m: 0.0124,
        vapour_pressure_25c_pa: 65_000.0,
    },
];

/// A fluid by its site-file name.
pub fn fluid_by_name(name: &str) -> Option<DielectricFluid> {
    FLUIDS.iter().copied().find(|f| f.name == name)
}

impl DielectricFluid {
    /// Clausius–Clapeyron slope `B` (K) through the boiling point and the 25 °C vapour pressure.
    pub fn cc_slope_k(&self) -> f64 {
        let t_bp = self.boiling_point_c + KELVIN;
        let t_25 = 25.0 + KELVIN;
        (P_ATM_PA / self.vapour_pressure_25c_pa).ln() / (1.0 / t_25 - 1.0 / t_bp)
    }

    /// Saturation pressure at `t_c`, Pa.
    pub fn p_sat_pa(&self, t_c: f64) -> f64 {
        let t_bp = self.boiling_point_c + KELVIN;
        P_ATM_PA * (-self.cc_slope_k() * (1.0 / (t_c + KELVIN) - 1.0 / t_bp)).exp()
    }

    /// Saturation temperature at absolute pressure `p_pa`, °C.
    pub fn t_sat_c(&self, p_pa: f64) -> f64 {
        let t_bp = self.boiling_point_c + KELVIN;
        1.0 / (1.0 / t_bp - (p_pa.max(1.0) / P_ATM_PA).ln() / self.cc_slope_k()) - KELVIN
    }

    /// The fluid's saturation curve alone (what a controller needs to read a tank's pressure
    /// from its pool temperature).
    pub fn saturation(&self) -> Saturation {
        Saturation {
            boiling_point_c: self.boiling_point_c,
            cc_slope_k: self.cc_slope_k(),
        }
    }

    /// Saturated vapour density at absolute pressure `p_pa` (ideal gas at T_sat), kg/m³.
    pub fn vapour_density_kg_m3(&self, p_pa: f64) -> f64 {
        p_pa * self.molar_mass_kg_mol / (R_GAS_J_MOL_K * (self.t_sat_c(p_pa) + KELVIN))
    }

    /// Zuber's critical heat flux of a plain flat surface at absolute pressure `p_pa`, W/m².
    pub fn chf_zuber_w_m2(&self, p_pa: f64) -> f64 {
        let rv = self.vapour_density_kg_m3(p_pa);
        let rl = self.liquid_density_kg_m3;
        0.131 * self.h_fg_j_kg * rv.sqrt() * (self.surface_tension_n_m * G_M_S2 * (rl - rv)).powf(0.25)
    }

    /// Zuber's minimum heat flux of film boiling (below it a dried-out surface rewets), W/m².
    pub fn q_min_zuber_w_m2(&self, p_pa: f64) -> f64 {
        let rv = self.vapour_density_kg_m3(p_pa);
        let rl = self.liquid_density_kg_m3;
        0.09 * rv
            * self.h_fg_j_kg
            * (self.surface_tension_n_m * G_M_S2 * (rl - rv) / ((rl + rv) * (rl + rv))).powf(0.25)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clausius_clapeyron_passes_through_both_published_points() {
        for f in FLUIDS {
            assert!(
                (f.p_sat_pa(f.boiling_point_c) - P_ATM_PA).abs() < 1e-6 * P_ATM_PA,
                "{}",
                f.name
            );
            assert!(
                (f.p_sat_pa(25.0) - f.vapour_pressure_25c_pa).abs() < 1e-6 * P_ATM_PA,
                "{}",
                f.name
            );
            // Inverse of each other.
            let t = f.t_sat_c(120_000.0);
            assert!((f.p_sat_pa(t) - 120_000.0).abs() < 1e-3, "{}", f.name);
            assert!(t > f.boiling_point_c);
        }
    }

    #[test]
    fn the_saturation_curve_reads_a_tank_gauge_from_its_pool_temperature() {
        for f in FLUIDS {
            let s = f.saturation();
            for t in [20.0, 40.0, f.boiling_point_c + 2.0] {
                assert_eq!(s.p_sat_pa(t), f.p_sat_pa(t), "{}", f.name);
            }
            // Subcooled: the breather holds atmospheric.
            assert_eq!(s.tank_gauge_kpa(f.boiling_point_c - 3.0), 0.0);
            // A kelvin above the boiling point: a few kPa (3.6 for Novec 649, a little over the
            // module docs' 3.4 kPa/K slope at the boiling point as the curve steepens; 5.0 for
            // the lighter HFE-7000).
            let g = s.tank_gauge_kpa(f.boiling_point_c + 1.0);
            assert!((2.5..5.5).contains(&g), "{}: {g}", f.name);
            // The inverse: the pool temperature of a gauge reading.
            let p = P_ATM_PA + 1000.0 * s.tank_gauge_kpa(f.boiling_point_c + 2.5);
            assert!((f.t_sat_c(p) - f.boiling_point_c - 2.5).abs() < 1e-9);
            assert!(s.tank_gauge_kpa(f64::NAN).is_nan());
        }
        let n649 = fluid_by_name("novec-649").unwrap().saturation();
        assert!(
            (n649.tank_gauge_kpa(50.0) - 3.6).abs() < 0.1,
            "{}",
            n649.tank_gauge_kpa(50.0)
        );
    }

    #[test]
    fn novec_649_figures_are_the_documented_ones() {
        let f = fluid_by_name("novec-649").unwrap();
        // ≈ 3.4 kPa per K at the boiling point.
        let dpdt = (f.p_sat_pa(49.5) - f.p_sat_pa(48.5)) / 1000.0;
        assert!((3.0..3.9).contains(&dpdt), "{dpdt}");
        // Zuber CHF ≈ 13 W/cm² at 1 atm, higher at higher pressure; q_min well below it.
        let chf = f.chf_zuber_w_m2(P_ATM_PA) / 1e4;
        assert!((11.0..16.0).contains(&chf), "{chf}");
        assert!(f.chf_zuber_w_m2(1.5 * P_ATM_PA) > f.chf_zuber_w_m2(P_ATM_PA));
        let qmin = f.q_min_zuber_w_m2(P_ATM_PA) / 1e4;
        assert!(qmin > 0.2 && qmin < 0.2 * chf, "{qmin}");
        // Vapour density at 1 atm ≈ p M / (R T) ≈ 12 kg/m³.
        let rv = f.vapour_density_kg_m3(P_ATM_PA);
        assert!((11.0..13.0).contains(&rv), "{rv}");
        assert!(fluid_by_name("water").is_none());
    }
}

/// A fluid's saturation curve, `ln p = ln p_atm − B (1/T − 1/T_bp)` (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Saturation {
    /// Normal boiling point, °C.
    pub boiling_point_c: f64,
    /// Clausius–Clapeyron slope `B`, K.
    pub cc_slope_k: f64,
}

impl Saturation {
    /// Saturation pressure at `t_c`, Pa.
    pub fn p_sat_pa(&self, t_c: f64) -> f64 {
        P_ATM_PA * (-self.cc_slope_k * (1.0 / (t_c + KELVIN) - 1.0 / (self.boiling_point_c + KELVIN))).exp()
    }

    /// The gauge pressure of a tank whose pool is at `t_pool_c`: the saturation pressure above
    /// atmospheric, or 0 when the pool is subcooled (its breather holds the tank at atmospheric),
    /// kPa. Not finite when `t_pool_c` is not.
    pub fn tank_gauge_kpa(&self, t_pool_c: f64) -> f64 {
        if !t_pool_c.is_finite() {
            return f64::NAN;
        }
        ((self.p_sat_pa(t_pool_c) - P_ATM_PA) / 1000.0).max(0.0)
    }
}
