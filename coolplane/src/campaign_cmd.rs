//! `coolplane scenario campaign`: the seeded fault campaign, seeds spread over the CPU cores,
//! results printed in seed order with the command that replays each failing seed.

use anyhow::{bail, Result};
use clap::Args;
use coolplane_scenario::campaign::{campaign_site, run_seed, CampaignOptions, CampaignSummary, SeedResult};
use std::time::Instant;

/// Options of `scenario campaign`.
#[derive(Args, Clone)]
pub struct CampaignArgs {
    /// Number of seeds to run.
    #[arg(long, default_value_t = 200)]
    seeds: u64,
    /// First seed (seeds `first-seed .. first-seed + seeds`).
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Built-in site or site file.
    #[arg(long, default_value = "hall-10k")]
    site: String,
    /// Scored hours per run (after one hour of warm-up).
    #[arg(long, default_value_t = 6.0)]
    hours: f64,
    /// Plant and controller step, s.
    #[arg(long, default_value_t = 60.0)]
    step: f64,
    /// Control policy.
    #[arg(long, default_value = "trim-respond")]
    policy: String,
    /// Worker threads (0: one per CPU core).
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// Print every seed's faults, not only the failing ones.
    #[arg(long)]
    verbose: bool,
}

/// Run the campaign; an error (non-zero exit) when any invariant was broken.
pub fn campaign(a: &CampaignArgs) -> Result<()> {
    if a.seeds == 0 || a.seeds > 1_000_000 {
        bail!("--seeds {}: must be within [1, 1000000]", a.seeds);
    }
    if !(a.hours.is_finite() && a.hours > 0.0 && a.hours <= 24.0 * 7.0) {
        bail!("--hours {}: must be within (0, 168]", a.hours);
    }
    if !(a.step.is_finite() && (1.0..=600.0).contains(&a.step)) {
        bail!("--step {}: must be within [1, 600] s", a.step);
    }
    let Some(last) = a.first_seed.checked_add(a.seeds - 1) else {
        bail!("--first-seed {} + --seeds {} overflows", a.first_seed, a.seeds);
    };
    coolplane_policies::by_name(&a.policy)?;
    campaign_site(&a.site)?;
    let opts = CampaignOptions {
        site: a.site.clone(),
        hours: a.hours,
        step_s: a.step,
        policy: a.policy.clone(),
        ..CampaignOptions::default()
    };
    let jobs = if a.jobs == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        a.jobs
    }
    .min(a.seeds as usize);
    let wall = Instant::now();
    let seeds: Vec<u64> = (a.first_seed..=last).collect();
    let mut results: Vec<Option<Result<SeedResult, String>>> = vec![None; seeds.len()];
    std::thread::scope(|s| {
        let chunks: Vec<_> = results.chunks_mut(seeds.len().div_ceil(jobs)).collect();
        let mut start = 0;
        for chunk in chunks {
            let my = &seeds[start..start + chunk.len()];
            start += chunk.len();
            let opts = &opts;
            s.spawn(move || {
                for (slot, &seed) in chunk.iter_mut().zip(my) {
                    *slot = Some(run_seed(seed, opts).map_err(|e| e.to_string()));
                }
            });
        }
    });
    let mut summary = CampaignSummary::new();
    let replay = |seed: u64| {
        format!(
            "coolplane scenario campaign --seeds 1 --first-seed {seed} --site {} --hours {} --step {} --policy {}",
            a.site, a.hours, a.step, a.policy
        )
    };
    let mut errors = 0;
    for (seed, r) in seeds.iter().zip(results) {
        match r {
            Some(Ok(r)) => {
                if a.verbose || r.violations_total > 0 {
                    println!(
                        "seed {seed}: faults {} · {} violation(s) · Safe-mode ticks {} · throttle {:.0} GPU-s · budget over {:.0} s",
                        r.schedule.kinds.join(", "),
                        r.violations_total,
                        r.safe_ticks,
                        r.kpis.throttle_gpu_s,
                        r.kpis.budget_exceed_longest_s
                    );
                }
                for v in &r.violations {
                    println!("  {} at {:+.2} h: {}", v.invariant, v.t_h, v.detail);
                }
                if r.violations_total > 0 {
                    println!("  replay: {}", replay(*seed));
                }
                summary.add(&r);
            }
            Some(Err(e)) => {
                errors += 1;
                println!("seed {seed}: could not run: {e}\n  replay: {}", replay(*seed));
            }
            None => {
                errors += 1;
                println!("seed {seed}: no result (worker failed)");
            }
        }
    }
    println!(
        "campaign: {} runs on {} ({} h each, step {} s, policy {}) in {:.1} s wall on {jobs} thread(s)",
        summary.runs,
        a.site,
        a.hours,
        a.step,
        a.policy,
        wall.elapsed().as_secs_f64()
    );
    println!("faults injected: {}", summary.faults_total());
    for (k, n) in &summary.faults {
        println!("  {k:<20} {n}");
    }
    println!("invariant violations: {}", summary.violations_total());
    for (k, n) in &summary.violations {
        println!("  {k:<20} {n}");
    }
    if summary.violations_total() > 0 || errors > 0 {
        bail!(
            "{} invariant violation(s) in {} seed(s), {errors} run(s) failed to start: {:?}",
            summary.violations_total(),
            summary.failing_seeds.len(),
            summary.failing_seeds
        );
    }
    Ok(())
}
