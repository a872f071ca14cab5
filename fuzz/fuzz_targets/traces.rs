//! Workload trace readers: Helios occupancy, Alibaba pod list, GPU duty cycles, Zeus power sweeps.
#![no_main]

use coolplane_sim_plant::perf_fit::parse_zeus_summary;
use coolplane_sim_plant::workload::{parse_duty_cycle_csv, WorkloadModel};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    // A small site and a day's horizon keep each run short; the readers are what is fuzzed.
    match which % 4 {
        0 => {
            let _ = WorkloadModel::from_helios_occupancy(text, 64, 86_400.0, 1);
        }
        1 => {
            let _ = WorkloadModel::from_alibaba_pods(text, 64, 86_400.0, 1);
        }
        2 => {
            let _ = parse_duty_cycle_csv(text);
        }
        _ => {
            let _ = parse_zeus_summary(text);
        }
    }
});
