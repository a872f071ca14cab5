//! `coolplane map check FILE --role ROLE`: a register map against the point names the daemon
//! reads and writes for a device of that role (`coolplane_adapters::points`, the list the daemon
//! itself checks at start-up), and `coolplane map points`: that list.

use anyhow::{Context, Result};
use clap::Subcommand;
use coolplane_adapters::points::{check_map, reference_markdown, MapCheck, PointSpec, Role};
use coolplane_adapters::regmap::RegisterMap;

/// `coolplane map ...`.
#[derive(Subcommand)]
pub enum MapCommand {
    /// Check a register map for a device role: required points (missing ones fail, exit code 1),
    /// optional points, plausible ranges, write limits and units (warnings).
    Check {
        /// Map file (TOML), or a built-in map: `builtin:coolplane-cdu`, `builtin:coolplane-facility`,
        /// `builtin:coolplane-meter`, `builtin:coolplane-2pic-tank`.
        file: String,
        /// Device role: cdu, tank (a two-phase immersion tank's skid), facility or meter.
        #[arg(long)]
        role: String,
        /// Print one JSON object on stdout instead of the report.
        #[arg(long)]
        json: bool,
    },
    /// Print the point names each role reads and writes (Markdown; docs/point-names.md).
    Points,
}

/// Run a `map` command; `Ok(false)` when the map fails the check (exit code 1).
pub fn run(cmd: &MapCommand) -> Result<bool> {
    match cmd {
        MapCommand::Check { file, role, json } => {
            let role = Role::from_name(role).with_context(|| {
                format!(
                    "--role `{role}`: unknown role (one of {})",
                    Role::ALL.map(Role::as_str).join(", ")
                )
            })?;
            let map = load(file)?;
            let c = check_map(&map, role);
            if *json {
                println!("{}", serde_json::to_string(&json_report(file, &map, &c))?);
            } else {
                print!("{}", report(file, &map, &c));
            }
            Ok(c.ok())
        }
        MapCommand::Points => {
            print!("{}", reference_markdown());
            Ok(true)
        }
    }
}

fn load(file: &str) -> Result<RegisterMap> {
    if let Some(name) = file.strip_prefix("builtin:") {
        let text = coolplane_runtime::builtin_map(name).with_context(|| {
            format!("no built-in register map `{name}` (coolplane-cdu, coolplane-facility, coolplane-meter, coolplane-2pic-tank)")
        })?;
        return Ok(RegisterMap::from_toml_str(file, text)?);
    }
    let text = crate::read_bounded(std::path::Path::new(file), "register map")?;
    Ok(RegisterMap::from_toml_str(file, &text)?)
}

fn spec_json(p: &PointSpec) -> serde_json::Value {
    serde_json::json!({
        "name": p.name,
        "writable": p.writable,
        "unit": p.unit,
        "used_for": p.used_for,
        "if_missing": p.if_missing,
    })
}

fn json_report(file: &str, map: &RegisterMap, c: &MapCheck) -> serde_json::Value {
    serde_json::json!({
        "file": file,
        "device": map.name,
        "role": c.role,
        "ok": c.ok(),
        "points": map.points.len(),
        "missing_required": c.missing_required.iter().map(spec_json).collect::<Vec<_>>(),
        "errors": c.errors,
        "missing_optional": c.missing_optional.iter().map(spec_json).collect::<Vec<_>>(),
        "warnings": c.warnings,
        "unused": c.unused,
    })
}

fn report(file: &str, map: &RegisterMap, c: &MapCheck) -> String {
    let mut out = String::new();
    let required = c.role.required();
    let usable = required
        .iter()
        .filter(|(n, _)| !c.missing_required.iter().any(|p| p.name == *n) && !c.errors.iter().any(|f| f.point == *n))
        .count();
    let required = required.len();
    let head = if c.ok() { "OK" } else { "FAILED" };
    out.push_str(&format!(
        "{file} ({}, {} points) as a {}: {head}: {} of {required} required points present and usable, {} optional points missing, {} warnings\n",
        map.name,
        map.points.len(),
        c.role,
        usable,
        c.missing_optional.len(),
        c.warnings.len()
    ));
    for p in &c.missing_required {
        out.push_str(&format!(
            "  MISSING required point `{}`{}{}: {}\n",
            p.name,
            if p.unit.is_empty() {
                String::new()
            } else {
                format!(" ({})", p.unit)
            },
            if p.writable { ", writable" } else { "" },
            p.if_missing
        ));
    }
    for f in &c.errors {
        out.push_str(&format!("  ERROR `{}`: {}\n", f.point, f.message));
    }
    for p in &c.missing_optional {
        out.push_str(&format!("  missing optional point `{}`: {}\n", p.name, p.if_missing));
    }
    for f in &c.warnings {
        out.push_str(&format!("  warning `{}`: {}\n", f.point, f.message));
    }
    if !c.unused.is_empty() {
        out.push_str(&format!("  not read for a {}: {}\n", c.role, c.unused.join(", ")));
    }
    out
}
