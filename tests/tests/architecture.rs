//! Architecture invariants, checked rather than only written down.
//!
//! 1. Dependency directions: each crate may depend only on the coolplane crates that
//!    ARCHITECTURE.md allows. The rules are read from ARCHITECTURE.md itself (between the
//!    `deps:begin` / `deps:end` markers), so the document and the check cannot drift apart.
//! 2. The pure crates (core, twin, policies, controller, sim-plant) do no IO, read no wall clock
//!    and use no global random number generator: their non-test sources must not name the APIs
//!    that would do so, and their dependency lists must not contain IO runtimes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// crate folder → package name.
const CRATES: &[(&str, &str)] = &[
    ("core", "coolplane-core"),
    ("twin", "coolplane-twin"),
    ("policies", "coolplane-policies"),
    ("controller", "coolplane-controller"),
    ("sim-plant", "coolplane-sim-plant"),
    ("adapters", "coolplane-adapters"),
    ("scenario", "coolplane-scenario"),
    ("sim-wire", "coolplane-sim-wire"),
    ("runtime", "coolplane-runtime"),
    ("coolplane", "coolplane"),
];

const PURE: &[&str] = &["core", "twin", "policies", "controller", "sim-plant"];

fn allowed_rules() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md exists");
    let start = text
        .find("<!-- deps:begin -->")
        .expect("ARCHITECTURE.md has a deps:begin marker");
    let end = text
        .find("<!-- deps:end -->")
        .expect("ARCHITECTURE.md has a deps:end marker");
    let mut rules = BTreeMap::new();
    for line in text[start..end].lines() {
        let Some((lhs, rhs)) = line.split_once("->") else {
            continue;
        };
        let from = lhs.trim().to_string();
        let to: BTreeSet<String> = rhs
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s != "(nothing)")
            .collect();
        rules.insert(from, to);
    }
    rules
}

/// coolplane crates in the `[dependencies]` table of a Cargo.toml (dev-dependencies excluded).
fn normal_deps(manifest: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut coolplane = BTreeSet::new();
    let mut all = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_deps = l == "[dependencies]";
            continue;
        }
        if !in_deps || l.is_empty() || l.starts_with('#') {
            continue;
        }
        let name = l.split(['=', '.', ' ']).next().unwrap_or("").trim().to_string();
        if let Some(short) = name.strip_prefix("coolplane-") {
            coolplane.insert(short.to_string());
        } else if name == "coolplane" {
            coolplane.insert(name.clone());
        }
        all.insert(name);
    }
    (coolplane, all)
}

#[test]
fn rules_cover_every_crate() {
    let rules = allowed_rules();
    for (dir, _) in CRATES {
        assert!(
            rules.contains_key(*dir),
            "ARCHITECTURE.md has no dependency rule for `{dir}`"
        );
    }
    // The rules themselves encode the invariants the design asks for.
    assert!(
        !rules["sim-plant"].contains("twin"),
        "the plant must never read the twin (and vice versa)"
    );
    assert!(
        !rules["twin"].contains("sim-plant"),
        "the twin must learn the plant, not read its parameters"
    );
    for pure in PURE {
        assert!(!rules[*pure].contains("adapters") && !rules[*pure].contains("scenario"));
    }
    // The production daemon never links the simulated plant.
    assert!(!rules["runtime"].contains("sim-plant") && !rules["runtime"].contains("sim-wire"));
}

#[test]
fn dependency_directions_hold() {
    let rules = allowed_rules();
    for (dir, _) in CRATES {
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).expect("manifest");
        let (deps, _) = normal_deps(&manifest);
        let allowed = &rules[*dir];
        for d in &deps {
            assert!(
                allowed.contains(d),
                "crate `{dir}` depends on `{d}`, which ARCHITECTURE.md does not allow (allowed: {allowed:?})"
            );
        }
    }
}

#[test]
fn pure_crates_depend_on_no_io_runtime() {
    const FORBIDDEN_DEPS: &[&str] = &[
        "tokio",
        "tokio-modbus",
        "rumqttc",
        "rumqttd",
        "influxdb2",
        "reqwest",
        "hyper",
        "axum",
    ];
    for dir in PURE {
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).expect("manifest");
        let (_, all) = normal_deps(&manifest);
        for f in FORBIDDEN_DEPS {
            assert!(!all.contains(*f), "pure crate `{dir}` depends on IO crate `{f}`");
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The source without its `#[cfg(test)]` modules (by convention the last item of a file).
fn non_test_source(text: &str) -> &str {
    match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

#[test]
fn pure_crates_do_no_io_read_no_clock_and_use_no_global_rng() {
    const FORBIDDEN: &[(&str, &str)] = &[
        ("Instant::now", "wall clock"),
        ("SystemTime", "wall clock"),
        ("std::time::Instant", "wall clock"),
        ("chrono::", "wall clock"),
        ("std::fs", "file IO"),
        ("File::open", "file IO"),
        ("std::net", "network IO"),
        ("std::io::stdin", "console IO"),
        ("println!", "console IO"),
        ("eprintln!", "console IO"),
        ("std::env::var", "environment"),
        ("thread_rng", "global RNG"),
        ("rand::rng()", "global RNG"),
        ("from_entropy", "global RNG"),
        ("from_os_rng", "global RNG"),
        ("OsRng", "global RNG"),
        ("getrandom", "global RNG"),
        ("std::thread::sleep", "wall clock"),
    ];
    let mut checked = 0;
    for dir in PURE {
        let mut files = Vec::new();
        rust_files(&root().join(dir).join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).expect("source");
            let src = non_test_source(&text);
            for (needle, what) in FORBIDDEN {
                assert!(
                    !src.contains(needle),
                    "{}: `{needle}` ({what}) in a pure crate",
                    f.display()
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "the check must actually look at the sources ({checked} files)"
    );
}

#[test]
fn the_source_scan_would_catch_a_violation() {
    // Guard against a scan that cannot fail: the same function flags a planted violation.
    let planted = "fn f() { let t = std::time::Instant::now(); }\n#[cfg(test)]\nmod tests {}";
    assert!(non_test_source(planted).contains("Instant::now"));
    let (deps, _) = normal_deps(
        "[dependencies]\ncoolplane-twin.workspace = true\n[dev-dependencies]\ncoolplane-core.workspace = true\n",
    );
    assert_eq!(deps.into_iter().collect::<Vec<_>>(), vec!["twin".to_string()]);
}
