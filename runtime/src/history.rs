//! History: every tick's state points and per-rack GPU summaries, written to a time-series
//! database over the InfluxDB v2 write API (`/api/v2/write`, line protocol) with the `influxdb2`
//! crate. InfluxDB 2.x/3.x and VictoriaMetrics serve that endpoint.
//!
//! Delivery is batched and survives outages without losing or duplicating points:
//!
//! - The daemon's tick hands its lines to one writer task through a bounded queue (it never
//!   waits; a full queue drops that tick's points, counted and logged).
//! - The writer keeps up to `buffer_points` lines in memory. Beyond that, the oldest lines go to
//!   disk in `spill_dir` (files of `batch` lines, written then renamed, so a crash leaves no
//!   half file), bounded by `spill_max_points`; past that bound the oldest file is dropped,
//!   counted and logged. Without a `spill_dir` the oldest lines in memory are dropped instead.
//! - Batches go out oldest first (disk, then memory), one at a time; a batch leaves the buffer
//!   only when the database answered 204. A failed write backs off (doubling up to
//!   `retry_max_ms`) and is retried with the same lines. A batch the database refuses as
//!   malformed (HTTP 400) would fail forever: it is dropped, counted and logged.
//! - On close, what cannot be delivered is spilled to disk; the next start resends it first.
//!
//! A write that times out after the database stored it is resent, so such a batch can arrive
//! twice; InfluxDB overwrites a point with the same series and time stamp, and VictoriaMetrics
//! does so with `-dedup.minScrapeInterval`. Refused connections (a database that is down) are
//! never ambiguous.

use crate::snapshot::Snapshot;
use influxdb2::api::write::TimestampPrecision;
use influxdb2::models::{DataPoint, WriteDataPoint};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// `[history]` table of the daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// Base URL of the database (`http://127.0.0.1:8428` for VictoriaMetrics,
    /// `http://127.0.0.1:8086` for InfluxDB).
    pub url: String,
    /// Organisation (InfluxDB; VictoriaMetrics ignores it).
    #[serde(default)]
    pub org: String,
    /// Bucket (InfluxDB; VictoriaMetrics ignores it).
    #[serde(default = "default_bucket")]
    pub bucket: String,
    /// API token (empty: no Authorization header).
    #[serde(default)]
    pub token: String,
    /// Lines per write request.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Lines kept in memory while the database is unreachable; beyond that they spill to disk.
    #[serde(default = "default_buffer")]
    pub buffer_points: usize,
    /// Directory for spilled lines (absent: no spilling; overflow is dropped, counted and logged).
    #[serde(default)]
    pub spill_dir: Option<PathBuf>,
    /// Most lines kept on disk.
    #[serde(default = "default_spill_max")]
    pub spill_max_points: usize,
    /// Longest time a line waits in memory before a (short) batch is sent, ms.
    #[serde(default = "default_flush")]
    pub flush_ms: u64,
    /// Timeout of one write request, ms.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Longest back-off between failed writes, ms (starts at 250 ms and doubles).
    #[serde(default = "default_retry_max")]
    pub retry_max_ms: u64,
}

fn default_bucket() -> String {
    "coolplane".into()
}
fn default_batch() -> usize {
    5_000
}
fn default_buffer() -> usize {
    200_000
}
fn default_spill_max() -> usize {
    20_000_000
}
fn default_flush() -> u64 {
    1_000
}
fn default_timeout() -> u64 {
    10_000
}
fn default_retry_max() -> u64 {
    10_000
}

impl HistoryConfig {
    /// A configuration with every default, writing to `url`.
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_string(),
            org: String::new(),
            bucket: default_bucket(),
            token: String::new(),
            batch: default_batch(),
            buffer_points: default_buffer(),
            spill_dir: None,
            spill_max_points: default_spill_max(),
            flush_ms: default_flush(),
            timeout_ms: default_timeout(),
            retry_max_ms: default_retry_max(),
        }
    }

    /// Check the fields; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        let uri: axum::http::Uri = self
            .url
            .parse()
            .map_err(|e| format!("history.url = {:?}: {e}", self.url))?;
        if !matches!(uri.scheme_str(), Some("http") | Some("https")) || uri.host().is_none() {
            return Err(format!(
                "history.url = {:?}: expected http://HOST:PORT or https://HOST:PORT",
                self.url
            ));
        }
        if self.bucket.is_empty() {
            return Err("history.bucket: must not be empty".into());
        }
        if !(1..=1_000_000).contains(&self.batch) {
            return Err(format!("history.batch = {}: must be within [1, 1000000]", self.batch));
        }
        if self.buffer_points < self.batch {
            return Err(format!(
                "history.buffer_points = {}: must be at least history.batch ({})",
                self.buffer_points, self.batch
            ));
        }
        if self.spill_dir.is_some() && self.spill_max_points < self.batch {
            return Err(format!(
                "history.spill_max_points = {}: must be at least history.batch ({})",
                self.spill_max_points, self.batch
            ));
        }
        for (name, v) in [
            ("flush_ms", self.flush_ms),
            ("timeout_ms", self.timeout_ms),
            ("retry_max_ms", self.retry_max_ms),
        ] {
            if v == 0 || v > 3_600_000 {
                return Err(format!("history.{name} = {v}: must be within [1, 3600000] ms"));
            }
        }
        Ok(())
    }
}

/// Counters of the history writer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HistoryStats {
    /// Lines the database acknowledged.
    pub points_written: u64,
    /// Write requests acknowledged.
    pub batches_written: u64,
    /// Write requests that failed (and will be retried).
    pub write_errors: u64,
    /// Lines dropped: queue full, buffers full, refused as malformed, or a spill file lost.
    pub points_dropped: u64,
    /// Lines waiting in memory.
    pub points_buffered: u64,
    /// Lines waiting on disk.
    pub points_spilled: u64,
    /// Lines ever written to disk.
    pub points_spilled_total: u64,
    /// Lines found on disk at start (resent first).
    pub points_replayed: u64,
    /// The last write succeeded.
    pub healthy: bool,
    /// Last error, for operators.
    pub last_error: Option<String>,
}

/// The line-protocol measurement of each level (VictoriaMetrics names a series
/// `{measurement}_{field}`).
pub mod measurement {
    /// Site state.
    pub const SITE: &str = "coolplane_site";
    /// Hall state.
    pub const HALL: &str = "coolplane_hall";
    /// CDU state.
    pub const CDU: &str = "coolplane_cdu";
    /// Rack state.
    pub const RACK: &str = "coolplane_rack";
    /// Per-rack GPU summary.
    pub const GPUS: &str = "coolplane_rack_gpus";
}

/// The controller mode as a number (`mode_code`): 0 auto, 1 manual, 2 safe, -1 unknown.
pub fn mode_code(mode: &str) -> f64 {
    match mode {
        "Auto" => 0.0,
        "Manual" => 1.0,
        "Safe" => 2.0,
        _ => -1.0,
    }
}

fn point(name: &str, tags: &[(&str, &str)], fields: &[(&str, Option<f64>)], unix_ms: i64) -> Option<String> {
    let mut b = DataPoint::builder(name);
    for (k, v) in tags {
        b = b.tag(*k, *v);
    }
    let mut any = false;
    for (k, v) in fields {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            b = b.field(*k, v);
            any = true;
        }
    }
    if !any {
        return None;
    }
    let p = b.timestamp(unix_ms).build().ok()?;
    let mut out = Vec::with_capacity(128);
    p.write_data_point_to(&mut out).ok()?;
    let mut s = String::from_utf8(out).ok()?;
    if s.ends_with('\n') {
        s.pop();
    }
    Some(s)
}

/// The line-protocol lines of one snapshot (millisecond time stamps). Values that are not
/// known (stale, bad) are left out; a point with nothing known is not written.
pub fn lines(s: &Snapshot) -> Vec<String> {
    let t = s.unix_ms;
    let site = s.site.name.as_str();
    let b = |x: bool| Some(if x { 1.0 } else { 0.0 });
    let mut out = Vec::with_capacity(1 + s.halls.len() + s.cdus.len() + 2 * s.racks.len());
    out.extend(point(
        measurement::SITE,
        &[("site", site)],
        &[
            ("pue", s.site.pue),
            ("facility_kw", s.site.facility_kw),
            ("it_kw", s.site.it_kw),
            ("cooling_kw", s.site.cooling_kw),
            ("heat_pump_kw", s.site.heat_pump_kw),
            ("loss_kw", s.site.loss_kw),
            ("budget_kw", s.site.budget_kw),
            ("headroom_kw", s.site.headroom_kw),
            ("hottest_gpu_c", s.site.hottest_gpu_c),
            ("hottest_margin_k", s.site.hottest_margin_k),
            ("racks_fresh", Some(s.site.racks_fresh as f64)),
            ("mode_code", Some(mode_code(&s.mode))),
        ],
        t,
    ));
    for h in &s.halls {
        out.extend(point(
            measurement::HALL,
            &[("site", site), ("hall", &h.name)],
            &[
                ("it_kw", h.it_kw),
                ("cooling_kw", h.cooling_kw),
                ("supply_c", h.supply_c),
                ("return_c", h.return_c),
                ("flow_lpm", h.flow_lpm),
                ("heat_pump_kw", h.heat_pump_kw),
                ("hottest_margin_k", h.hottest_margin_k),
            ],
            t,
        ));
    }
    for c in &s.cdus {
        out.extend(point(
            measurement::CDU,
            &[("site", site), ("hall", &c.hall), ("cdu", &c.name)],
            &[
                ("supply_c", c.supply_c),
                ("return_c", c.return_c),
                ("flow_lpm", c.flow_lpm),
                ("heat_kw", c.heat_kw),
                ("pump_kw", c.pump_kw),
                ("supply_setpoint_c", c.supply_setpoint_c),
                ("hottest_margin_k", c.hottest_margin_k),
                ("fresh", b(c.fresh)),
                ("alarms", Some(c.alarms as f64)),
                ("local_fallback", b(c.local_fallback)),
            ],
            t,
        ));
    }
    for r in &s.racks {
        out.extend(point(
            measurement::RACK,
            &[("site", site), ("cdu", &r.cdu), ("rack", &r.name)],
            &[
                ("it_kw", r.it_kw),
                ("inlet_c", r.inlet_c),
                ("outlet_c", r.outlet_c),
                ("fresh", b(r.fresh)),
            ],
            t,
        ));
        out.extend(point(
            measurement::GPUS,
            &[("site", site), ("cdu", &r.cdu), ("rack", &r.name)],
            &[
                ("temp_max_c", r.gpu_temp_max_c),
                ("temp_mean_c", r.gpu_temp_mean_c),
                ("margin_min_k", r.gpu_margin_min_k),
                ("power_w", r.gpu_power_w),
            ],
            t,
        ));
    }
    out
}

// ---- the buffer: memory, then disk ------------------------------------------------------------

/// Spilled files: `history-{seq:016}.lp`, oldest first.
struct Spill {
    dir: PathBuf,
    files: VecDeque<(u64, usize)>,
    next_seq: u64,
    lines: usize,
    max_lines: usize,
}

impl Spill {
    fn open(dir: &Path, max_lines: usize) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("history-") && name.ends_with(".tmp") {
                // An interrupted spill: the renamed file is the only complete one.
                tracing::warn!(file = %e.path().display(), "history: removing an incomplete spill file");
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            if let Some(seq) = name
                .strip_prefix("history-")
                .and_then(|s| s.strip_suffix(".lp"))
                .and_then(|s| s.parse::<u64>().ok())
            {
                let text = std::fs::read_to_string(e.path())?;
                found.push((seq, text.lines().filter(|l| !l.is_empty()).count()));
            }
        }
        found.sort();
        let lines = found.iter().map(|f| f.1).sum();
        Ok(Self {
            dir: dir.to_path_buf(),
            next_seq: found.last().map_or(0, |f| f.0 + 1),
            files: found.into(),
            lines,
            max_lines,
        })
    }

    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("history-{seq:016}.lp"))
    }

    /// Write `chunk` as the newest file. Returns lines dropped to make room (oldest files).
    fn push(&mut self, chunk: &[String]) -> std::io::Result<usize> {
        let mut dropped = 0;
        while self.lines + chunk.len() > self.max_lines {
            let Some((seq, n)) = self.files.pop_front() else { break };
            let _ = std::fs::remove_file(self.path(seq));
            self.lines -= n;
            dropped += n;
        }
        let seq = self.next_seq;
        let tmp = self.dir.join(format!("history-{seq:016}.tmp"));
        let mut text = chunk.join("\n");
        text.push('\n');
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, self.path(seq))?;
        self.next_seq += 1;
        self.files.push_back((seq, chunk.len()));
        self.lines += chunk.len();
        Ok(dropped)
    }

    fn oldest(&self) -> Option<std::io::Result<(u64, String, usize)>> {
        let &(seq, n) = self.files.front()?;
        Some(std::fs::read_to_string(self.path(seq)).map(|t| (seq, t, n)))
    }

    fn remove_oldest(&mut self) {
        if let Some((seq, n)) = self.files.pop_front() {
            let _ = std::fs::remove_file(self.path(seq));
            self.lines -= n;
        }
    }
}

enum Source {
    Disk,
    Memory(usize),
}

/// The outage buffer (sans HTTP): lines in memory, then on disk.
struct Buffer {
    mem: VecDeque<String>,
    spill: Option<Spill>,
    batch: usize,
    max_mem: usize,
    stats: HistoryStats,
}

impl Buffer {
    fn new(cfg: &HistoryConfig) -> std::io::Result<Self> {
        let spill = match &cfg.spill_dir {
            Some(d) => Some(Spill::open(d, cfg.spill_max_points)?),
            None => None,
        };
        let mut stats = HistoryStats::default();
        if let Some(s) = &spill {
            stats.points_replayed = s.lines as u64;
            if s.lines > 0 {
                tracing::info!(
                    points = s.lines,
                    files = s.files.len(),
                    dir = %s.dir.display(),
                    "history: resending points spilled before the last stop"
                );
            }
        }
        let mut b = Self {
            mem: VecDeque::new(),
            spill,
            batch: cfg.batch,
            max_mem: cfg.buffer_points,
            stats,
        };
        b.sync_stats();
        Ok(b)
    }

    fn sync_stats(&mut self) {
        self.stats.points_buffered = self.mem.len() as u64;
        self.stats.points_spilled = self.spill.as_ref().map_or(0, |s| s.lines as u64);
    }

    fn is_empty(&self) -> bool {
        self.mem.is_empty() && self.spill.as_ref().is_none_or(|s| s.files.is_empty())
    }

    fn has_disk(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| !s.files.is_empty())
    }

    fn drop_lines(&mut self, n: usize, why: &str) {
        if n == 0 {
            return;
        }
        self.stats.points_dropped += n as u64;
        tracing::error!(
            points = n,
            total_dropped = self.stats.points_dropped,
            "history: points dropped: {why}"
        );
    }

    /// Move the oldest `batch` lines of memory to disk (or drop them without a spill directory).
    fn spill_oldest(&mut self) {
        let n = self.batch.min(self.mem.len());
        let chunk: Vec<String> = self.mem.drain(..n).collect();
        match self.spill.as_mut() {
            Some(s) => match s.push(&chunk) {
                Ok(dropped) => {
                    self.stats.points_spilled_total += chunk.len() as u64;
                    self.drop_lines(
                        dropped,
                        "spill directory full (history.spill_max_points), oldest file removed",
                    );
                }
                Err(e) => self.drop_lines(chunk.len(), &format!("cannot write the spill file: {e}")),
            },
            None => self.drop_lines(
                chunk.len(),
                "memory buffer full (history.buffer_points) and no history.spill_dir",
            ),
        }
    }

    fn push(&mut self, lines: Vec<String>) {
        self.mem.extend(lines);
        while self.mem.len() > self.max_mem {
            self.spill_oldest();
        }
        self.sync_stats();
    }

    /// Everything in memory to disk (at close). Without a spill directory nothing can be kept.
    fn spill_all(&mut self) {
        while !self.mem.is_empty() {
            self.spill_oldest();
        }
        self.sync_stats();
    }

    /// The oldest batch: the oldest spill file, else the first `batch` lines in memory.
    fn next(&mut self) -> Option<(Source, String, usize)> {
        if let Some(s) = &self.spill {
            match s.oldest() {
                Some(Ok((_, text, n))) => return Some((Source::Disk, text, n)),
                Some(Err(e)) => {
                    let n = s.files.front().map_or(0, |f| f.1);
                    if let Some(s) = self.spill.as_mut() {
                        s.remove_oldest();
                    }
                    self.drop_lines(n, &format!("cannot read the spill file: {e}"));
                    self.sync_stats();
                    return self.next();
                }
                None => {}
            }
        }
        if self.mem.is_empty() {
            return None;
        }
        let n = self.batch.min(self.mem.len());
        let mut body = String::with_capacity(n * 128);
        for l in self.mem.iter().take(n) {
            body.push_str(l);
            body.push('\n');
        }
        Some((Source::Memory(n), body, n))
    }

    /// The batch was delivered (or must be discarded).
    fn done(&mut self, src: Source) {
        match src {
            Source::Disk => {
                if let Some(s) = self.spill.as_mut() {
                    s.remove_oldest()
                }
            }
            Source::Memory(n) => {
                self.mem.drain(..n);
            }
        }
        self.sync_stats();
    }
}

// ---- the writer task --------------------------------------------------------------------------

enum Cmd {
    Lines(Vec<String>),
    Close(oneshot::Sender<HistoryStats>),
}

/// Handle to the history writer task.
pub struct History {
    tx: mpsc::Sender<Cmd>,
    stats: Arc<Mutex<HistoryStats>>,
    dropped_here: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// Ticks that may wait for the writer before the newest are dropped.
const QUEUE_TICKS: usize = 4096;

impl History {
    /// Start the writer (inside a tokio runtime). Reads what an earlier run spilled, to resend
    /// it first.
    pub fn start(cfg: &HistoryConfig) -> Result<Self, String> {
        cfg.validate()?;
        let buf = Buffer::new(cfg).map_err(|e| {
            format!(
                "history.spill_dir = {:?}: {e}",
                cfg.spill_dir
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )
        })?;
        let client = influxdb2::ClientBuilder::new(cfg.url.clone(), cfg.org.clone(), cfg.token.clone())
            .build()
            .map_err(|e| format!("history.url = {:?}: {e}", cfg.url))?;
        let (tx, rx) = mpsc::channel(QUEUE_TICKS);
        let stats = Arc::new(Mutex::new(buf.stats.clone()));
        let dropped_here = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = tokio::spawn(writer(cfg.clone(), client, buf, rx, stats.clone()));
        tracing::info!(url = %cfg.url, bucket = %cfg.bucket, "history: writing state points");
        Ok(Self {
            tx,
            stats,
            dropped_here,
            task,
        })
    }

    /// Queue one tick's lines; never waits. A full queue drops them (counted, logged).
    pub fn submit(&self, lines: Vec<String>) {
        let n = lines.len();
        if n == 0 {
            return;
        }
        if self.tx.try_send(Cmd::Lines(lines)).is_err() {
            let total = self
                .dropped_here
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed)
                + n as u64;
            tracing::error!(
                points = n,
                total_dropped_queue = total,
                "history: writer queue full, points dropped"
            );
        }
    }

    /// Counters now.
    pub fn stats(&self) -> HistoryStats {
        let mut s = self.stats.lock().map(|s| s.clone()).unwrap_or_default();
        s.points_dropped += self.dropped_here.load(std::sync::atomic::Ordering::Relaxed);
        s
    }

    /// Deliver what can be delivered, spill the rest to disk, stop. Returns the final counters.
    pub async fn close(self) -> HistoryStats {
        let (tx, rx) = oneshot::channel();
        let extra = self.dropped_here.load(std::sync::atomic::Ordering::Relaxed);
        let mut s = if self.tx.send(Cmd::Close(tx)).await.is_ok() {
            rx.await.unwrap_or_else(|_| self.stats())
        } else {
            self.stats()
        };
        let _ = self.task.await;
        s.points_dropped += extra;
        s
    }
}

async fn writer(
    cfg: HistoryConfig,
    client: influxdb2::Client,
    mut buf: Buffer,
    mut rx: mpsc::Receiver<Cmd>,
    shared: Arc<Mutex<HistoryStats>>,
) {
    let flush = Duration::from_millis(cfg.flush_ms);
    let timeout = Duration::from_millis(cfg.timeout_ms);
    let retry_min = Duration::from_millis(250.min(cfg.retry_max_ms));
    let retry_max = Duration::from_millis(cfg.retry_max_ms);
    let mut backoff = retry_min;
    let mut retry_at = Instant::now();
    let mut oldest_at: Option<Instant> = None;
    let mut closing: Option<oneshot::Sender<HistoryStats>> = None;
    let publish = |b: &Buffer| {
        if let Ok(mut s) = shared.lock() {
            *s = b.stats.clone();
        }
    };
    loop {
        // Take everything queued.
        while closing.is_none() {
            match rx.try_recv() {
                Ok(Cmd::Lines(l)) => {
                    oldest_at.get_or_insert_with(Instant::now);
                    buf.push(l);
                }
                Ok(Cmd::Close(tx)) => closing = Some(tx),
                Err(_) => break,
            }
        }
        publish(&buf);
        let now = Instant::now();
        let due = buf.has_disk()
            || buf.mem.len() >= buf.batch
            || oldest_at.is_some_and(|t| now >= t + flush)
            || closing.is_some();
        if !buf.is_empty() && due && (now >= retry_at || closing.is_some()) {
            let Some((src, body, n)) = buf.next() else { continue };
            let r = tokio::time::timeout(
                timeout,
                client.write_line_protocol_with_precision(
                    &cfg.org,
                    &cfg.bucket,
                    body,
                    TimestampPrecision::Milliseconds,
                ),
            )
            .await;
            match r {
                Ok(Ok(())) => {
                    buf.done(src);
                    buf.stats.points_written += n as u64;
                    buf.stats.batches_written += 1;
                    if !buf.stats.healthy {
                        tracing::info!(url = %cfg.url, "history: database reachable, writing");
                    }
                    buf.stats.healthy = true;
                    backoff = retry_min;
                    if buf.mem.is_empty() {
                        oldest_at = None;
                    }
                }
                Ok(Err(influxdb2::RequestError::Http { status, text })) if status.as_u16() == 400 => {
                    buf.done(src);
                    buf.drop_lines(n, &format!("the database refused the batch as malformed (400): {text}"));
                    buf.stats.last_error = Some(format!("HTTP 400: {text}"));
                }
                other => {
                    let msg = match other {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {} ms", cfg.timeout_ms),
                    };
                    buf.stats.write_errors += 1;
                    if buf.stats.healthy || buf.stats.write_errors == 1 {
                        tracing::warn!(url = %cfg.url, error = %msg, buffered = buf.stats.points_buffered,
                            spilled = buf.stats.points_spilled, "history: write failed; keeping points and retrying");
                    } else {
                        tracing::debug!(error = %msg, "history: write failed again");
                    }
                    buf.stats.healthy = false;
                    buf.stats.last_error = Some(msg);
                    if let Some(tx) = closing.take() {
                        // Closing with the database away: keep the rest on disk for the next start.
                        buf.spill_all();
                        if buf.stats.points_spilled > 0 {
                            tracing::warn!(
                                points = buf.stats.points_spilled,
                                "history: database unreachable at stop; points kept on disk for the next start"
                            );
                        }
                        publish(&buf);
                        let _ = tx.send(buf.stats.clone());
                        return;
                    }
                    retry_at = Instant::now() + backoff;
                    backoff = (backoff * 2).min(retry_max);
                }
            }
            continue;
        }
        if let Some(tx) = closing.take() {
            // Everything delivered.
            publish(&buf);
            let _ = tx.send(buf.stats.clone());
            return;
        }
        let wake = if buf.is_empty() {
            now + Duration::from_secs(3600)
        } else if !due {
            oldest_at.map_or(now + flush, |t| t + flush).max(retry_at)
        } else {
            retry_at
        };
        tokio::select! {
            c = rx.recv() => match c {
                Some(Cmd::Lines(l)) => {
                    oldest_at.get_or_insert_with(Instant::now);
                    buf.push(l);
                }
                Some(Cmd::Close(tx)) => closing = Some(tx),
                None => {
                    // Every handle dropped without close: keep what is pending on disk.
                    buf.spill_all();
                    publish(&buf);
                    return;
                }
            },
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

#[cfg(test)]
mod tests;
