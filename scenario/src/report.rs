//! Human-readable KPI tables: one run, or several policies side by side with ratios to the first.

use crate::run::RunReport;
use std::fmt::Write as _;

/// One table line: label, unit, and how to get the value from a report.
struct Line {
    label: &'static str,
    unit: &'static str,
    get: fn(&RunReport) -> f64,
    decimals: usize,
}

const LINES: &[Line] = &[
    Line {
        label: "PUE",
        unit: "",
        get: |r| r.kpis.pue,
        decimals: 4,
    },
    Line {
        label: "PUE p95 of 15-min windows",
        unit: "",
        get: |r| r.kpis.pue_p95_15min,
        decimals: 4,
    },
    Line {
        label: "IT energy",
        unit: "kWh",
        get: |r| r.kpis.it_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "facility energy",
        unit: "kWh",
        get: |r| r.kpis.facility_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "cooling energy",
        unit: "kWh",
        get: |r| r.kpis.cooling_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "  CDU pumps",
        unit: "kWh",
        get: |r| r.kpis.cdu_pump_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "  facility pumps",
        unit: "kWh",
        get: |r| r.kpis.facility_pump_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "  dry-cooler / tower fans",
        unit: "kWh",
        get: |r| r.kpis.rejection_fan_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "  chiller",
        unit: "kWh",
        get: |r| r.kpis.chiller_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "  air-handler fans",
        unit: "kWh",
        get: |r| r.kpis.air_handler_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "  electrical-room cooling",
        unit: "kWh",
        get: |r| r.kpis.electrical_room_cooling_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "electrical losses",
        unit: "kWh",
        get: |r| r.kpis.electrical_loss_energy_kwh,
        decimals: 0,
    },
    Line {
        label: "throttle",
        unit: "GPU-s",
        get: |r| r.kpis.throttle_gpu_s,
        decimals: 0,
    },
    Line {
        label: "near-throttle (< 5 K)",
        unit: "GPU-s",
        get: |r| r.kpis.near_throttle_gpu_s,
        decimals: 0,
    },
    Line {
        label: "hottest GPU",
        unit: "°C",
        get: |r| r.kpis.gpu_temp_max_c,
        decimals: 1,
    },
    Line {
        label: "GPU shutdowns",
        unit: "",
        get: |r| r.kpis.gpu_shutdowns as f64,
        decimals: 0,
    },
    Line {
        label: "failed jobs",
        unit: "",
        get: |r| r.kpis.failed_jobs as f64,
        decimals: 0,
    },
    Line {
        label: "work lost",
        unit: "%",
        get: |r| r.kpis.work_lost_pct,
        decimals: 3,
    },
    Line {
        label: "budget exceedance",
        unit: "kWh",
        get: |r| r.kpis.budget_exceed_kwh,
        decimals: 1,
    },
    Line {
        label: "peak 15-min facility power",
        unit: "kW",
        get: |r| r.kpis.peak_15min_kw,
        decimals: 0,
    },
    Line {
        label: "water",
        unit: "L",
        get: |r| r.kpis.water_l,
        decimals: 0,
    },
    Line {
        label: "WUE",
        unit: "L/kWh",
        get: |r| r.kpis.wue_l_per_kwh,
        decimals: 4,
    },
    Line {
        label: "heat reused",
        unit: "kWh",
        get: |r| r.kpis.heat_reused_kwh,
        decimals: 0,
    },
    Line {
        label: "fluid lost (2-phase tanks)",
        unit: "kg",
        get: |r| r.kpis.fluid_loss_kg,
        decimals: 2,
    },
    Line {
        label: "max tank pressure (gauge)",
        unit: "kPa",
        get: |r| r.kpis.tank_pressure_max_gauge_kpa,
        decimals: 1,
    },
    Line {
        label: "energy balance error",
        unit: "%",
        get: |r| r.kpis.energy_balance_error_pct,
        decimals: 6,
    },
    Line {
        label: "IT meter vs rack path",
        unit: "%",
        get: |r| r.kpis.it_meter_error_pct,
        decimals: 6,
    },
    Line {
        label: "heat-rejection fan starts",
        unit: "",
        get: |r| r.kpis.rejection_fan_starts as f64,
        decimals: 0,
    },
    Line {
        label: "chiller starts",
        unit: "",
        get: |r| r.kpis.chiller_starts as f64,
        decimals: 0,
    },
    Line {
        label: "room air max",
        unit: "°C",
        get: |r| r.kpis.room_air_max_c,
        decimals: 1,
    },
    Line {
        label: "room air above its limit",
        unit: "K·h",
        get: |r| r.kpis.room_air_over_limit_k_h,
        decimals: 2,
    },
    Line {
        label: "supply temp max deviation",
        unit: "K",
        get: |r| r.kpis.supply_temp_max_dev_k,
        decimals: 2,
    },
    Line {
        label: "setpoint writes",
        unit: "",
        get: |r| r.kpis.setpoint_writes as f64,
        decimals: 0,
    },
    Line {
        label: "compute time ratio",
        unit: "",
        get: |r| r.compute_time_ratio,
        decimals: 7,
    },
];

fn header(r: &RunReport) -> String {
    format!(
        "coolplane {} · site {} ({} GPUs) · scenario {} · weather {} · period {} (from day {:.0}) · seed {} · step {} s · warm-up {} h\n\
         PUE boundary: {}\nelectrical chain: {}\n",
        r.version, r.site, r.gpus, r.scenario, r.weather, r.period, r.period_start_day, r.seed, r.step_s, r.warmup_h, r.kpis.pue_boundary, r.electrical_chain
    )
}

fn fmt_num(v: f64, decimals: usize) -> String {
    if v.is_nan() {
        "—".into()
    } else if v != 0.0 && v.abs() < 0.5 * 10f64.powi(-(decimals as i32)) {
        format!("{v:.2e}")
    } else {
        format!("{v:.decimals$}")
    }
}

/// A KPI table for one run.
pub fn table(r: &RunReport) -> String {
    let mut s = header(r);
    let _ = writeln!(
        s,
        "policy: {}   scored: {:.1} h   wall time: {:.1} s",
        r.policy,
        r.kpis.scored_s / 3600.0,
        r.wall_time_s
    );
    for l in LINES {
        let _ = writeln!(
            s,
            "  {:<30} {:>16} {}",
            l.label,
            fmt_num((l.get)(r), l.decimals),
            l.unit
        );
    }
    if let Some(b) = &r.budget_cut {
        let _ = writeln!(
            s,
            "budget cut: {:.1} h under it · exceeded in {} spell(s), longest {:.0} s, {:.1} kWh, {:.0} s with no new load or cut to answer · work lost to caps {:.1} GPU-h, least possible {:.1} GPU-h (excess {:.3} % of the {:.0} GPU-h demanded)",
            b.cut_h,
            b.exceed_events,
            b.exceed_longest_s,
            b.exceed_kwh,
            b.exceed_uncorrected_s,
            b.work_lost_gpu_h,
            b.least_lost_gpu_h,
            b.excess_lost_pct,
            b.work_demanded_gpu_h
        );
    }
    let c = &r.checks;
    let _ = writeln!(
        s,
        "self-checks: energy ledger (independent paths) ≤ 0.01 % {} · PUE ≥ 1 {} · IT meter = rack path (GPU telemetry) ≤ 0.01 % {}",
        ok(c.energy_balance_ok),
        ok(c.pue_at_least_one),
        ok(c.it_meter_equals_racks)
    );
    s
}

fn ok(b: bool) -> &'static str {
    if b {
        "ok"
    } else {
        "FAILED"
    }
}

/// Several runs of the same scenario side by side, with each value's ratio to the first run's.
pub fn compare_table(runs: &[RunReport]) -> String {
    let Some(first) = runs.first() else {
        return String::new();
    };
    let mut s = header(first);
    let _ = write!(s, "  {:<30} {:>6}", "KPI", "unit");
    for r in runs {
        let _ = write!(s, " {:>16}", r.policy);
    }
    for r in runs.iter().skip(1) {
        let _ = write!(s, " {:>10}", format!("{}/{}", short(&r.policy), short(&first.policy)));
    }
    s.push('\n');
    for l in LINES {
        let _ = write!(s, "  {:<30} {:>6}", l.label, l.unit);
        let base = (l.get)(first);
        for r in runs {
            let _ = write!(s, " {:>16}", fmt_num((l.get)(r), l.decimals));
        }
        for r in runs.iter().skip(1) {
            let v = (l.get)(r);
            let ratio = if base != 0.0 && base.is_finite() && v.is_finite() {
                format!("{:.3}", v / base)
            } else {
                "—".into()
            };
            let _ = write!(s, " {ratio:>10}");
        }
        s.push('\n');
    }
    s
}

fn short(p: &str) -> String {
    p.split('-').map(|w| w.chars().next().unwrap_or('?')).collect()
}

/// A Markdown table of runs grouped by scenario (`per_group` consecutive runs share a scenario;
/// the first of each group is the reference for the cooling-energy ratio).
pub fn markdown_matrix(runs: &[RunReport], per_group: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| weather | period (start day) | policy | PUE | PUE p95 15 min | IT MWh | cooling MWh | cooling ratio | cooling % of IT | facility MWh | facility kWh per GPU-h of work | chiller MWh | water m³ | throttle GPU-s | near-throttle GPU-s | hottest GPU °C | shutdowns | work lost % | supply dev K | writes | fan starts | mechanical pPUE | room air max °C | chiller starts | plan facility MAPE % | plan hottest-GPU MAE K |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for group in runs.chunks(per_group.max(1)) {
        let base = group[0].kpis.cooling_energy_kwh;
        for r in group {
            let k = &r.kpis;
            let _ = writeln!(
                s,
                "| {} | {} ({:.0}) | {} | {:.4} | {:.4} | {:.1} | {:.1} | {:.3} | {:.2} | {:.1} | {:.5} | {:.1} | {:.1} | {:.0} | {:.0} | {:.1} | {} | {:.3} | {:.2} | {} | {} | {:.4} | {:.1} | {} | {} | {} |",
                r.weather,
                r.period,
                r.period_start_day,
                r.policy,
                k.pue,
                k.pue_p95_15min,
                k.it_energy_kwh / 1e3,
                k.cooling_energy_kwh / 1e3,
                if base > 0.0 { k.cooling_energy_kwh / base } else { f64::NAN },
                100.0 * k.cooling_energy_kwh / k.it_energy_kwh,
                k.facility_energy_kwh / 1e3,
                k.facility_kwh_per_gpu_h(),
                k.chiller_energy_kwh / 1e3,
                k.water_l / 1e3,
                k.throttle_gpu_s,
                k.near_throttle_gpu_s,
                k.gpu_temp_max_c,
                k.gpu_shutdowns,
                k.work_lost_pct,
                k.supply_temp_max_dev_k,
                k.setpoint_writes,
                k.rejection_fan_starts,
                // Mechanical pPUE: (IT + cooling + misc) / IT, the boundary of published
                // liquid-cooled sites that leave electrical losses out (docs/plant-physics.md §9).
                (k.it_energy_kwh + k.cooling_energy_kwh + k.misc_energy_kwh) / k.it_energy_kwh,
                k.room_air_max_c,
                k.chiller_starts,
                r.plan_accuracy
                    .filter(|a| a.scored > 0)
                    .map_or("–".to_string(), |a| format!("{:.2}", a.facility_mape_pct)),
                r.plan_accuracy
                    .filter(|a| a.scored > 0)
                    .map_or("–".to_string(), |a| format!("{:.2}", a.hottest_gpu_mae_k))
            );
        }
    }
    s
}
