//! `coolplane bench-api-server`: the budget API on a site with many active leases and a fresh
//! synthetic process image fed every tick, for an external load generator (wrk) to measure.

use anyhow::{Context, Result};
use clap::Args;
use coolplane_controller::ledger::{LeaseRequest, NodeShare};
use coolplane_core::signals::{Actions, Measurements, Reading};
use coolplane_core::site::builtin_site;
use coolplane_core::topology::Topology;
use coolplane_runtime::http::{serve, ApiConfig, ApiState, Role, TokenConfig};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options.
#[derive(Args, Clone, Debug)]
pub struct ApiBenchArgs {
    /// Built-in site.
    #[arg(long, default_value = "campus-100k")]
    site: String,
    /// Active leases to create before serving (one node each, spread over the site).
    #[arg(long, default_value_t = 10_000)]
    leases: usize,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:24080")]
    listen: String,
    /// Feed the ledger a fresh image this often (the daemon's tick), s.
    #[arg(long, default_value_t = 10.0)]
    tick_s: f64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    duration_s: f64,
}

/// Bearer token of the bench server (scheduler role; loopback only).
pub const BENCH_TOKEN: &str = "bench-scheduler-token-0000";

fn image(topo: &Topology, t: f64, budget_kw: f64) -> Measurements {
    let n = topo.gpu_count;
    let mut m = Measurements {
        t_s: t,
        cdus: vec![Default::default(); topo.cdus.len()],
        facilities: vec![Default::default(); topo.halls.len()],
        racks: vec![Default::default(); topo.racks.len()],
        ..Default::default()
    };
    for c in &mut m.cdus {
        c.supply_temp_c = Reading::good(40.0, t);
        c.flow_lpm = Reading::good(2000.0, t);
        c.heat_kw = Reading::good(1000.0, t);
    }
    for f in &mut m.facilities {
        f.supply_temp_c = Reading::good(32.0, t);
    }
    for r in &mut m.racks {
        r.it_power_kw = Reading::good(60.0, t);
    }
    m.gpus.t_s = t;
    m.gpus.power_w = vec![150.0; n];
    m.gpus.power_limit_w = vec![1000.0; n];
    m.meter.facility_power_kw = Reading::good(budget_kw * 0.6, t);
    m.meter.it_power_kw = Reading::good(budget_kw * 0.5, t);
    m.meter.power_budget_kw = Reading::good(budget_kw, t);
    m
}

/// Run the bench server.
pub fn run(a: &ApiBenchArgs) -> Result<()> {
    let site = builtin_site(&a.site)?;
    let topo = Topology::new(&site);
    let cfg = ApiConfig {
        listen: a.listen.clone(),
        tokens: vec![TokenConfig {
            name: "bench".into(),
            token: BENCH_TOKEN.into(),
            role: Role::Operator,
        }],
        ..Default::default()
    };
    let start = Instant::now();
    let st = ApiState::new(
        &site,
        &cfg,
        Arc::new(move || start.elapsed().as_secs_f64()),
        1_796_097_600.0,
        180.0,
    );
    st.on_tick(
        0.0,
        &image(&topo, 0.0, site.site.power_budget_kw),
        &mut Actions::default(),
    );
    {
        let mut b = st.lock();
        let nodes = b.ledger.node_count();
        let stride = (nodes / a.leases.max(1)).max(1);
        let mut made = 0;
        for i in 0..a.leases.min(nodes) {
            let node = b.ledger.node_domain(i * stride % nodes).expect("node");
            let gpus = b.ledger.domains()[node].gpus;
            let r = LeaseRequest {
                external_id: format!("bench-{i}"),
                nodes: vec![NodeShare { node, gpus }],
                min_w: 600.0_f64.max(b.ledger.floor_w()),
                request_w: b.ledger.tdp_w() * 0.9,
                max_w: b.ledger.tdp_w(),
                priority: (i % 5) as i32,
                preemptible: true,
                ttl_s: 86_400.0,
            };
            if b.ledger.create(r, 0.0).is_ok() {
                made += 1;
            }
        }
        println!("{} nodes, {made} active leases", nodes);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .with_context(|| format!("binding {}", a.listen))?;
        println!("serving on http://{} (token {BENCH_TOKEN})", listener.local_addr()?);
        let _ = std::io::stdout().flush();
        let ticker = {
            let st = st.clone();
            let tick = a.tick_s;
            let budget = site.site.power_budget_kw;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs_f64(tick)).await;
                    let t = st.now_s();
                    let t0 = Instant::now();
                    st.on_tick(t, &image(&topo, t, budget), &mut Actions::default());
                    eprintln!("tick at {t:.0} s took {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
                }
            })
        };
        serve(listener, st, tokio::time::sleep(Duration::from_secs_f64(a.duration_s))).await?;
        ticker.abort();
        anyhow::Ok(())
    })
}
