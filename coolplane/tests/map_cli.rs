//! `coolplane map check FILE --role ROLE` as an operator runs it: every shipped map passes for its
//! role, a missing required point fails naming it (exit code 1), the wrong role fails, an unknown
//! role and a file that is not a map are clear errors (exit code 2), `--json` prints one object.

use std::path::PathBuf;
use std::process::{Command, Output};

fn coolplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_coolplane"))
        .args(args)
        .output()
        .expect("run coolplane")
}

fn maps(name: &str) -> String {
    format!("{}/../maps/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A scratch file in a directory of its own test (`test`), removed by that test.
fn scratch(test: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("coolplane-map-cli-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn every_shipped_map_passes_for_its_role() {
    for (file, role) in [
        (maps("coolplane-cdu.toml"), "cdu"),
        (maps("coolplane-2pic-tank.toml"), "tank"),
        (maps("coolplane-2pic-tank.toml"), "cdu"),
        (maps("coolplane-facility.toml"), "facility"),
        (maps("coolplane-meter.toml"), "meter"),
        (maps("example-vendor-cdu.toml"), "cdu"),
        ("builtin:coolplane-cdu".to_string(), "cdu"),
    ] {
        let o = coolplane(&["map", "check", &file, "--role", role]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{file} {role}: {out}{err}");
        assert!(out.contains(&format!("as a {role}: OK")), "{out}");
        assert!(!out.contains("MISSING") && !out.contains("ERROR"), "{out}");
    }
    // The project's own maps lack nothing and draw no warning; the vendor's example names what
    // the daemon will not have from it, and what it leaves unread.
    let o = coolplane(&["map", "check", &maps("coolplane-cdu.toml"), "--role", "cdu"]);
    let (out, _) = text(&o);
    assert!(
        out.contains("6 of 6 required points present and usable, 0 optional points missing, 0 warnings"),
        "{out}"
    );
    let o = coolplane(&["map", "check", &maps("example-vendor-cdu.toml"), "--role", "cdu"]);
    let (out, _) = text(&o);
    assert!(
        out.contains("missing optional point `supply_setpoint_active_c`"),
        "{out}"
    );
    assert!(out.contains("missing optional point `local_fallback`"), "{out}");
    assert!(
        out.contains("not read for a cdu:") && out.contains("supply_temp_f"),
        "{out}"
    );
}

#[test]
fn a_map_missing_supply_temp_fails_naming_it() {
    let cdu = std::fs::read_to_string(maps("coolplane-cdu.toml")).unwrap();
    let path = scratch("missing", "no-supply.toml");
    std::fs::write(
        &path,
        cdu.replacen("name = \"supply_temp_c\"", "name = \"supply_temperature\"", 1),
    )
    .unwrap();
    let o = coolplane(&["map", "check", path.to_str().unwrap(), "--role", "cdu"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(out.contains("as a cdu: FAILED"), "{out}");
    assert!(out.contains("MISSING required point `supply_temp_c` (°C)"), "{out}");
    assert!(out.contains("not read for a cdu: supply_temperature"), "{out}");

    // --json: one object with the same verdict.
    let o = coolplane(&["map", "check", path.to_str().unwrap(), "--role", "cdu", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let (out, _) = text(&o);
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["ok"], false);
    assert_eq!(v["role"], "cdu");
    assert_eq!(v["missing_required"][0]["name"], "supply_temp_c");
    assert!(v["missing_required"][0]["if_missing"]
        .as_str()
        .unwrap()
        .contains("refuses"));
    let o = coolplane(&[
        "map",
        "check",
        &maps("coolplane-meter.toml"),
        "--role",
        "meter",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["missing_required"].as_array().unwrap().len(), 0);

    // A heartbeat the counter overflows and a plausible range left out.
    let path = scratch("missing", "bad-heartbeat.toml");
    let bad = cdu.replacen("max = 65535", "max = 999", 1).replacen(
        "min = -10.0   # plausible range: a reading outside is bad\nmax = 120.0\n",
        "",
        1,
    );
    std::fs::write(&path, bad).unwrap();
    let o = coolplane(&["map", "check", path.to_str().unwrap(), "--role", "cdu"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("ERROR `heartbeat`: must accept every value from 0 to 65535"),
        "{out}"
    );
    assert!(out.contains("warning `supply_temp_c`: no plausible range"), "{out}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn the_wrong_role_fails() {
    for (file, role, missing) in [
        (maps("coolplane-meter.toml"), "cdu", "`supply_temp_c`"),
        (maps("coolplane-cdu.toml"), "meter", "`facility_power_kw`"),
        (maps("coolplane-cdu.toml"), "tank", "`tank_pressure_gauge_kpa`"),
        (maps("coolplane-facility.toml"), "cdu", "`flow_setpoint_lpm`"),
    ] {
        let o = coolplane(&["map", "check", &file, "--role", role]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{file} {role}: {out}{err}");
        assert!(
            out.contains("FAILED") && out.contains(&format!("MISSING required point {missing}")),
            "{out}"
        );
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let o = coolplane(&["map", "check", &maps("coolplane-cdu.toml"), "--role", "chiller"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err.contains("--role `chiller`") && err.contains("cdu, tank, facility, meter"),
        "{err}"
    );

    let garbage = scratch("bad", "garbage.toml");
    std::fs::write(&garbage, "this is not a register map\n\u{1}\u{2}[[[\n").unwrap();
    let o = coolplane(&["map", "check", garbage.to_str().unwrap(), "--role", "cdu"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("garbage.toml") && err.contains("line 1"), "{err}");

    // A misspelt key names the point and the line.
    let cdu = std::fs::read_to_string(maps("coolplane-cdu.toml")).unwrap();
    let typo = scratch("bad", "typo.toml");
    std::fs::write(&typo, cdu.replacen("scale = 0.1", "scael = 0.1", 1)).unwrap();
    let o = coolplane(&["map", "check", typo.to_str().unwrap(), "--role", "cdu"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err.contains("typo.toml") && err.contains("scael") && err.contains("line"),
        "{err}"
    );

    // A point without a usable field names the point and the field.
    let bad_type = scratch("bad", "bad-type.toml");
    std::fs::write(&bad_type, cdu.replacen("type = \"i16\"", "type = \"i17\"", 1)).unwrap();
    let o = coolplane(&["map", "check", bad_type.to_str().unwrap(), "--role", "cdu"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("point `supply_temp_c`, field `type`"), "{err}");

    let o = coolplane(&["map", "check", "/nonexistent/map.toml", "--role", "cdu"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("/nonexistent/map.toml"), "{err}");

    let o = coolplane(&["map", "check", "builtin:coolplane-chiller", "--role", "cdu"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("no built-in register map `coolplane-chiller`"), "{err}");
    let _ = std::fs::remove_dir_all(garbage.parent().unwrap());
}
