//! EnergyPlus weather files: the EPW reader, then period finding and sampling on what it accepts.
#![no_main]

use coolplane_core::weather::{HeatBasis, PeriodKind, WeatherSeries};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(w) = WeatherSeries::from_epw_str("fuzz.epw", text) {
        for kind in [PeriodKind::PeakHeatWeek, PeriodKind::TypicalWeek, PeriodKind::ColdWeek] {
            let p = w.find_period(kind, HeatBasis::DryBulb);
            let s = w.sample(p.start_s);
            assert!(s.dry_bulb_c.is_finite(), "non-finite dry bulb from an accepted file");
        }
    }
});
