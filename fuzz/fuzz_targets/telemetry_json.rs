//! MQTT payloads: rack telemetry, power-limit commands and their answers, RFC 3339 times.
#![no_main]

use coolplane_adapters::telemetry::{
    parse_power_limit_command, parse_power_limit_result, parse_rack_telemetry_with_stats, parse_rfc3339,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for gpus in [0usize, 1, 8, 72] {
        if let Ok((t, _)) = parse_rack_telemetry_with_stats(data, gpus, 87.0) {
            assert_eq!(t.gpu_power_w.len(), gpus, "telemetry accepted with the wrong GPU count");
            assert!(t.gpu_temp_c.iter().all(|x| x.is_finite()), "non-finite temperature accepted");
        }
        if let Ok(c) = parse_power_limit_command(data, gpus) {
            assert!(c.limits_w.iter().all(|x| x.is_finite()), "non-finite limit accepted");
        }
        let _ = parse_power_limit_result(data, gpus);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = parse_rfc3339(s);
    }
});
