//! Plots (placeholder until the plotting module lands; being written by another engineer).
#![allow(missing_docs)]
use crate::series::TimeSeries;
pub struct PlotMeta {
    pub title: String,
}
pub fn write_plots(
    _s: &TimeSeries,
    _m: &PlotMeta,
    _d: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>, std::io::Error> {
    Ok(vec![])
}
