//! The exposition text parses, uses one naming scheme, carries the values it was given; the
//! Grafana dashboard in `examples/` asks only for metrics the daemon exports.

use super::*;
use crate::snapshot::{CduState, SiteState};
use coolplane_policies::{EnergyPlan, WriteAllowance, WritePool};
use std::collections::{BTreeMap, BTreeSet};

/// A strict parser of the text exposition format: returns family name → type, and every
/// sample as (name, labels, value). Panics with the offending line on anything malformed.
/// One exposition sample: metric name, labels, value.
pub(crate) type Sample = (String, BTreeMap<String, String>, f64);

pub(crate) fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut helps = BTreeSet::new();
    let mut samples = Vec::new();
    let name_ok = |n: &str| {
        n.starts_with("coolplane_")
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (n, h) = rest.split_once(' ').unwrap_or_else(|| panic!("bad HELP: {line}"));
            assert!(name_ok(n) && !h.is_empty(), "bad HELP: {line}");
            assert!(helps.insert(n.to_string()), "HELP twice: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (n, t) = rest.split_once(' ').unwrap_or_else(|| panic!("bad TYPE: {line}"));
            assert!(name_ok(n), "bad name: {line}");
            assert!(
                ["counter", "gauge", "summary", "histogram"].contains(&t),
                "bad type: {line}"
            );
            assert!(
                types.insert(n.to_string(), t.to_string()).is_none(),
                "TYPE twice: {line}"
            );
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line: {line:?}");
        let (head, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let v: f64 = match value {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, l)) => {
                let l = l.strip_suffix('}').unwrap_or_else(|| panic!("bad labels: {line}"));
                let mut m = BTreeMap::new();
                let mut rest = l;
                while !rest.is_empty() {
                    let (k, r) = rest.split_once("=\"").unwrap_or_else(|| panic!("bad label: {line}"));
                    let mut val = String::new();
                    let mut chars = r.char_indices();
                    let mut end = None;
                    while let Some((i, c)) = chars.next() {
                        match c {
                            '\\' => {
                                let (_, e) = chars.next().unwrap_or_else(|| panic!("bad escape: {line}"));
                                val.push(match e {
                                    'n' => '\n',
                                    other => other,
                                });
                            }
                            '"' => {
                                end = Some(i);
                                break;
                            }
                            c => val.push(c),
                        }
                    }
                    let end = end.unwrap_or_else(|| panic!("unterminated label: {line}"));
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "bad label name: {line}"
                    );
                    m.insert(k.to_string(), val);
                    rest = &r[end + 1..];
                    rest = rest.strip_prefix(',').unwrap_or(rest);
                }
                (n.to_string(), m)
            }
            None => (head.to_string(), BTreeMap::new()),
        };
        assert!(name_ok(&name), "bad name: {line}");
        let family = ["_sum", "_count", "_bucket"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t != "gauge" && t != "counter"))
            })
            .unwrap_or(&name);
        assert!(types.contains_key(family), "sample before its TYPE: {line}");
        if types[family] == "counter" {
            assert!(name.ends_with("_total"), "a counter is named *_total: {line}");
        }
        samples.push((name, labels, v));
    }
    (types, samples)
}

fn populated() -> DaemonMetrics {
    let m = DaemonMetrics::default();
    let snap = Snapshot {
        t_s: 100.0,
        unix_ms: 0,
        mode: "Safe".into(),
        site: SiteState {
            name: "hall-10k".into(),
            pue: Some(1.07),
            facility_kw: Some(1070.0),
            it_kw: Some(1000.0),
            cooling_kw: Some(40.0),
            heat_pump_kw: None,
            loss_kw: Some(30.0),
            budget_kw: Some(1500.0),
            headroom_kw: Some(430.0),
            hottest_gpu_c: Some(80.0),
            slowdown_c: 87.0,
            hottest_margin_k: Some(7.0),
            racks_fresh: 3,
            racks: 4,
        },
        cdus: vec![CduState {
            name: "hall-a-cdu-\"0\"".into(),
            hall: "hall-a".into(),
            supply_c: Some(32.5),
            fresh: true,
            age_s: Some(2.0),
            ..Default::default()
        }],
        ..Default::default()
    };
    let devices = vec![(
        "hall-a-cdu-00".to_string(),
        DeviceStatus {
            connected: true,
            polls: 10,
            timeouts: 2,
            poll_seconds_sum: 0.05,
            last_poll_s: 0.004,
            ..Default::default()
        },
    )];
    let mut mqtt = MqttStats {
        connected: true,
        accepted: 42,
        unknown_rack: 1,
        ..Default::default()
    };
    mqtt.rejected.insert("json".into(), 3);
    // Four plans: three optimised under a write allowance (the first in its settling day; the
    // last one's standing is kept), one fallback.
    let plan = |status: &str, write_allowance: Option<WriteAllowance>| EnergyPlan {
        status: status.into(),
        write_allowance,
        ..Default::default()
    };
    let allowance = |used, refused_candidates, settling| WriteAllowance {
        allowance: 60,
        used,
        left: 60 - used,
        refused_candidates,
        settling,
        facility: None,
    };
    let mut obs = Observer::default();
    obs.observe_plans(&[
        plan("optimised", Some(allowance(0, 0, true))),
        plan("optimised", Some(allowance(20, 3, false))),
        plan("fallback", None),
        plan("optimised", Some(allowance(44, 5, false))),
    ]);
    let mut counts: ObservedCounts = obs.counts.clone();
    counts.controller_events.insert("critical", 2);
    counts.stale_transitions.insert(("rack", "stale"), 5);
    counts.writes_refused = 1;
    counts.power_limits_resent = 4;
    m.update(&snap, devices, Some(mqtt), &counts, 0.002);
    m.set_history(HistoryStats {
        points_written: 100,
        ..Default::default()
    });
    m
}

fn value(s: &[(String, BTreeMap<String, String>, f64)], name: &str, labels: &[(&str, &str)]) -> f64 {
    s.iter()
        .find(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
        .2
}

#[test]
fn exposition_parses_and_carries_the_values() {
    let text = populated().render();
    let (types, s) = parse(&text);
    assert!(types.len() > 30, "{} families", types.len());
    assert_eq!(value(&s, "coolplane_site_pue", &[("site", "hall-10k")]), 1.07);
    assert_eq!(
        value(&s, "coolplane_site_power_watts", &[("part", "cooling")]),
        40_000.0
    );
    assert_eq!(value(&s, "coolplane_controller_mode", &[("mode", "safe")]), 1.0);
    assert_eq!(value(&s, "coolplane_controller_mode", &[("mode", "auto")]), 0.0);
    assert_eq!(value(&s, "coolplane_device_errors_total", &[("kind", "timeout")]), 2.0);
    assert_eq!(value(&s, "coolplane_device_poll_duration_seconds_count", &[]), 10.0);
    assert_eq!(value(&s, "coolplane_device_poll_duration_seconds_sum", &[]), 0.05);
    assert_eq!(
        value(&s, "coolplane_mqtt_messages_rejected_total", &[("reason", "json")]),
        3.0
    );
    assert_eq!(
        value(
            &s,
            "coolplane_mqtt_messages_rejected_total",
            &[("reason", "unknown_rack")]
        ),
        1.0
    );
    assert_eq!(
        value(&s, "coolplane_controller_events_total", &[("severity", "critical")]),
        2.0
    );
    assert_eq!(
        value(
            &s,
            "coolplane_stale_transitions_total",
            &[("kind", "rack"), ("to", "stale")]
        ),
        5.0
    );
    assert_eq!(value(&s, "coolplane_writes_refused_total", &[]), 1.0);
    assert_eq!(value(&s, "coolplane_power_limits_resent_total", &[]), 4.0);
    assert_eq!(value(&s, "coolplane_history_points_written_total", &[]), 100.0);
    assert_eq!(
        value(&s, "coolplane_energy_plans_total", &[("status", "optimised")]),
        3.0
    );
    assert_eq!(
        value(&s, "coolplane_energy_plans_total", &[("status", "fallback")]),
        1.0
    );
    assert_eq!(value(&s, "coolplane_energy_plans_total", &[("status", "other")]), 0.0);
    assert_eq!(
        value(&s, "coolplane_write_allowance_refused_candidates_total", &[]),
        8.0
    );
    // The last plan's standing: past the settling day.
    assert_eq!(value(&s, "coolplane_write_allowance_settling", &[]), 0.0);
    assert_eq!(value(&s, "coolplane_write_allowance_writes", &[("kind", "used")]), 44.0);
    assert_eq!(value(&s, "coolplane_write_allowance_writes", &[("kind", "left")]), 16.0);
    assert_eq!(
        value(&s, "coolplane_write_allowance_writes", &[("kind", "allowance")]),
        60.0
    );
    // A quote in a label value is escaped and parses back.
    assert_eq!(
        value(&s, "coolplane_cdu_supply_celsius", &[("cdu", "hall-a-cdu-\"0\"")]),
        32.5
    );
}

#[test]
fn the_parser_rejects_what_prometheus_would() {
    for bad in [
        "coolplane_x 1\n",                                  // no TYPE
        "# TYPE coolplane_x gauge\ncoolplane_x{a=\"1} 1\n", // unterminated label
        "# TYPE coolplane_x counter\ncoolplane_x 1\n",      // counter without _total
        "# TYPE other_x gauge\nother_x 1\n",                // outside the naming scheme
        "# TYPE coolplane_x gauge\ncoolplane_x one\n",      // not a number
    ] {
        assert!(std::panic::catch_unwind(|| parse(bad)).is_err(), "accepted: {bad:?}");
    }
}

/// Every metric name an expression in the dashboard uses: identifiers that start `coolplane_`.
pub(crate) fn dashboard_metric_names(json: &serde_json::Value) -> BTreeSet<String> {
    fn walk(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if k == "expr" {
                        let s = v.as_str().unwrap_or("");
                        let mut cur = String::new();
                        for c in s.chars().chain(std::iter::once(' ')) {
                            if c.is_ascii_alphanumeric() || c == '_' {
                                cur.push(c);
                            } else {
                                if cur.starts_with("coolplane_") {
                                    out.insert(cur.clone());
                                }
                                cur.clear();
                            }
                        }
                    } else {
                        walk(v, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(json, &mut out);
    out
}

#[test]
fn the_grafana_dashboard_uses_only_exported_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/grafana-dashboard.json");
    let text = std::fs::read_to_string(path).expect("examples/grafana-dashboard.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is valid JSON");
    let panels = json["panels"].as_array().expect("panels");
    assert!(panels.len() >= 6);
    let used = dashboard_metric_names(&json);
    assert!(used.len() >= 10, "{used:?}");
    let (types, samples) = parse(&populated().render());
    let mut exported: BTreeSet<String> = samples.into_iter().map(|s| s.0).collect();
    exported.extend(types.into_keys());
    let missing: Vec<_> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the dashboard asks for metrics nobody exports: {missing:?}"
    );
    // The check can fail: a misspelt name is caught.
    let bad: serde_json::Value =
        serde_json::json!({"panels": [{"targets": [{"expr": "rate(coolplane_tick_total[5m])"}]}]});
    assert!(!dashboard_metric_names(&bad).is_subset(&exported));
}

#[test]
fn the_settling_day_shows_on_the_allowance() {
    let plan = |settling| EnergyPlan {
        status: "optimised".into(),
        write_allowance: Some(WriteAllowance {
            allowance: 60,
            used: 0,
            left: 60,
            refused_candidates: 0,
            settling,
            facility: None,
        }),
        ..Default::default()
    };
    let settling_now = |plans: &[EnergyPlan]| {
        let mut obs = Observer::default();
        obs.observe_plans(plans);
        let m = DaemonMetrics::default();
        m.update(&Snapshot::default(), Vec::new(), None, &obs.counts, 0.001);
        let (_, s) = parse(&m.render());
        value(&s, "coolplane_write_allowance_settling", &[])
    };
    assert_eq!(settling_now(&[plan(true)]), 1.0);
    assert_eq!(settling_now(&[plan(true), plan(false)]), 0.0);
    // Without an allowance there is no sample at all.
    let mut obs = Observer::default();
    obs.observe_plans(&[EnergyPlan::default()]);
    let m = DaemonMetrics::default();
    m.update(&Snapshot::default(), Vec::new(), None, &obs.counts, 0.001);
    let (_, s) = parse(&m.render());
    assert!(!s.iter().any(|(n, _, _)| n == "coolplane_write_allowance_settling"));
}

#[test]
fn a_split_allowance_shows_the_facilitys_own() {
    let render = |facility: Option<WritePool>| {
        let mut obs = Observer::default();
        obs.observe_plans(&[EnergyPlan {
            status: "optimised".into(),
            write_allowance: Some(WriteAllowance {
                allowance: 12,
                used: 0,
                left: 12,
                refused_candidates: 0,
                settling: false,
                facility,
            }),
            ..Default::default()
        }]);
        let m = DaemonMetrics::default();
        m.update(&Snapshot::default(), Vec::new(), None, &obs.counts, 0.001);
        parse(&m.render()).1
    };
    let s = render(Some(WritePool {
        allowance: 50,
        used: 41,
        left: 9,
    }));
    let f = |kind| value(&s, "coolplane_write_allowance_facility_writes", &[("kind", kind)]);
    assert_eq!((f("allowance"), f("used"), f("left")), (50.0, 41.0, 9.0));
    // The CDUs' allowance is the main family's.
    assert_eq!(
        value(&s, "coolplane_write_allowance_writes", &[("kind", "allowance")]),
        12.0
    );
    // One allowance for all writes: no facility sample.
    let s = render(None);
    assert!(!s
        .iter()
        .any(|(n, _, _)| n == "coolplane_write_allowance_facility_writes"));
}
