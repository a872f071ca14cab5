//! Ledger tests: the budget invariant under random operations (proptest), preemption order,
//! fail-closed staleness, expiry, and the side-effect-free feasibility check.

use super::*;
use coolplane_core::site::builtin_site;
use proptest::prelude::*;

fn ledger() -> Ledger {
    let site = builtin_site("hall-10k").unwrap();
    let topo = Topology::new(&site);
    Ledger::new(&site, &topo, LedgerConfig::default())
}

fn req(l: &Ledger, nodes: &[usize], min: f64, request: f64, prio: i32, preempt: bool) -> LeaseRequest {
    let gpn = l.domains()[l.node_domain(0).unwrap()].gpus;
    LeaseRequest {
        external_id: format!("job-{prio}-{}", nodes.len()),
        nodes: nodes
            .iter()
            .map(|&n| NodeShare {
                node: l.node_domain(n).unwrap(),
                gpus: gpn,
            })
            .collect(),
        min_w: min,
        request_w: request,
        max_w: l.tdp_w(),
        priority: prio,
        preemptible: preempt,
        ttl_s: 600.0,
    }
}

#[test]
fn topology_rolls_up_and_the_baseline_fits_the_nameplate() {
    let l = ledger();
    let site = &l.domains()[0];
    assert_eq!(site.kind, DomainKind::Site);
    assert_eq!(site.gpus, 10_368);
    assert!(site.baseline_w() > 0.0);
    for d in l.domains() {
        if let Some(b) = d.breaker_w {
            assert!(
                d.baseline_w() < b,
                "{}: baseline {} vs breaker {b}",
                d.name,
                d.baseline_w()
            );
        }
    }
    l.check_invariant().unwrap();
}

#[test]
fn grant_is_between_min_and_request_and_degraded_when_short() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let floor = l.floor_w();
    let id = l.create(req(&l, &[0, 1], floor + 100.0, tdp, 0, true), 0.0).unwrap();
    assert_eq!(l.lease(id).unwrap().granted_w, tdp);
    assert!(!l.lease(id).unwrap().degraded());
    // Squeeze the site so that only part of a second request fits.
    let site_load = l.domains()[0].load_w();
    let w = l.lease(id).unwrap().weights.iter().find(|x| x.0 == 0).unwrap().1;
    l.set_contract(0, Some(site_load + w * 150.0), 0.0).unwrap();
    let id2 = l.create(req(&l, &[2, 3], floor + 100.0, tdp, 0, true), 0.0).unwrap();
    let g = l.lease(id2).unwrap().granted_w;
    assert!(l.lease(id2).unwrap().degraded());
    assert!((g - (floor + 150.0)).abs() < 0.01, "granted {g}");
    // A third does not fit its minimum: refused, naming the site.
    let e = l
        .create(req(&l, &[4, 5], floor + 100.0, tdp, 0, true), 0.0)
        .unwrap_err();
    assert!(
        matches!(&e, LedgerError::NotFeasible { domain, .. } if domain == &l.domains()[0].name),
        "{e}"
    );
    l.check_invariant().unwrap();
}

#[test]
fn a_limit_drop_shrinks_low_priority_first_then_preempts_with_grace() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let floor = l.floor_w();
    let hi = l.create(req(&l, &[0, 1], tdp, tdp, 10, false), 0.0).unwrap();
    let lo = l.create(req(&l, &[2, 3], floor + 200.0, tdp, 1, true), 0.0).unwrap();
    let lo2 = l.create(req(&l, &[4, 5], floor + 200.0, tdp, 2, true), 0.0).unwrap();
    l.drain_events();
    let w = l.lease(lo).unwrap().weights.iter().find(|x| x.0 == 0).unwrap().1;
    let load = l.domains()[0].load_w();
    // Cut by what `lo` can give above its minimum plus half of what it holds above the floor:
    // `lo` shrinks to its minimum, `lo2` shrinks, `hi` (strict) is untouched.
    let cut = w * (tdp - floor - 200.0) + w * 100.0;
    l.set_contract(0, Some(load - cut), 10.0).unwrap();
    l.check_invariant().unwrap();
    assert_eq!(l.lease(hi).unwrap().granted_w, tdp);
    assert!((l.lease(lo).unwrap().granted_w - (floor + 200.0)).abs() < 0.01);
    assert!(l.lease(lo2).unwrap().granted_w < tdp - 99.0);
    let ev = l.drain_events();
    assert!(matches!(ev[0], LedgerEvent::BudgetReduced { .. }));
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, LedgerEvent::CapReduced { .. }))
            .count(),
        2
    );
    // A deep cut preempts the preemptible ones (lowest priority first) and keeps `hi`.
    let load = l.domains()[0].load_w();
    let lo2_above_min = l.lease(lo2).unwrap().granted_w - (floor + 200.0);
    l.set_contract(0, Some(load - w * (lo2_above_min + 150.0)), 20.0)
        .unwrap();
    l.check_invariant().unwrap();
    assert_eq!(l.lease(hi).unwrap().granted_w, tdp);
    assert_eq!(l.lease(lo).unwrap().state, LeaseState::Preempting { until_s: 140.0 });
    assert_eq!(l.lease(lo).unwrap().granted_w, floor);
    assert_eq!(l.lease(lo2).unwrap().state, LeaseState::Active);
    assert!((l.lease(lo2).unwrap().granted_w - (floor + 200.0)).abs() < 0.01);
    let ev = l.drain_events();
    assert!(ev
        .iter()
        .any(|e| matches!(e, LedgerEvent::Preempting { lease, until_s, .. } if *lease == lo && *until_s == 140.0)));
    // The grace period ends the lease.
    l.tick(139.0);
    assert!(l.lease(lo).unwrap().state.is_live());
    l.tick(140.0);
    assert_eq!(l.lease(lo).unwrap().state, LeaseState::Preempted);
    l.check_invariant().unwrap();
}

#[test]
fn stale_telemetry_on_the_path_fails_closed() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let r = req(&l, &[0], tdp, tdp, 0, true);
    let rack = l.path(l.node_domain(0).unwrap()).unwrap()[3];
    l.set_stale(rack, true, 0.0).unwrap();
    let f = l.feasibility(&r).unwrap();
    assert!(!f.feasible);
    assert_eq!(f.limiting, Some(rack));
    assert!(l.create(r.clone(), 0.0).is_err());
    assert_eq!(l.node_headroom(l.node_domain(0).unwrap()).unwrap().score, 0);
    // Another rack is unaffected; when fresh again the first one grants.
    assert!(
        l.feasibility(&req(&l, &[l.node_count() - 1], tdp, tdp, 0, true))
            .unwrap()
            .feasible
    );
    l.set_stale(rack, false, 1.0).unwrap();
    assert!(l.create(r, 1.0).is_ok());
}

#[test]
fn leases_expire_unless_renewed_and_overrides_lapse() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let a = l.create(req(&l, &[0], tdp, tdp, 0, true), 0.0).unwrap();
    let b = l.create(req(&l, &[1], tdp, tdp, 0, true), 0.0).unwrap();
    let granted_before = l.domains()[0].granted_w();
    l.renew(a, None, 500.0).unwrap();
    l.tick(600.0);
    assert!(l.lease(a).unwrap().state.is_live());
    assert_eq!(l.lease(b).unwrap().state, LeaseState::Expired);
    assert!(l.domains()[0].granted_w() < granted_before);
    let load = l.domains()[0].load_w();
    l.set_override(
        0,
        Some(LimitOverride {
            watts: load + 1.0,
            expires_s: 700.0,
            reason: "test".into(),
        }),
        600.0,
    )
    .unwrap();
    assert_eq!(l.domains()[0].limit().1, Some(LimitSource::Override));
    l.tick(700.0);
    assert_eq!(l.domains()[0].limit().1, Some(LimitSource::Contract));
    assert!(l
        .set_override(
            0,
            Some(LimitOverride {
                watts: 1.0,
                expires_s: 10.0,
                reason: String::new()
            }),
            700.0
        )
        .is_err());
}

#[test]
fn bad_requests_name_the_field() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let mut r = req(&l, &[0], tdp, tdp, 0, true);
    r.min_w = f64::NAN;
    assert!(matches!(
        l.create(r.clone(), 0.0),
        Err(LedgerError::Invalid { field: "min_w", .. })
    ));
    r.min_w = tdp;
    r.request_w = tdp - 1.0;
    assert!(matches!(
        l.create(r.clone(), 0.0),
        Err(LedgerError::Invalid { field: "request_w", .. })
    ));
    r.request_w = tdp;
    r.nodes[0].gpus = 99;
    assert!(matches!(
        l.create(r.clone(), 0.0),
        Err(LedgerError::Invalid { field: "nodes", .. })
    ));
    r.nodes[0].node = 0;
    assert!(matches!(
        l.create(r, 0.0),
        Err(LedgerError::Invalid { field: "nodes", .. })
    ));
    assert!(l.release(12345, 0.0).is_err());
}

#[test]
fn the_invariant_check_catches_an_injected_error() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let id = l.create(req(&l, &[0], tdp, tdp, 0, true), 0.0).unwrap();
    l.check_invariant().unwrap();
    // Corrupt a running sum: the independent recomputation disagrees.
    l.domains[0].granted_w -= 1000.0;
    assert!(l.check_invariant().is_err());
    l.domains[0].granted_w += 1000.0;
    // The same for the sum of growth lent.
    l.domains[0].grown_w += 1000.0;
    assert!(l.check_invariant().unwrap_err().contains("growth"));
    l.domains[0].grown_w -= 1000.0;
    // Bypass enforcement: a limit below the load with a sheddable lease is a violation.
    l.domains[0].contract_w = Some(l.domains[0].load_w() - 1000.0);
    assert!(l.check_invariant().unwrap_err().contains("over limit"));
    l.enforce(1.0);
    l.check_invariant().unwrap();
    assert!(l.lease(id).unwrap().granted_w < tdp);
}

fn req_max(l: &Ledger, nodes: &[usize], min: f64, request: f64, max: f64, prio: i32) -> LeaseRequest {
    LeaseRequest {
        max_w: max,
        external_id: format!("grow-{prio}"),
        ..req(l, nodes, min, request, prio, true)
    }
}

#[test]
fn headroom_is_lent_up_to_max_in_priority_order_and_taken_back_first() {
    let mut l = ledger();
    let floor = l.floor_w(); // 400 W on hall-10k, TDP 1,000 W
    let lo = l
        .create(
            req_max(&l, &[0, 1], floor + 100.0, floor + 200.0, floor + 500.0, 1),
            0.0,
        )
        .unwrap();
    let hi = l
        .create(
            req_max(&l, &[2, 3], floor + 100.0, floor + 200.0, floor + 400.0, 5),
            0.0,
        )
        .unwrap();
    // Created at their request: growth comes at the tick.
    assert_eq!(l.lease(lo).unwrap().granted_w, floor + 200.0);
    assert_eq!(l.lease(hi).unwrap().growth_w(), 0.0);
    // Room at the site for 300 W per GPU of one two-node lease above the requests.
    let w = l.lease(lo).unwrap().weights.iter().find(|x| x.0 == 0).unwrap().1;
    let load = l.domains()[0].load_w();
    l.set_contract(0, Some(load + w * 300.0), 0.0).unwrap();
    l.tick(1.0);
    l.check_invariant().unwrap();
    // The higher priority grows first, to its max (200 W above its request); the rest (100 W)
    // goes to the other.
    let (g_hi, g_lo) = (l.lease(hi).unwrap().granted_w, l.lease(lo).unwrap().granted_w);
    assert!((g_hi - (floor + 400.0)).abs() < 0.01, "hi {g_hi}");
    assert!((g_lo - (floor + 300.0)).abs() < 0.01, "lo {g_lo}");
    assert!((l.domains()[0].grown_w() - w * 300.0).abs() < 0.1);
    assert!(l.domains()[0].headroom_w().abs() < 0.1);
    // Nothing left: another tick changes nothing.
    l.tick(2.0);
    assert_eq!(l.lease(hi).unwrap().granted_w, g_hi);
    assert_eq!(l.lease(lo).unwrap().granted_w, g_lo);
    l.drain_events();
    // A new lease (lowest priority) takes back lent growth, lowest priority first: `lo` gives
    // its 100 W, then `hi` 50 W; nobody goes below the request.
    let node = l.node_domain(4).unwrap();
    assert!(l.node_headroom(node).unwrap().headroom_w >= w * 300.0 - 0.1);
    let new = l
        .create(
            req_max(&l, &[4, 5], floor + 150.0, floor + 150.0, floor + 150.0, 0),
            3.0,
        )
        .unwrap();
    l.check_invariant().unwrap();
    assert_eq!(l.lease(new).unwrap().granted_w, floor + 150.0);
    assert!((l.lease(lo).unwrap().granted_w - (floor + 200.0)).abs() < 0.01);
    assert!((l.lease(hi).unwrap().granted_w - (floor + 350.0)).abs() < 0.01);
    let ev = l.drain_events();
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, LedgerEvent::CapReduced { .. }))
            .count(),
        2,
        "{ev:?}"
    );
    // A limit drop sheds the remaining growth before any request is cut or anyone preempted.
    let load = l.domains()[0].load_w();
    l.set_contract(0, Some(load - w * 150.0), 4.0).unwrap();
    l.check_invariant().unwrap();
    assert!((l.lease(hi).unwrap().granted_w - (floor + 200.0)).abs() < 0.01);
    assert!((l.lease(lo).unwrap().granted_w - (floor + 200.0)).abs() < 0.01);
    assert_eq!(l.lease(new).unwrap().granted_w, floor + 150.0);
    assert!(l.leases().all(|x| x.state == LeaseState::Active));
    // A deeper drop then shrinks requests toward their minimum, lowest priority first (`lo`; the
    // new lease is strict).
    let load = l.domains()[0].load_w();
    l.set_contract(0, Some(load - w * 50.0), 5.0).unwrap();
    l.check_invariant().unwrap();
    assert!((l.lease(lo).unwrap().granted_w - (floor + 150.0)).abs() < 0.01);
    assert!((l.lease(hi).unwrap().granted_w - (floor + 200.0)).abs() < 0.01);
    assert!(l.leases().all(|x| x.state == LeaseState::Active));
    // With the limit back, `lo` regrows to its request at the tick, then both grow again.
    l.set_contract(0, Some(load + w * 1000.0), 6.0).unwrap();
    l.tick(7.0);
    l.check_invariant().unwrap();
    assert_eq!(l.lease(hi).unwrap().granted_w, floor + 400.0);
    assert_eq!(l.lease(lo).unwrap().granted_w, floor + 500.0);
}

#[test]
fn no_growth_through_stale_telemetry_and_never_above_max() {
    let mut l = ledger();
    let floor = l.floor_w();
    let id = l
        .create(req_max(&l, &[0], floor + 100.0, floor + 200.0, floor + 300.0, 0), 0.0)
        .unwrap();
    let rack = l.path(l.node_domain(0).unwrap()).unwrap()[3];
    l.set_stale(rack, true, 0.0).unwrap();
    l.tick(1.0);
    assert_eq!(l.lease(id).unwrap().granted_w, floor + 200.0);
    l.set_stale(rack, false, 1.0).unwrap();
    l.tick(2.0);
    assert_eq!(l.lease(id).unwrap().granted_w, floor + 300.0);
    // Lowering max below the grant shrinks it at once.
    l.update(id, None, None, Some(floor + 250.0), None, 3.0).unwrap();
    assert!(l.lease(id).unwrap().granted_w <= floor + 250.0);
    l.tick(4.0);
    assert_eq!(l.lease(id).unwrap().granted_w, floor + 250.0);
    l.check_invariant().unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        nodes: Vec<usize>,
        min_frac: f64,
        req_frac: f64,
        max_frac: f64,
        prio: i32,
        preempt: bool,
        ttl_s: f64,
    },
    Release(usize),
    Renew(usize),
    Update(usize, f64, i32),
    Contract(f64),
    Override {
        dom: usize,
        frac: f64,
        for_s: f64,
    },
    Cooling {
        dom: usize,
        frac: Option<f64>,
    },
    Unmanaged {
        dom: usize,
        frac: f64,
    },
    Stale {
        dom: usize,
        stale: bool,
    },
    Tick(f64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (proptest::collection::vec(prop_oneof![0usize..40, 0usize..3000], 1..6), 0.0..1.0f64, 0.0..1.0f64, 0.0..1.0f64, -3i32..4, any::<bool>(), 30.0..900.0f64)
            .prop_map(|(nodes, a, b, c, prio, preempt, ttl_s)| {
                let (min_frac, req_frac) = if a <= b { (a, b) } else { (b, a) };
                let max_frac = req_frac + c * (1.0 - req_frac);
                Op::Create { nodes, min_frac, req_frac, max_frac, prio, preempt, ttl_s }
            }),
        1 => (0usize..64).prop_map(Op::Release),
        1 => (0usize..64).prop_map(Op::Renew),
        1 => (0usize..64, 0.0..1.0f64, -3i32..4).prop_map(|(i, f, p)| Op::Update(i, f, p)),
        2 => (0.5..1.2f64).prop_map(Op::Contract),
        1 => (0usize..200, 0.3..1.1f64, 1.0..600.0f64).prop_map(|(dom, frac, for_s)| Op::Override { dom, frac, for_s }),
        1 => (0usize..200, proptest::option::of(0.3..1.2f64)).prop_map(|(dom, frac)| Op::Cooling { dom, frac }),
        1 => (0usize..200, 0.0..0.3f64).prop_map(|(dom, frac)| Op::Unmanaged { dom, frac }),
        1 => (0usize..200, any::<bool>()).prop_map(|(dom, stale)| Op::Stale { dom, stale }),
        2 => (1.0..200.0f64).prop_map(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Granted power plus unmanaged load never exceeds any domain's limit (unless nothing is
    /// left to shed), whatever the sequence of requests (with growth up to their max), limit
    /// drops, staleness and time.
    #[test]
    fn budget_invariant_holds_under_any_sequence(ops in proptest::collection::vec(op(), 1..60)) {
        let mut l = ledger();
        let floor = l.floor_w();
        let tdp = l.tdp_w();
        let n_dom = l.domains().len();
        let nodes = l.node_count();
        let site_full = l.domains()[0].breaker_w.unwrap_or(f64::INFINITY).min(l.domains()[0].baseline_w() * 2.5);
        let mut now = 0.0;
        let mut ids: Vec<LeaseId> = Vec::new();
        for op in ops {
            match op {
                Op::Create { nodes: ns, min_frac, req_frac, max_frac, prio, preempt, ttl_s } => {
                    let mut ns: Vec<usize> = ns.into_iter().map(|n| n % nodes).collect();
                    ns.sort();
                    ns.dedup();
                    let min = floor + min_frac * (tdp - floor);
                    let rq = floor + req_frac * (tdp - floor);
                    let mx = (floor + max_frac * (tdp - floor)).max(rq);
                    let r = LeaseRequest { ttl_s, max_w: mx, ..req(&l, &ns, min, rq, prio, preempt) };
                    let Ok(f) = l.feasibility(&r) else {
                        // GPUs already held: creation must refuse too.
                        let refused = matches!(l.create(r, now), Err(LedgerError::GpusTaken { .. }));
                        prop_assert!(refused, "creation must refuse GPUs already leased");
                        continue;
                    };
                    let before: Vec<f64> = l.domains().iter().map(|d| d.granted_w()).collect();
                    let f2 = l.feasibility(&r).unwrap();
                    prop_assert_eq!(&f, &f2);
                    prop_assert_eq!(before, l.domains().iter().map(|d| d.granted_w()).collect::<Vec<_>>());
                    match l.create(r, now) {
                        Ok(id) => {
                            prop_assert!(f.feasible);
                            let g = l.lease(id).unwrap().granted_w;
                            prop_assert!((g - f.grant_w).abs() < 1e-6);
                            prop_assert!(g + 1e-9 >= min && g <= rq + 1e-9, "grant {} outside [{}, {}]", g, min, rq);
                            ids.push(id);
                        }
                        Err(_) => prop_assert!(!f.feasible),
                    }
                }
                Op::Release(i) => if let Some(&id) = ids.get(i) { let _ = l.release(id, now); },
                Op::Renew(i) => if let Some(&id) = ids.get(i) { let _ = l.renew(id, None, now); },
                Op::Update(i, f, p) => if let Some(&id) = ids.get(i) {
                    let _ = l.update(id, None, Some(floor + f * (tdp - floor)).map(|r| r.max(l.lease(id).unwrap().request.min_w)), None, Some(p), now);
                },
                Op::Contract(frac) => { l.set_contract(0, Some(site_full * frac), now).unwrap(); }
                Op::Override { dom, frac, for_s } => {
                    let d = dom % n_dom;
                    let w = l.domains()[d].load_w() * frac;
                    l.set_override(d, Some(LimitOverride { watts: w, expires_s: now + for_s, reason: "p".into() }), now).unwrap();
                }
                Op::Cooling { dom, frac } => {
                    let d = dom % n_dom;
                    let w = frac.map(|f| l.domains()[d].load_w() * f);
                    l.set_cooling(d, w, now).unwrap();
                }
                Op::Unmanaged { dom, frac } => {
                    let d = dom % n_dom;
                    let w = l.domains()[d].baseline_w() * frac;
                    l.set_unmanaged(d, w, now).unwrap();
                }
                Op::Stale { dom, stale } => { l.set_stale(dom % n_dom, stale, now).unwrap(); }
                Op::Tick(dt) => { now += dt; l.tick(now); }
            }
            if let Err(e) = l.check_invariant() {
                return Err(TestCaseError::fail(e));
            }
            // Caps of the GPUs asked twice are never granted twice.
            for n in 0..nodes {
                let d = &l.domains()[l.node_domain(n).unwrap()];
                prop_assert!(d.leased_gpus <= d.gpus);
            }
            // Growth is never above a lease's max, and only a non-degraded lease holds any.
            for x in l.leases() {
                prop_assert!(x.granted_w <= x.request.max_w + 1e-9);
                prop_assert!(x.growth_w() == 0.0 || !x.degraded());
            }
            // Every preempted or reduced lease was told.
            for e in l.drain_events() {
                if let LedgerEvent::Preempting { lease, .. } = e {
                    prop_assert_eq!(l.lease(lease).unwrap().granted_w, floor);
                }
            }
        }
    }
}

#[test]
fn a_lease_takes_over_the_measured_draw_of_the_gpus_it_leases() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let node = l.node_domain(0).unwrap();
    let path = l.path(node).unwrap();
    let rack = path[3];
    // The node's four GPUs draw 1,000 W each without a lease: 4 × 600 × 1.25 = 3,000 W unmanaged.
    for d in path {
        l.set_unmanaged(d, 3000.0, 0.0).unwrap();
    }
    // The rack's breaker leaves exactly that: without the take-over no lease above the floor fits.
    let load = l.domains()[rack].load_w();
    l.set_override(
        rack,
        Some(LimitOverride {
            watts: load,
            expires_s: 1e9,
            reason: String::new(),
        }),
        0.0,
    )
    .unwrap();
    let f = l.feasibility(&req(&l, &[0], tdp, tdp, 0, true)).unwrap();
    assert!(f.feasible, "{f:?}");
    assert_eq!(l.node_headroom(node).unwrap().headroom_w, 3000.0);
    // Another node on the rack gets nothing: its GPUs' draw is not taken over.
    assert!(!l.feasibility(&req(&l, &[1], tdp, tdp, 0, true)).unwrap().feasible);
    let id = l.create(req(&l, &[0], tdp, tdp, 0, true), 0.0).unwrap();
    assert_eq!(l.lease(id).unwrap().granted_w, tdp);
    assert_eq!(l.domains()[rack].unmanaged_w, 0.0);
    l.check_invariant().unwrap();
}

#[test]
fn a_limit_below_the_floor_is_said_once_per_episode_not_every_tick() {
    let mut l = ledger();
    let below = |l: &mut Ledger| {
        l.drain_events()
            .into_iter()
            .filter(|e| matches!(e, LedgerEvent::LimitBelowFloor { .. }))
            .count()
    };
    let node = l.node_domain(0).unwrap();
    let base = l.domains()[node].load_w();
    let limit = |w: f64| {
        Some(LimitOverride {
            watts: w,
            expires_s: 1e6,
            reason: "test".into(),
        })
    };
    l.set_override(node, limit(base * 0.5), 0.0).unwrap();
    for k in 1..=100 {
        l.tick(k as f64);
    }
    assert_eq!(below(&mut l), 1, "one event for one episode, not one per tick");
    // Worse: the limit drops further; said again, once.
    l.set_override(node, limit(base * 0.25), 101.0).unwrap();
    for k in 102..=200 {
        l.tick(k as f64);
    }
    assert_eq!(below(&mut l), 1);
    // The episode ends when the domain is back within its limit; a new drop is a new episode.
    l.set_override(node, None, 201.0).unwrap();
    l.tick(202.0);
    l.set_override(node, limit(base * 0.5), 203.0).unwrap();
    l.tick(204.0);
    assert_eq!(below(&mut l), 1);
}

#[test]
fn within_a_priority_the_highest_grants_come_down_first_to_a_common_level() {
    let mut l = ledger();
    let tdp = l.tdp_w();
    let floor = l.floor_w();
    // Three leases of one priority: two at TDP (the older and the newer), one lower.
    let a = l.create(req(&l, &[0, 1], floor + 50.0, tdp, 5, true), 0.0).unwrap();
    let b = l
        .create(req(&l, &[2, 3], floor + 50.0, tdp - 200.0, 5, true), 0.0)
        .unwrap();
    let c = l.create(req(&l, &[4, 5], floor + 50.0, tdp, 5, true), 0.0).unwrap();
    let w = l.lease(a).unwrap().weights.iter().find(|x| x.0 == 0).unwrap().1;
    // Shed 100 W a GPU-weight from each of the two at TDP: both come to TDP − 100, `b` (already
    // lower, where a watt buys more work) keeps its grant; the newest lease is not cut first.
    let load = l.domains()[0].load_w();
    l.set_contract(0, Some(load - 2.0 * 100.0 * w), 10.0).unwrap();
    l.check_invariant().unwrap();
    let (ga, gb, gc) = (
        l.lease(a).unwrap().granted_w,
        l.lease(b).unwrap().granted_w,
        l.lease(c).unwrap().granted_w,
    );
    assert!(
        (ga - (tdp - 100.0)).abs() < 0.01 && (gc - (tdp - 100.0)).abs() < 0.01,
        "{ga} {gb} {gc}"
    );
    assert_eq!(gb, tdp - 200.0);
    // A deeper cut levels all three together, never below their minimum.
    let load = l.domains()[0].load_w();
    l.set_contract(0, Some(load - 3.0 * 150.0 * w - 2.0 * 100.0 * w), 20.0)
        .unwrap();
    l.check_invariant().unwrap();
    let level = tdp - 350.0;
    for id in [a, b, c] {
        let g = l.lease(id).unwrap().granted_w;
        assert!((g - level).abs() < 0.01, "lease {id}: {g}, wanted {level}");
    }
    // A cut the minimums can absorb preempts no one.
    assert_eq!(l.lease(a).unwrap().state, LeaseState::Active);
}
