//! Fluid properties used on both sides of the seam (plant and twin), SI units.

/// Propylene glycol 25 % (technology cooling system): density, kg/m³.
pub const PG25_DENSITY_KG_M3: f64 = 1020.0;
/// Propylene glycol 25 %: specific heat, J/(kg·K).
pub const PG25_CP_J_KG_K: f64 = 3950.0;
/// Water (facility loop): density, kg/m³.
pub const WATER_DENSITY_KG_M3: f64 = 995.0;
/// Water: specific heat, J/(kg·K).
pub const WATER_CP_J_KG_K: f64 = 4180.0;
/// Air: specific heat, J/(kg·K).
pub const AIR_CP_J_KG_K: f64 = 1006.0;
/// Latent heat of vaporisation of water near 25 °C, J/kg.
pub const WATER_H_FG_J_KG: f64 = 2.44e6;

/// PG25 volumetric flow (L/min) to mass flow (kg/s).
pub fn pg25_lpm_to_kg_s(lpm: f64) -> f64 {
    lpm / 60_000.0 * PG25_DENSITY_KG_M3
}

/// PG25 mass flow (kg/s) to volumetric flow (L/min).
pub fn pg25_kg_s_to_lpm(kg_s: f64) -> f64 {
    kg_s / PG25_DENSITY_KG_M3 * 60_000.0
}

/// Water volumetric flow (L/min) to mass flow (kg/s).
pub fn water_lpm_to_kg_s(lpm: f64) -> f64 {
    lpm / 60_000.0 * WATER_DENSITY_KG_M3
}

/// Water mass flow (kg/s) to volumetric flow (L/min).
pub fn water_kg_s_to_lpm(kg_s: f64) -> f64 {
    kg_s / WATER_DENSITY_KG_M3 * 60_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip() {
        assert!((pg25_kg_s_to_lpm(pg25_lpm_to_kg_s(2160.0)) - 2160.0).abs() < 1e-9);
        assert!((water_kg_s_to_lpm(water_lpm_to_kg_s(100.0)) - 100.0).abs() < 1e-9);
        // 1.5 L/min per kW of PG25 gives a rise of about 10 K: ΔT = Q / (ṁ c_p).
        let dt = 1000.0 / (pg25_lpm_to_kg_s(1.5) * PG25_CP_J_KG_K);
        assert!((dt - 9.93).abs() < 0.05, "{dt}");
    }
}
