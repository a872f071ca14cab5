//! Scenario files (TOML): parse and check every field.
#![no_main]

use coolplane_scenario::spec::ScenarioSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = ScenarioSpec::from_toml_str("fuzz.toml", text);
});
