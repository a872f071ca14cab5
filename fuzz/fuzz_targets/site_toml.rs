//! Site files (TOML): parse and validate; a site that passes gets its topology built.
#![no_main]

use coolplane_core::site::Site;
use coolplane_core::topology::Topology;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(site) = Site::from_toml_str("fuzz.toml", text) {
        // Topology is built from a validated site; skip only sites too large to build in a fuzz run.
        if site.gpu_count() <= 20_000 {
            let _ = Topology::new(&site);
        }
    }
});
