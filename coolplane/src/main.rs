//! # coolplane
//!
//! The command-line entry point: scenario runs and comparisons on the simulated plant, site-file
//! and register-map checks, the performance-curve fit and benchmarks. This binary is the only place that knows the
//! command line, reads configuration files for the user and prints reports.

mod api_bench;
mod bench;
mod campaign_cmd;
mod logging;
mod map_cmd;
mod twin_cmd;
mod wire;
mod wire_bench;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use coolplane_core::site::{builtin_site_toml, Site, BUILTIN_SITES};
use coolplane_scenario::plot::{write_plots, PlotMeta};
use coolplane_scenario::report::{compare_table, table};
use coolplane_scenario::spec::{ScenarioSpec, WeatherSpec};
use coolplane_scenario::{run, Progress, RunOptions, RunResult};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "coolplane",
    version,
    about = "Energy and liquid-cooling control plane for GPU clusters, with a simulated plant"
)]
struct Cli {
    /// Log format on stderr: `human` or `json` (one object a line). The level comes from
    /// `RUST_LOG` (default `info`).
    #[arg(long, global = true, value_enum, default_value = "human")]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenarios on the simulated plant and report the KPIs it computes.
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
    /// Show or check site descriptions.
    Site {
        #[command(subcommand)]
        command: SiteCommand,
    },
    /// Fit the performance-vs-power-cap exponent α from the Zeus power-limit sweeps.
    FitPerf {
        /// Directory holding summary_power_a40.csv and summary_power_v100.csv.
        #[arg(long, default_value = "../shared/data")]
        data: PathBuf,
    },
    /// Benchmarks of the simulated plant (figures for BENCHMARKS.md).
    Bench(bench::BenchArgs),
    /// The budget API on a site with many active leases, for an external load generator.
    BenchApiServer(api_bench::ApiBenchArgs),
    /// One command: the simulated plant on Modbus TCP and MQTT, an MQTT broker, and the
    /// controller closing the loop over the wire, with a live status line.
    Demo(wire::DemoArgs),
    /// The production daemon: real devices and an external broker, from a configuration file.
    Run(wire::RunArgs),
    /// The digital twin: `twin eval` trains it on one period and tests it on another.
    Twin {
        #[command(subcommand)]
        command: twin_cmd::TwinCommand,
    },
    /// Register maps: `map check FILE --role cdu` says what a map lacks for the daemon.
    Map {
        #[command(subcommand)]
        command: map_cmd::MapCommand,
    },
    /// The simulated plant as devices on the wire.
    SimPlant {
        #[command(subcommand)]
        command: SimPlantCommand,
    },
}

#[derive(Subcommand)]
enum SimPlantCommand {
    /// Serve every CDU, facility system and the meter as Modbus TCP servers, racks on MQTT.
    Serve(wire::ServeArgs),
}

#[derive(Subcommand)]
enum ScenarioCommand {
    /// Run one scenario with one policy.
    Run {
        #[command(flatten)]
        common: ScenarioArgs,
        /// Control policy: vendor-default, trim-respond, coordinated, coordinated-auto (coordinated leaving the heat-rejection mode to the firmware), or oracle (the perfect-knowledge reference, simulation only; `oracle:cdu-supply=S:cdu-flow=Q` holds the CDUs at S °C and Q of design flow and searches only the facility water and the mode). `coordinated` and `coordinated-auto` take a price per setpoint write after their name: `coordinated:write-kwh=12` (kWh per write, default 1.5) and `:write-hold-h=H` (longest time a write charge is spread over, default 4).
        #[arg(long, default_value = "trim-respond")]
        policy: String,
    },
    /// Run several policies on the same scenario and print them side by side.
    Compare {
        #[command(flatten)]
        common: ScenarioArgs,
        /// Comma-separated policies; ratios are to the first.
        #[arg(long, default_value = "vendor-default,trim-respond", value_delimiter = ',')]
        policies: Vec<String>,
    },
    /// Run every policy on every weather × period and print one Markdown table (the baseline study).
    Matrix {
        /// Built-in site or site file.
        #[arg(long, default_value = "hall-10k")]
        site: String,
        /// Comma-separated weather sources (`synthetic` or .epw files).
        #[arg(long, value_delimiter = ',', required = true)]
        weather: Vec<String>,
        /// Comma-separated periods.
        #[arg(long, value_delimiter = ',', default_value = "typical-week,peak-heat-week")]
        periods: Vec<String>,
        /// Comma-separated policies; ratios are to the first.
        #[arg(long, value_delimiter = ',', default_value = "vendor-default,trim-respond")]
        policies: Vec<String>,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Simulation step, s.
        #[arg(long, default_value_t = 60.0)]
        step: f64,
        /// Scale the GPUs' leakage temperature coefficient κ by this factor (sensitivity studies).
        #[arg(long, default_value_t = 1.0)]
        leakage_scale: f64,
        /// Warm-up before each scored window, h (never scored). A policy that learns the plant
        /// first (`coordinated`: about a day) makes its one-off transition from the fallback in
        /// the scored window unless this is longer than its learning.
        #[arg(long, default_value_t = 24.0)]
        warmup_h: f64,
        /// Print no progress.
        #[arg(long)]
        quiet: bool,
    },
    /// List the scenario files shipped with the project.
    List,
    /// Seeded fault campaign: random fault schedules per seed, invariants checked on every run;
    /// exits non-zero on any violation and prints the command that replays a failing seed.
    Campaign(campaign_cmd::CampaignArgs),
}

#[derive(Args, Clone)]
struct ScenarioArgs {
    /// Scenario file (TOML); the options below override its fields.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Built-in site (hall-10k, supernode-640, campus-100k, supernode-2pic) or a site file.
    #[arg(long)]
    site: Option<String>,
    /// `synthetic` or an EnergyPlus .epw file.
    #[arg(long)]
    weather: Option<String>,
    /// peak-heat-week, typical-week, cold-week or year.
    #[arg(long)]
    period: Option<String>,
    /// Seed of every random effect.
    #[arg(long)]
    seed: Option<u64>,
    /// Simulation step, s.
    #[arg(long)]
    step: Option<f64>,
    /// Warm-up before scoring, h.
    #[arg(long)]
    warmup_h: Option<f64>,
    /// Write KPIs (JSON), time series (CSV), plots (PNG) and events into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print exactly one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Print no progress.
    #[arg(long)]
    quiet: bool,
}

#[derive(Subcommand)]
enum SiteCommand {
    /// Print a built-in site's TOML.
    Show {
        /// hall-10k, supernode-640 or campus-100k.
        name: String,
    },
    /// Validate a site file and print its size.
    Check {
        /// Path to a site TOML file, or a built-in name.
        file: String,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
    if let Err(e) = dispatch(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Scenario { command } => match command {
            ScenarioCommand::Run { common, policy } => scenario_run(&common, &[policy]),
            ScenarioCommand::Compare { common, policies } => scenario_run(&common, &policies),
            ScenarioCommand::Matrix {
                site,
                weather,
                periods,
                policies,
                seed,
                step,
                leakage_scale,
                warmup_h,
                quiet,
            } => matrix(
                &site,
                &weather,
                &periods,
                &policies,
                seed,
                step,
                leakage_scale,
                warmup_h,
                quiet,
            ),
            ScenarioCommand::Campaign(a) => campaign_cmd::campaign(&a),
            ScenarioCommand::List => {
                for (name, text) in shipped_scenarios() {
                    let spec = ScenarioSpec::from_toml_str(name, text)?;
                    println!("scenarios/{name:<34} {}", spec.scenario.description);
                }
                Ok(())
            }
        },
        Command::Site { command } => match command {
            SiteCommand::Show { name } => {
                let text = builtin_site_toml(&name).with_context(|| {
                    format!(
                        "unknown built-in site `{name}` (built-in: {})",
                        BUILTIN_SITES.join(", ")
                    )
                })?;
                print!("{text}");
                Ok(())
            }
            SiteCommand::Check { file } => {
                let site = match builtin_site_toml(&file) {
                    Some(t) => Site::from_toml_str(&file, t)?,
                    None => {
                        let text = read_bounded(std::path::Path::new(&file), "site file")?;
                        Site::from_toml_str(&file, &text)?
                    }
                };
                println!(
                    "{}: ok — {} halls, {} CDUs, {} racks, {} GPUs, {:.0} kW IT at TDP, budget {:.0} kW",
                    site.site.name,
                    site.hall_count(),
                    site.cdu_count(),
                    site.rack_count(),
                    site.gpu_count(),
                    site.design_it_kw(),
                    site.site.power_budget_kw
                );
                Ok(())
            }
        },
        Command::FitPerf { data } => fit_perf(&data),
        Command::Bench(args) => bench::run(&args),
        Command::Twin { command } => twin_cmd::run(&command),
        Command::BenchApiServer(args) => api_bench::run(&args),
        Command::Demo(args) => wire::demo(&args),
        Command::Run(args) => wire::daemon(&args),
        Command::SimPlant {
            command: SimPlantCommand::Serve(args),
        } => wire::serve(&args),
        Command::Map { command } => {
            if !map_cmd::run(&command)? {
                let _ = std::io::stdout().flush();
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// The scenario files under `scenarios/`, embedded so `scenario list` works anywhere.
fn shipped_scenarios() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "default-synthetic.toml",
            include_str!("../../scenarios/default-synthetic.toml"),
        ),
        (
            "beijing-typical-week.toml",
            include_str!("../../scenarios/beijing-typical-week.toml"),
        ),
        (
            "singapore-peak-heat.toml",
            include_str!("../../scenarios/singapore-peak-heat.toml"),
        ),
        ("pump-trip.toml", include_str!("../../scenarios/pump-trip.toml")),
        (
            "heat-wave-budget-cut.toml",
            include_str!("../../scenarios/heat-wave-budget-cut.toml"),
        ),
        ("helios-trace.toml", include_str!("../../scenarios/helios-trace.toml")),
        (
            "supernode-tower.toml",
            include_str!("../../scenarios/supernode-tower.toml"),
        ),
    ]
}

fn build_spec(a: &ScenarioArgs) -> Result<(ScenarioSpec, PathBuf)> {
    let (mut spec, base) = match &a.scenario {
        Some(path) => {
            let text = read_bounded(path, "scenario file")?;
            let spec = ScenarioSpec::from_toml_str(&path.display().to_string(), &text)?;
            (
                spec,
                path.parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from(".")),
            )
        }
        None => (ScenarioSpec::default_for_site("hall-10k"), PathBuf::from(".")),
    };
    // Command-line paths are relative to the working directory, not to the scenario file.
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let abs = |p: &str| -> String {
        if p == "synthetic" || builtin_site_toml(p).is_some() {
            p.to_string()
        } else {
            cwd.join(p).display().to_string()
        }
    };
    if let Some(s) = &a.site {
        spec.scenario.site = abs(s);
    }
    if let Some(w) = &a.weather {
        spec.weather = WeatherSpec {
            source: abs(w),
            ..spec.weather.clone()
        };
    }
    if let Some(p) = &a.period {
        spec.weather.period = p.clone();
        spec.weather.start_day = None;
        spec.weather.days = None;
    }
    if let Some(s) = a.seed {
        spec.scenario.seed = s;
    }
    if let Some(s) = a.step {
        spec.scenario.step_s = s;
    }
    if let Some(h) = a.warmup_h {
        spec.scenario.warmup_h = h;
    }
    spec.check()?;
    Ok((spec, base))
}

fn scenario_run(a: &ScenarioArgs, policies: &[String]) -> Result<()> {
    if policies.is_empty() {
        bail!("no policy given");
    }
    let mut pols = Vec::new();
    for p in policies {
        pols.push(coolplane_policies::by_name(p.trim())?);
    }
    let (spec, base) = build_spec(a)?;
    let scenario = spec.resolve(&base)?;
    let opts = RunOptions {
        record: a.out.is_some(),
        ..Default::default()
    };
    let mut results: Vec<RunResult> = Vec::new();
    let n = pols.len();
    for (i, policy) in pols.into_iter().enumerate() {
        let label = format!("{} [{}/{}]", policy.name(), i + 1, n);
        let mut progress = progress_printer(label, a.quiet);
        let r = run(&scenario, policy, &opts, &mut progress)?;
        finish_progress(a.quiet);
        results.push(r);
    }
    if let Some(dir) = &a.out {
        for r in &results {
            let d = if results.len() > 1 {
                dir.join(&r.report.policy)
            } else {
                dir.clone()
            };
            write_outputs(&d, r, &scenario)?;
        }
        if !a.quiet {
            eprintln!("wrote {}", dir.display());
        }
    }
    let reports: Vec<_> = results.iter().map(|r| r.report.clone()).collect();
    if a.json {
        let v = if reports.len() == 1 {
            serde_json::to_value(&reports[0])?
        } else {
            serde_json::json!({ "runs": reports })
        };
        println!("{}", serde_json::to_string(&v)?);
    } else if reports.len() == 1 {
        print!("{}", table(&reports[0]));
    } else {
        print!("{}", compare_table(&reports));
    }
    if reports.iter().any(|r| !r.checks.all_ok()) {
        bail!("a self-check of the harness failed (see `checks` in the report)");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn matrix(
    site: &str,
    weathers: &[String],
    periods: &[String],
    policies: &[String],
    seed: u64,
    step: f64,
    leakage_scale: f64,
    warmup_h: f64,
    quiet: bool,
) -> Result<()> {
    if !(leakage_scale.is_finite() && leakage_scale >= 0.0) {
        bail!("--leakage-scale must be a finite number ≥ 0, got {leakage_scale}");
    }
    let mut rows = Vec::new();
    for w in weathers {
        for p in periods {
            let args = ScenarioArgs {
                scenario: None,
                site: Some(site.to_string()),
                weather: Some(w.clone()),
                period: Some(p.clone()),
                seed: Some(seed),
                step: Some(step),
                warmup_h: Some(warmup_h),
                out: None,
                json: false,
                quiet,
            };
            let (spec, base) = build_spec(&args)?;
            let mut scenario = spec.resolve(&base)?;
            let g = &mut scenario.site.gpu;
            g.leakage_exp_per_k = Some(g.leakage_kappa() * leakage_scale);
            scenario
                .site
                .validate()
                .context("the site with the leakage coefficient scaled by --leakage-scale")?;
            for pol in policies {
                let policy = coolplane_policies::by_name(pol.trim())?;
                let mut progress = progress_printer(format!("{} {} {}", scenario.weather_name, p, pol), quiet);
                let r = run(&scenario, policy, &RunOptions::default(), &mut progress)?;
                finish_progress(quiet);
                if !r.report.checks.all_ok() {
                    bail!(
                        "self-check failed for {} {} {}: {:?}",
                        scenario.weather_name,
                        p,
                        pol,
                        r.report.checks
                    );
                }
                rows.push(r.report);
            }
        }
    }
    print!("{}", coolplane_scenario::report::markdown_matrix(&rows, policies.len()));
    Ok(())
}

fn write_outputs(dir: &Path, r: &RunResult, scenario: &coolplane_scenario::Scenario) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating `{}`", dir.display()))?;
    std::fs::write(dir.join("kpis.json"), serde_json::to_string_pretty(&r.report)?).context("writing kpis.json")?;
    std::fs::write(dir.join("series.csv"), r.series.to_csv()).context("writing series.csv")?;
    let mut ev = format!(
        "# controller events ({}): plant time s, severity, message\n",
        r.events.len()
    );
    for e in &r.events {
        ev.push_str(&format!("{:>10.0} s  {:?}  {}\n", e.t_s, e.severity, e.message));
    }
    std::fs::write(dir.join("events.log"), ev).context("writing events.log")?;
    if !r.plans.is_empty() {
        let mut lines = String::new();
        for p in &r.plans {
            lines.push_str(&serde_json::to_string(p)?);
            lines.push('\n');
        }
        std::fs::write(dir.join("plans.jsonl"), lines).context("writing plans.jsonl")?;
    }
    let meta = PlotMeta {
        title: format!(
            "{} · {} · {} {} · seed {}",
            r.report.site, r.report.policy, scenario.weather_name, scenario.period_name, r.report.seed
        ),
    };
    write_plots(&r.series, &meta, dir).with_context(|| format!("writing plots into `{}`", dir.display()))?;
    Ok(())
}

fn progress_printer(label: String, quiet: bool) -> impl FnMut(Progress) {
    let tty = std::io::stderr().is_terminal();
    let mut last_decile = -1i64;
    move |p: Progress| {
        if quiet {
            return;
        }
        let f = p.fraction();
        let line = format!(
            "{label}: {:5.1} % · simulated {:.1} of {:.1} days · {:.1} s elapsed · ETA {:.1} s",
            f * 100.0,
            p.done_s / 86_400.0,
            p.total_s / 86_400.0,
            p.elapsed.as_secs_f64(),
            p.eta().as_secs_f64()
        );
        if tty {
            eprint!("\r{line}   ");
            let _ = std::io::stderr().flush();
        } else {
            let decile = (f * 10.0).floor() as i64;
            if decile != last_decile {
                last_decile = decile;
                eprintln!("{line}");
            }
        }
    }
}

fn finish_progress(quiet: bool) {
    if !quiet && std::io::stderr().is_terminal() {
        eprintln!();
    }
}

fn fit_perf(dir: &Path) -> Result<()> {
    use coolplane_sim_plant::perf_fit::{fit_zeus_models, DEFAULT_PERF_ALPHA};
    let a40 = std::fs::read_to_string(dir.join("summary_power_a40.csv"))
        .with_context(|| format!("reading {}", dir.join("summary_power_a40.csv").display()))?;
    let v100 = std::fs::read_to_string(dir.join("summary_power_v100.csv"))
        .with_context(|| format!("reading {}", dir.join("summary_power_v100.csv").display()))?;
    let rep = fit_zeus_models(&[("A40", a40.as_str()), ("V100", v100.as_str())])?;
    println!(
        "perf = (P/P_dem)^α, least squares of ln perf on ln(P/P_dem) through the origin (Zeus power-limit sweeps)"
    );
    println!(
        "{:<10} {:>7} {:>7} {:>10} {:>13} {:>12}",
        "data", "α", "points", "RMSE perf", "RMSE ln perf", "max |err|"
    );
    for (tag, f) in rep
        .per_model
        .iter()
        .map(|(t, f)| (t.as_str(), f))
        .chain(std::iter::once(("combined", &rep.combined)))
    {
        println!(
            "{:<10} {:>7.3} {:>7} {:>10.3} {:>13.3} {:>12.3}",
            tag, f.alpha, f.points, f.rmse_perf, f.rmse_ln_perf, f.max_abs_err_perf
        );
    }
    println!("built-in default α = {DEFAULT_PERF_ALPHA} (the combined fit, rounded); sites set it as gpu.perf_alpha");
    println!();
    println!(
        "knee curve: perf = 1 − s1·(1 − x) for x ≥ knee, 1 − s1·(1 − knee) − s2·(knee − x) below (x = P/P_dem); least squares of perf"
    );
    println!(
        "{:<10} {:>6} {:>6} {:>6} {:>7} {:>10} {:>18} {:>10} {:>12}",
        "data", "s1", "knee", "s2", "points", "RMSE perf", "RMSE shallow (n)", "max |err|", "noise floor"
    );
    for (tag, k) in rep
        .per_model_knee
        .iter()
        .map(|(t, k)| (t.as_str(), k))
        .chain(std::iter::once(("combined", &rep.combined_knee)))
    {
        println!(
            "{:<10} {:>6.3} {:>6.3} {:>6.3} {:>7} {:>10.3} {:>12.3} ({:>3}) {:>10.3} {:>12.3}",
            tag,
            k.curve.shallow_slope,
            k.curve.knee,
            k.curve.deep_slope,
            k.points,
            k.rmse_perf,
            k.rmse_shallow,
            k.shallow_points,
            k.max_abs_err_perf,
            k.noise_floor_rmse
        );
    }
    println!(
        "shallow: caps leaving x ≥ {} (≤ 20 % of power removed); noise floor: RMSE of each point against the mean of its \
         neighbours within ±0.025 of x (scatter between workloads no curve of x can remove); sites set gpu.perf_knee",
        coolplane_sim_plant::perf_fit::SHALLOW_RATIO
    );
    Ok(())
}

/// Largest site or scenario file the command line reads, bytes (a site file is a few kB).
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Read a text file of at most [`MAX_CONFIG_BYTES`] (a device such as `/dev/zero` is refused
/// instead of filling memory).
fn read_bounded(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).with_context(|| format!("reading {what} `{}`", path.display()))?;
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {what} `{}`", path.display()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        anyhow::bail!(
            "{what} `{}` is larger than {} MiB: not a {what}",
            path.display(),
            MAX_CONFIG_BYTES >> 20
        );
    }
    String::from_utf8(bytes).with_context(|| format!("{what} `{}` is not UTF-8 text", path.display()))
}
