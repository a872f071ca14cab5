//! The simulated scheduler leasing power through the budget ledger under a demand-response cut:
//! zero budget exceedance (measured by the plant, independently of the ledger), the ledger's
//! invariant checked every step, a small work-lost figure; without leases the same cut is exceeded.

use coolplane_policies::by_name;
use coolplane_scenario::spec::BudgetSpec;
use coolplane_scenario::spec::EventSpec;
use coolplane_scenario::{run, RunOptions, ScenarioSpec};
use coolplane_sim_plant::faults::FaultKind;
use std::path::Path;

fn spec(budget: Option<BudgetSpec>) -> ScenarioSpec {
    let mut s = ScenarioSpec::default_for_site("hall-10k");
    s.weather.start_day = Some(200.0);
    s.weather.days = Some(1.0);
    s.scenario.warmup_h = 6.0;
    s.events.push(EventSpec {
        start_h: 12.0,
        end_h: Some(16.0),
        fault: FaultKind::BudgetCut { budget_kw: 12_500.0 },
    });
    s.budget = budget;
    s
}

fn run_spec(s: &ScenarioSpec) -> coolplane_scenario::RunReport {
    let sc = s.resolve(Path::new(".")).expect("scenario resolves");
    run(
        &sc,
        by_name("trim-respond").unwrap(),
        &RunOptions::default(),
        &mut |_| {},
    )
    .expect("run")
    .report
}

#[test]
fn leases_keep_the_site_within_a_budget_cut() {
    let without = run_spec(&spec(None));
    assert!(without.budget.is_none());
    // The check can fail: without leases the cut is exceeded.
    assert!(
        without.kpis.budget_exceed_kwh > 1.0,
        "{}",
        without.kpis.budget_exceed_kwh
    );
    let with = run_spec(&spec(Some(BudgetSpec {
        notice_s: 300.0,
        ..BudgetSpec::default()
    })));
    let b = with.budget.expect("budget report");
    assert_eq!(b.invariant_violations, 0);
    assert!(b.leases_granted > 0);
    assert!(b.cap_reductions + b.preemptions > 0, "{b:?}");
    assert_eq!(with.kpis.budget_exceed_kwh, 0.0, "{b:?}");
    assert_eq!(with.kpis.throttle_gpu_s, 0.0);
    // The price: some work, a few per cent at most.
    assert!(with.kpis.work_lost_pct > without.kpis.work_lost_pct);
    assert!(with.kpis.work_lost_pct < 5.0, "{}", with.kpis.work_lost_pct);
    assert!(with.checks.all_ok());
    // Preempted jobs restart from the beginning: the plant counts the work they threw away from
    // their utilisation over the scored window, within the ledger's own estimate (their GPUs ×
    // the time they held their leases, at full use), and the verdict leaves it out.
    let thrown = with.kpis.work_thrown_away_gpu_s;
    assert!(thrown <= b.preempted_work_lost_gpu_h * 3600.0 + 1e-6, "{thrown} {b:?}");
    assert_eq!(b.preemptions > 0, thrown > 0.0, "{thrown} {b:?}");
    assert_eq!(without.kpis.work_thrown_away_gpu_s, 0.0);
}
