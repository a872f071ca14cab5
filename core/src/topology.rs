//! Topology: the site expanded into flat, indexed halls, CDUs, racks and GPUs.
//!
//! Indices are dense and stable: hall `h` owns CDUs `hall.cdus`, CDU `c` owns racks `cdu.racks`,
//! rack `r` owns GPUs `rack.gpus`. Everything that keeps per-object state (the plant, the
//! controller, the adapters) indexes with these.

use crate::site::Site;
use std::ops::Range;

/// One hall after expanding `count`.
#[derive(Debug, Clone, PartialEq)]
pub struct HallNode {
    /// Name (with `-N` suffix when the site entry has `count > 1`).
    pub name: String,
    /// Index of the `[[halls]]` entry of the site file that describes it.
    pub spec: usize,
    /// CDU indices.
    pub cdus: Range<usize>,
    /// Rack indices.
    pub racks: Range<usize>,
    /// GPU indices.
    pub gpus: Range<usize>,
}

/// One CDU.
#[derive(Debug, Clone, PartialEq)]
pub struct CduNode {
    /// Name, e.g. `hall-a-cdu-03`.
    pub name: String,
    /// Hall index.
    pub hall: usize,
    /// Rack indices on its secondary loop.
    pub racks: Range<usize>,
}

/// One rack.
#[derive(Debug, Clone, PartialEq)]
pub struct RackNode {
    /// Name, e.g. `hall-a-r017`.
    pub name: String,
    /// CDU index.
    pub cdu: usize,
    /// Hall index.
    pub hall: usize,
    /// GPU indices.
    pub gpus: Range<usize>,
}

/// The expanded site.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Halls.
    pub halls: Vec<HallNode>,
    /// CDUs.
    pub cdus: Vec<CduNode>,
    /// Racks.
    pub racks: Vec<RackNode>,
    /// Total GPUs.
    pub gpu_count: usize,
}

impl Topology {
    /// Expand a validated site.
    pub fn new(site: &Site) -> Self {
        let mut halls = Vec::new();
        let mut cdus = Vec::new();
        let mut racks = Vec::new();
        let mut gpu = 0usize;
        for (spec, h) in site.halls.iter().enumerate() {
            for k in 0..h.count {
                let name = if h.count > 1 {
                    format!("{}-{}", h.name, k + 1)
                } else {
                    h.name.clone()
                };
                let hall_idx = halls.len();
                let cdu0 = cdus.len();
                let rack0 = racks.len();
                let gpu0 = gpu;
                for c in 0..h.cdu.count {
                    let cdu_idx = cdus.len();
                    let r0 = racks.len();
                    for _ in 0..h.cdu.racks_per_cdu {
                        let n = (h.rack.nodes_per_rack * h.rack.gpus_per_node) as usize;
                        racks.push(RackNode {
                            name: format!("{name}-r{:03}", racks.len() - rack0 + 1),
                            cdu: cdu_idx,
                            hall: hall_idx,
                            gpus: gpu..gpu + n,
                        });
                        gpu += n;
                    }
                    cdus.push(CduNode {
                        name: format!("{name}-cdu-{:02}", c + 1),
                        hall: hall_idx,
                        racks: r0..racks.len(),
                    });
                }
                halls.push(HallNode {
                    name,
                    spec,
                    cdus: cdu0..cdus.len(),
                    racks: rack0..racks.len(),
                    gpus: gpu0..gpu,
                });
            }
        }
        Self {
            halls,
            cdus,
            racks,
            gpu_count: gpu,
        }
    }

    /// The `[[halls]]` entry of the site file that describes hall `h`.
    pub fn hall_spec<'a>(&self, site: &'a Site, h: usize) -> &'a crate::site::Hall {
        &site.halls[self.halls[h].spec]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::builtin_site;

    #[test]
    fn ranges_are_dense_and_consistent() {
        for name in crate::site::BUILTIN_SITES {
            let site = builtin_site(name).unwrap();
            let t = Topology::new(&site);
            assert_eq!(t.gpu_count, site.gpu_count());
            assert_eq!(t.racks.len(), site.rack_count());
            assert_eq!(t.cdus.len(), site.cdu_count());
            let mut next = 0;
            for r in &t.racks {
                assert_eq!(r.gpus.start, next);
                next = r.gpus.end;
                assert!(t.cdus[r.cdu]
                    .racks
                    .contains(&(t.racks.iter().position(|x| x == r).unwrap())));
            }
            assert_eq!(next, t.gpu_count);
        }
    }
}
