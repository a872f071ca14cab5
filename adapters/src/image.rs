//! The plant as the wire shows it: Modbus devices and MQTT rack feeds assembled into the process
//! image ([`Measurements`]) the controller reads, and the controller's [`Actions`] turned into
//! register writes, heartbeats and power-limit commands.
//!
//! Every reading keeps the time of its last successful read and its quality, so a device that
//! stops answering shows up as ageing or bad data, which the controller judges.

use crate::modbus::{DeviceHandle, PointValue, WriteError};
use crate::mqtt::MqttLink;
use crate::points::{cdu, facility, meter, tank};
use coolplane_core::signals::{
    Actions, CduMeasurement, FacilityMeasurement, GpuTelemetry, Measurements, MeterMeasurement, Quality,
    RackMeasurement, Reading, RejectionMode, TankMeasurement,
};
use coolplane_core::topology::Topology;

/// The wire-side plant.
pub struct WirePlant {
    /// Site topology (from the site file).
    pub topology: Topology,
    /// One device per CDU (topology order); `None` where none is configured.
    pub cdus: Vec<Option<DeviceHandle>>,
    /// One device per hall's facility water system.
    pub facilities: Vec<Option<DeviceHandle>>,
    /// The site meter.
    pub meter: Option<DeviceHandle>,
    /// Rack telemetry and power-limit commands.
    pub mqtt: Option<MqttLink>,
    heartbeat: u16,
}

/// What applying one tick's actions did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApplyReport {
    /// Setpoint writes queued.
    pub writes_queued: usize,
    /// Writes refused (unknown point, queue full): listed for the operator.
    pub refused: Vec<String>,
    /// Power-limit commands published.
    pub power_commands: usize,
}

fn reading(p: Option<PointValue>) -> Reading {
    match p {
        Some(p) => Reading {
            value: p.value,
            t_s: p.t_s,
            quality: p.quality,
        },
        None => Reading {
            value: f64::NAN,
            t_s: f64::NEG_INFINITY,
            quality: Quality::Bad,
        },
    }
}

impl WirePlant {
    /// Assemble from configured devices and links.
    pub fn new(
        topology: Topology,
        cdus: Vec<Option<DeviceHandle>>,
        facilities: Vec<Option<DeviceHandle>>,
        meter: Option<DeviceHandle>,
        mqtt: Option<MqttLink>,
    ) -> Self {
        Self {
            topology,
            cdus,
            facilities,
            meter,
            mqtt,
            heartbeat: 0,
        }
    }

    /// The process image now (`now_s`: plant time).
    pub fn measurements(&self, now_s: f64) -> Measurements {
        let t = &self.topology;
        let mut m = Measurements {
            t_s: now_s,
            cdus: Vec::with_capacity(t.cdus.len()),
            facilities: Vec::with_capacity(t.halls.len()),
            racks: vec![RackMeasurement::default(); t.racks.len()],
            gpus: GpuTelemetry {
                t_s: f64::NEG_INFINITY,
                temp_c: vec![f32::NAN; t.gpu_count],
                power_w: vec![f32::NAN; t.gpu_count],
                util: vec![f32::NAN; t.gpu_count],
                power_limit_w: vec![f32::NAN; t.gpu_count],
                clock_events: vec![0; t.gpu_count],
            },
            meter: MeterMeasurement::default(),
        };
        for c in 0..t.cdus.len() {
            let d = self.cdus.get(c).and_then(|d| d.as_ref());
            let pt = |name: &str| reading(d.and_then(|d| d.point(name)));
            let alarms = pt(cdu::ALARMS);
            let fallback = pt(cdu::LOCAL_FALLBACK);
            m.cdus.push(CduMeasurement {
                supply_temp_c: pt(cdu::SUPPLY_TEMP_C),
                return_temp_c: pt(cdu::RETURN_TEMP_C),
                flow_lpm: pt(cdu::FLOW_LPM),
                facility_in_temp_c: pt(cdu::FACILITY_IN_TEMP_C),
                heat_kw: pt(cdu::HEAT_KW),
                pump_speed_pct: pt(cdu::PUMP_SPEED_PCT),
                valve_pct: pt(cdu::VALVE_PCT),
                pump_power_kw: pt(cdu::PUMP_POWER_KW),
                supply_setpoint_c: pt(cdu::SUPPLY_SETPOINT_ACTIVE_C),
                flow_setpoint_lpm: pt(cdu::FLOW_SETPOINT_ACTIVE_LPM),
                alarms: if alarms.value.is_finite() {
                    alarms.value as u16
                } else {
                    0
                },
                local_fallback: fallback.value.is_finite() && fallback.value > 0.5,
                // A two-phase immersion tank's skid also reports its tank (maps/coolplane-2pic-tank.toml).
                tank: d.filter(|d| d.has_point(tank::PRESSURE_GAUGE_KPA)).map(|_| {
                    let venting = pt(tank::VENTING);
                    TankMeasurement {
                        pressure_gauge_kpa: pt(tank::PRESSURE_GAUGE_KPA),
                        pool_temp_c: pt(tank::POOL_TEMP_C),
                        fluid_level_pct: pt(tank::FLUID_LEVEL_PCT),
                        venting: venting.value.is_finite() && venting.value > 0.5,
                    }
                }),
            });
        }
        for h in 0..t.halls.len() {
            let d = self.facilities.get(h).and_then(|d| d.as_ref());
            let pt = |name: &str| reading(d.and_then(|d| d.point(name)));
            let flag = |name: &str| {
                let r = pt(name);
                r.value.is_finite() && r.value > 0.5
            };
            m.facilities.push(FacilityMeasurement {
                supply_temp_c: pt(facility::SUPPLY_TEMP_C),
                return_temp_c: pt(facility::RETURN_TEMP_C),
                flow_lpm: pt(facility::FLOW_LPM),
                supply_setpoint_c: pt(facility::SUPPLY_SETPOINT_ACTIVE_C),
                fan_speed_pct: pt(facility::FAN_SPEED_PCT),
                adiabatic_on: flag(facility::ADIABATIC_ON),
                chiller_on: flag(facility::CHILLER_ON),
                fan_power_kw: pt(facility::FAN_POWER_KW),
                pump_power_kw: pt(facility::PUMP_POWER_KW),
                chiller_power_kw: pt(facility::CHILLER_POWER_KW),
                heat_pump_power_kw: pt(facility::HEAT_PUMP_POWER_KW),
                outdoor_dry_bulb_c: pt(facility::OUTDOOR_DRY_BULB_C),
                outdoor_wet_bulb_c: pt(facility::OUTDOOR_WET_BULB_C),
                local_fallback: flag(facility::LOCAL_FALLBACK),
                rejection_mode: {
                    // Only a good reading of a code some mode has: anything else is "not known".
                    let r = pt(facility::REJECTION_MODE_ACTIVE);
                    (r.quality == Quality::Good && r.value.is_finite() && r.value >= 0.0 && r.value.fract() == 0.0)
                        .then(|| RejectionMode::from_code(r.value as u16))
                        .flatten()
                },
            });
        }
        let mp = |name: &str| reading(self.meter.as_ref().and_then(|d| d.point(name)));
        m.meter = MeterMeasurement {
            facility_power_kw: mp(meter::FACILITY_POWER_KW),
            it_power_kw: mp(meter::IT_POWER_KW),
            power_budget_kw: mp(meter::POWER_BUDGET_KW),
        };
        if let Some(mqtt) = &self.mqtt {
            mqtt.with_latest(|latest| {
                let mut newest = f64::NEG_INFINITY;
                for (r, sample) in latest.iter().enumerate() {
                    let Some(s) = sample else {
                        m.racks[r] = RackMeasurement {
                            it_power_kw: reading(None),
                            inlet_temp_c: reading(None),
                            outlet_temp_c: reading(None),
                            gpu_temp_max_c: reading(None),
                        };
                        continue;
                    };
                    let tel = &s.telemetry;
                    let at = s.received_s;
                    newest = newest.max(at);
                    let hottest = tel
                        .gpu_temp_c
                        .iter()
                        .copied()
                        .filter(|x| x.is_finite())
                        .fold(f32::NEG_INFINITY, f32::max);
                    m.racks[r] = RackMeasurement {
                        it_power_kw: Reading::good(tel.it_power_kw, at),
                        inlet_temp_c: Reading::good(tel.inlet_temp_c, at),
                        outlet_temp_c: Reading::good(tel.outlet_temp_c, at),
                        gpu_temp_max_c: if hottest.is_finite() {
                            Reading::good(hottest as f64, at)
                        } else {
                            Reading {
                                value: f64::NAN,
                                t_s: at,
                                quality: Quality::Bad,
                            }
                        },
                    };
                    let range = t.racks[r].gpus.clone();
                    let n = range.len().min(tel.gpu_temp_c.len());
                    let g0 = range.start;
                    m.gpus.temp_c[g0..g0 + n].copy_from_slice(&tel.gpu_temp_c[..n]);
                    let copy = |dst: &mut [f32], src: &[f32]| {
                        let k = n.min(src.len());
                        dst[g0..g0 + k].copy_from_slice(&src[..k]);
                    };
                    copy(&mut m.gpus.power_w, &tel.gpu_power_w);
                    copy(&mut m.gpus.util, &tel.gpu_util);
                    copy(&mut m.gpus.power_limit_w, &tel.gpu_power_limit_w);
                    let k = n.min(tel.gpu_clock_events.len());
                    m.gpus.clock_events[g0..g0 + k].copy_from_slice(&tel.gpu_clock_events[..k]);
                }
                m.gpus.t_s = newest;
            });
        } else {
            for r in &mut m.racks {
                r.gpu_temp_max_c = reading(None);
            }
        }
        m
    }

    /// Carry out one tick's actions: setpoint writes (on change, verified by the device tasks),
    /// heartbeats (a counter incremented every tick) and power-limit commands.
    pub fn apply(&mut self, actions: &Actions, ts_unix_ms: i64) -> ApplyReport {
        self.heartbeat = self.heartbeat.wrapping_add(1);
        let hb = self.heartbeat as f64;
        let mut rep = ApplyReport::default();
        let note = |r: Result<(), WriteError>, rep: &mut ApplyReport, counts: bool| match r {
            Ok(()) => {
                if counts {
                    rep.writes_queued += 1;
                }
            }
            Err(e) => rep.refused.push(e.to_string()),
        };
        for (c, cmd) in actions.cdus.iter().enumerate() {
            let Some(Some(d)) = self.cdus.get(c) else { continue };
            if let Some(v) = cmd.supply_temp_setpoint_c {
                note(d.write(cdu::SUPPLY_SETPOINT_C, v), &mut rep, true);
            }
            if let Some(v) = cmd.flow_setpoint_lpm {
                note(d.write(cdu::FLOW_SETPOINT_LPM, v), &mut rep, true);
            }
            if cmd.heartbeat {
                note(d.write(cdu::HEARTBEAT, hb), &mut rep, false);
            }
        }
        for (h, cmd) in actions.facilities.iter().enumerate() {
            let Some(Some(d)) = self.facilities.get(h) else {
                continue;
            };
            if let Some(v) = cmd.supply_temp_setpoint_c {
                note(d.write(facility::SUPPLY_SETPOINT_C, v), &mut rep, true);
            }
            if let Some(mode) = cmd.rejection_mode {
                note(
                    d.write(facility::REJECTION_MODE, f64::from(mode.code())),
                    &mut rep,
                    true,
                );
            }
            if cmd.heartbeat {
                note(d.write(facility::HEARTBEAT, hb), &mut rep, false);
            }
        }
        if let Some(mqtt) = &self.mqtt {
            for pl in &actions.power_limits {
                if let Some(rack) = self.topology.racks.get(pl.rack as usize) {
                    if mqtt.send_power_limits(&rack.name, pl.limits_w.clone(), ts_unix_ms) {
                        rep.power_commands += 1;
                    } else {
                        rep.refused
                            .push(format!("power limits for {}: MQTT client queue full", rack.name));
                    }
                }
            }
        }
        rep
    }
}
