//! Structured logs on stderr with `tracing`: human-readable by default, one JSON object a line
//! with `--log-format json`; the level and per-module filters from `RUST_LOG` (default `info`).

use anyhow::{Context, Result};
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line (for journald, Loki, Elasticsearch).
    Json,
}

/// Install the global subscriber.
pub fn init(format: LogFormat) -> Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            EnvFilter::try_new(&v).with_context(|| format!("RUST_LOG = {v:?} is not a valid filter"))?
        }
        _ => EnvFilter::new("info"),
    };
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        LogFormat::Human => b
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => b.json().with_current_span(false).try_init(),
    }
    .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))
}
