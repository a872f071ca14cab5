//! Daemon configuration files (TOML): parse and check every field.
#![no_main]

use coolplane_runtime::DaemonConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = DaemonConfig::from_toml_str("fuzz.toml", text);
});
