//! What the twin may know of a site: its structure and nameplate, never the plant's parameters.
//!
//! [`Nameplate::from_site`] copies from the site file only what a commissioning engineer would
//! read off drawings and data sheets: the topology, the GPU's TDP and slowdown temperature, the
//! CDUs' design flow and setpoint ranges, a tank fluid's saturation curve. The cold-plate resistances, heat-to-liquid fraction,
//! fouling rates, pump and fan curves are deliberately left out: the twin learns them.
//! The what-if model's equipment shapes (`whatif::DryCoolerCurve`, `whatif::AirHandlerCurve`)
//! read the dry coolers' and air handlers' selection data (design heat, approaches, capacity
//! ratio, fan power, chilled-water temperatures) from the site file the same way: shapes whose
//! scale the policy learns from the meters, not meters themselves.

use coolplane_core::site::Site;
use coolplane_core::topology::Topology;

/// Structure and nameplate of a site.
#[derive(Debug, Clone, PartialEq)]
pub struct Nameplate {
    /// The expanded topology.
    pub topo: Topology,
    /// GPU thermal design power, W.
    pub gpu_tdp_w: f64,
    /// GPU slowdown temperature, °C.
    pub gpu_slowdown_c: f64,
    /// Per CDU: design secondary flow, L/min.
    pub cdu_design_flow_lpm: Vec<f64>,
    /// Per CDU: nameplate capacity, kW.
    pub cdu_capacity_kw: Vec<f64>,
    /// Per CDU: supply setpoint range, °C.
    pub cdu_supply_range_c: Vec<(f64, f64)>,
    /// Per hall: facility supply setpoint minimum, °C.
    pub facility_supply_min_c: Vec<f64>,
    /// Per CDU: the saturation curve of the fluid in the two-phase immersion tank it serves
    /// (the fluid's data sheet), `None` for a CDU of cold-plate racks.
    pub tank_saturation: Vec<Option<coolplane_core::dielectric::Saturation>>,
}

impl Nameplate {
    /// Read the nameplate part of a validated site.
    pub fn from_site(site: &Site) -> Self {
        let topo = Topology::new(site);
        let mut flow = Vec::new();
        let mut cap = Vec::new();
        let mut range = Vec::new();
        let mut tank = Vec::new();
        for c in &topo.cdus {
            let hall = &site.halls[topo.halls[c.hall].spec];
            tank.push(
                hall.immersion
                    .as_ref()
                    .and_then(|im| coolplane_core::dielectric::fluid_by_name(&im.fluid))
                    .map(|f| f.saturation()),
            );
            let spec = &hall.cdu;
            flow.push(spec.design_flow_lpm_per_kw * spec.design_load_kw);
            cap.push(spec.capacity_kw);
            range.push((spec.supply_setpoint_min_c, spec.supply_setpoint_max_c));
        }
        let fac_min = topo
            .halls
            .iter()
            .map(|h| site.halls[h.spec].facility.supply_setpoint_min_c)
            .collect();
        Self {
            gpu_tdp_w: site.gpu.tdp_w,
            gpu_slowdown_c: site.gpu.slowdown_c,
            cdu_design_flow_lpm: flow,
            cdu_capacity_kw: cap,
            cdu_supply_range_c: range,
            facility_supply_min_c: fac_min,
            tank_saturation: tank,
            topo,
        }
    }
}
