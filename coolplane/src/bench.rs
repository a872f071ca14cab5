//! `coolplane bench`: the simulated plant's speed and memory figures (see BENCHMARKS.md).

use anyhow::Result;
use clap::Args;
use coolplane_core::signals::{Actions, CduCommand, FacilityCommand};
use coolplane_core::site::builtin_site;
use coolplane_core::weather::{SyntheticClimate, WeatherSeries};
use coolplane_sim_plant::cluster::Cluster;
use coolplane_sim_plant::workload::{SyntheticWorkload, WorkloadModel};
use coolplane_sim_plant::Plant;
use std::time::Instant;

/// Options of the benchmarks.
#[allow(missing_docs)]
#[derive(Args)]
pub struct BenchArgs {
    /// Simulated days of hall-10k to step (365 = the annual study).
    #[arg(long, default_value_t = 365.0)]
    days: f64,
    /// Step, s.
    #[arg(long, default_value_t = 60.0)]
    step: f64,
    /// Steps of campus-100k to time.
    #[arg(long, default_value_t = 200)]
    campus_steps: u32,
    /// Skip the long hall-10k run.
    #[arg(long)]
    skip_year: bool,
    /// Instead of the plant figures: the wire (Modbus latency over loopback, MQTT ingest at
    /// campus-100k scale).
    #[arg(long)]
    wire: bool,
    /// Round trips to time for the latency figures.
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// Instead of the plant figures: time loading a generated register map of this many points.
    #[arg(long)]
    map_points: Option<usize>,
    /// Instead of the plant figures: time the controller's tick with this policy on `--site`
    /// (plant, scheduler and controller in the loop; the policy's own learning day first).
    #[arg(long)]
    controller: Option<String>,
    /// Site for `--controller`.
    #[arg(long, default_value = "campus-100k")]
    site: String,
    /// Hours of controller ticks to time after the learning day (`--controller`).
    #[arg(long, default_value_t = 6.0)]
    hours: f64,
    /// With `--controller`: cut the site budget, unannounced, to this fraction of the facility
    /// power metered at the end of the learning day, for all the timed hours (the fast budget
    /// loop then sheds and holds every tick; 0.9 is a 10 % cut).
    #[arg(long)]
    cut_frac: Option<f64>,
}

/// Percentile of a sorted slice.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Controller tick times with a policy: a day of learning (not timed), then `hours` of ticks
/// timed one by one; plan ticks (the optimiser's) reported apart.
fn controller_bench(policy: &str, site_name: &str, hours: f64, dt: f64, cut_frac: Option<f64>) -> Result<()> {
    if let Some(f) = cut_frac {
        if !(f.is_finite() && f > 0.0 && f <= 1.0) {
            anyhow::bail!("--cut-frac {f}: must be within (0, 1]");
        }
    }
    let site = builtin_site(site_name)?;
    let mut plant = Plant::new(&site, 1)?;
    let gpus = plant.topology().gpu_count as u32;
    let site_tdp_w = site.gpu.tdp_w as f32 - 0.5;
    let learn = 86_400.0;
    let horizon = learn + hours * 3600.0 + dt;
    let workload = WorkloadModel::synthetic(&SyntheticWorkload::default(), gpus, horizon, 1);
    let weather = WeatherSeries::synthetic(&SyntheticClimate::default(), 1);
    let mut cluster = Cluster::new(&plant);
    let mut ctl = coolplane_controller::Controller::new(
        &site,
        coolplane_policies::by_name(policy)?,
        coolplane_controller::ControllerConfig::default(),
    );
    let steps = (horizon / dt).floor() as u64;
    let (mut all, mut plan_ticks, mut other) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plant_s, mut ctl_s) = (0.0, 0.0);
    let mut advice = None;
    let mut cut = None;
    let mut capped_ticks = 0usize;
    for k in 0..steps {
        let t = k as f64 * dt;
        if let (Some(f), None, true) = (cut_frac, cut, t >= learn) {
            let facility_kw = plant.measurements().meter.facility_power_kw.value;
            let budget_kw = f * facility_kw;
            plant.schedule_fault(coolplane_sim_plant::faults::ScheduledFault {
                start_s: t,
                end_s: None,
                fault: coolplane_sim_plant::faults::FaultKind::BudgetCut { budget_kw },
            });
            cut = Some((budget_kw, facility_kw));
        }
        cluster.advance(t, &workload, &mut plant, advice.as_ref());
        let t0 = Instant::now();
        let actions = ctl.tick(t, plant.measurements());
        let el = t0.elapsed().as_secs_f64();
        let planned = !ctl.take_plans().is_empty();
        if actions.placement.is_some() {
            advice = actions.placement.clone();
        }
        if t >= learn && plant.measurements().gpus.power_limit_w.iter().any(|&w| w < site_tdp_w) {
            capped_ticks += 1;
        }
        let t1 = Instant::now();
        plant.step(dt, &weather.sample(t), &actions);
        if t >= learn {
            plant_s += t1.elapsed().as_secs_f64();
            ctl_s += el;
            all.push(el);
            if planned {
                plan_ticks.push(el);
            } else {
                other.push(el);
            }
        }
    }
    for v in [&mut all, &mut plan_ticks, &mut other] {
        v.sort_by(f64::total_cmp);
    }
    let ms = |v: &[f64], p: f64| pct(v, p) * 1e3;
    println!(
        "controller tick, policy {policy}, {site_name} ({gpus} GPUs), {} ticks of {dt} s after a learning day:",
        all.len()
    );
    println!(
        "  all ticks: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(&all, 0.5),
        ms(&all, 0.99),
        ms(&all, 1.0)
    );
    if plan_ticks.is_empty() {
        println!("  plan ticks: none (the policy published no plan)");
    } else {
        println!(
            "  plan ticks ({}, the optimiser every 15 min): p50 {:.2} ms, p99 {:.2} ms",
            plan_ticks.len(),
            ms(&plan_ticks, 0.5),
            ms(&plan_ticks, 0.99)
        );
    }
    println!(
        "  other ticks ({}): p50 {:.2} ms, p99 {:.2} ms",
        other.len(),
        ms(&other, 0.5),
        ms(&other, 0.99)
    );
    if let Some((budget_kw, facility_kw)) = cut {
        println!(
            "  budget cut, unannounced, at the first timed tick to {budget_kw:.0} kW ({:.0} % of the {facility_kw:.0} kW metered then): GPU caps in force in {capped_ticks} of {} ticks",
            100.0 * budget_kw / facility_kw,
            all.len()
        );
    }
    println!(
        "  compute-time ratio (controller time / simulated time): {:.2e}; controller / plant step time: {:.2}",
        ctl_s / (all.len() as f64 * dt),
        ctl_s / plant_s.max(1e-12)
    );
    Ok(())
}

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn heartbeat(plant: &Plant) -> Actions {
    let t = plant.topology();
    Actions {
        cdus: vec![
            CduCommand {
                heartbeat: true,
                ..Default::default()
            };
            t.cdus.len()
        ],
        facilities: vec![
            FacilityCommand {
                heartbeat: true,
                ..Default::default()
            };
            t.halls.len()
        ],
        ..Default::default()
    }
}

/// Step a site for `steps` steps of `dt` with the synthetic workload, weather and scheduler.
/// Returns (wall seconds of the stepping loop, plant).
fn step_site(name: &str, steps: u64, dt: f64, seed: u64) -> Result<(f64, Plant)> {
    let site = builtin_site(name)?;
    let mut plant = Plant::new(&site, seed)?;
    let gpus = plant.topology().gpu_count as u32;
    let horizon = steps as f64 * dt + dt;
    let workload = WorkloadModel::synthetic(&SyntheticWorkload::default(), gpus, horizon, seed);
    let weather = WeatherSeries::synthetic(&SyntheticClimate::default(), seed);
    let mut cluster = Cluster::new(&plant);
    let actions = heartbeat(&plant);
    let t0 = Instant::now();
    for k in 0..steps {
        let t = k as f64 * dt;
        cluster.advance(t, &workload, &mut plant, None);
        plant.step(dt, &weather.sample(t), &actions);
    }
    Ok((t0.elapsed().as_secs_f64(), plant))
}

/// The reference the plant's speed is judged against: a bare per-GPU loop over flat arrays of the
/// same size (power from utilisation, exact first-order die lag, a sum), no leakage, caps, racks or
/// loops. Returns ns per GPU-step. The plant's ns per GPU-step divided by this is the machine-
/// independent figure kept in BENCHMARKS.md.
fn bare_loop_ns(gpus: usize, steps: u64) -> f64 {
    let mut temp = vec![60.0f32; gpus];
    let r: Vec<f32> = (0..gpus).map(|i| 0.02 + 1e-6 * (i % 97) as f32).collect();
    let util: Vec<f32> = (0..gpus).map(|i| 0.5 + 0.004 * (i % 101) as f32).collect();
    let k = (-4.0f32).exp();
    let t0 = Instant::now();
    let mut total = 0.0f32;
    for s in 0..steps {
        let t_in = std::hint::black_box(40.0 + (s % 7) as f32 * 0.1);
        let mut sum = 0.0f32;
        for ((t, &rr), &u) in temp.iter_mut().zip(&r).zip(&util) {
            let p = 150.0 + u * 850.0;
            let t_ss = t_in + p * rr;
            *t = t_ss + (*t - t_ss) * k;
            sum += p;
        }
        total += std::hint::black_box(sum);
    }
    std::hint::black_box(total);
    t0.elapsed().as_secs_f64() / (steps as f64 * gpus as f64) * 1e9
}

pub fn run(a: &BenchArgs) -> Result<()> {
    if a.wire {
        return crate::wire_bench::run(a.samples);
    }
    if let Some(p) = &a.controller {
        return controller_bench(p, &a.site, a.hours, a.step, a.cut_frac);
    }
    if a.cut_frac.is_some() {
        anyhow::bail!("--cut-frac times the controller's budget loop: it needs --controller <policy>");
    }
    if let Some(n) = a.map_points {
        let text = coolplane_adapters::regmap::generated_map_toml(n);
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t0 = Instant::now();
            let map = coolplane_adapters::regmap::RegisterMap::from_toml_str("generated.toml", &text)?;
            best = best.min(t0.elapsed().as_secs_f64());
            anyhow::ensure!(map.points.len() == n.min(65_536), "loaded {} points", map.points.len());
        }
        println!(
            "register map of {} points ({} KiB of TOML): loaded in {:.1} ms (best of 5)",
            n.min(65_536),
            text.len() / 1024,
            best * 1e3
        );
        return Ok(());
    }
    println!(
        "coolplane {} bench (one thread; release build)",
        env!("CARGO_PKG_VERSION")
    );
    println!(
        "per-GPU kernel: clone picked by the run-time CPU-feature dispatcher: {}",
        coolplane_sim_plant::gpu::kernel_clone()
    );
    if !a.skip_year {
        let steps = (a.days * 86_400.0 / a.step).round() as u64;
        let (secs, plant) = step_site("hall-10k", steps, a.step, 1)?;
        println!(
            "hall-10k: {steps} steps of {} s ({:.1} simulated days, {} GPUs, synthetic weather + workload + scheduler): {:.2} s wall, {:.1} µs/step, {:.2} ns per GPU-step, {:.0}× real time",
            a.step,
            a.days,
            plant.topology().gpu_count,
            secs,
            secs / steps as f64 * 1e6,
            secs / steps as f64 / plant.topology().gpu_count as f64 * 1e9,
            steps as f64 * a.step / secs
        );
        let gpus = plant.topology().gpu_count;
        let bare = bare_loop_ns(gpus, (steps / 10).max(1000));
        let plant_ns = secs / steps as f64 / gpus as f64 * 1e9;
        println!(
            "bare per-GPU loop ({gpus} GPUs, power + exact die lag + sum): {bare:.2} ns per GPU-step; plant / bare = {:.1}",
            plant_ns / bare
        );
    }
    // Memory: build campus-100k, load every GPU and step it so that every array is touched.
    let rss0 = rss_kib();
    let site = builtin_site("campus-100k")?;
    let mut plant = Plant::new(&site, 1)?;
    let gpus = plant.topology().gpu_count;
    plant.ensure_slots(2);
    for g in 0..gpus {
        plant.assign_gpu(g as u32, 1);
    }
    plant.set_slot_util(1, 0.8);
    let actions = heartbeat(&plant);
    let weather = WeatherSeries::synthetic(&SyntheticClimate::default(), 1);
    for k in 0..3 {
        plant.step(a.step, &weather.sample(k as f64 * a.step), &actions);
    }
    let rss1 = rss_kib();
    let state_bytes = plant.per_gpu_state_bytes();
    drop(plant);
    // Warm the campus up for an hour of simulated time, then time steps.
    let warm = (3600.0 / a.step) as u64;
    let (_, _) = step_site("campus-100k", 1, a.step, 1)?;
    let total = warm + a.campus_steps as u64;
    let (secs_all, plant) = step_site("campus-100k", total, a.step, 1)?;
    // step_site times the whole loop; time the last campus_steps separately by a second run's difference.
    let (secs_warm, _) = step_site("campus-100k", warm, a.step, 1)?;
    let per_step = (secs_all - secs_warm).max(0.0) / a.campus_steps as f64;
    println!(
        "campus-100k: {gpus} GPUs, {} racks, {} CDUs: {:.3} ms per {} s step (mean of {} steps after 1 h warm-up)",
        plant.topology().racks.len(),
        plant.topology().cdus.len(),
        per_step * 1e3,
        a.step,
        a.campus_steps
    );
    println!("memory: per-GPU plant state and telemetry {state_bytes} bytes/GPU (array element sizes)");
    if let (Some(r0), Some(r1)) = (rss0, rss1) {
        println!(
            "memory: resident set grew by {} KiB building and stepping campus-100k = {:.0} bytes/GPU (whole plant incl. racks, CDUs, measurements)",
            r1.saturating_sub(r0),
            (r1.saturating_sub(r0) * 1024) as f64 / gpus as f64
        );
    }
    Ok(())
}
