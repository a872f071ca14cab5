//! Register maps: the TOML map parser, then the decoder and encoder of every point it accepts,
//! on register words taken from the input.
#![no_main]

use coolplane_adapters::regmap::{decode, encode, encode_reading, RegisterMap};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Input: map text, a NUL byte, then register words (big-endian pairs).
    let (text, words) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(map) = RegisterMap::from_toml_str("fuzz.toml", text) else {
        return;
    };
    let words: Vec<u16> = words.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])).collect();
    for gap in [0u16, 4, u16::MAX] {
        for block in map.read_plan(gap) {
            let _ = map.decode_block(&block, &words);
        }
    }
    for (i, p) in map.points.iter().enumerate() {
        let start = (i * 2) % words.len().max(1);
        let chunk = words.get(start..).unwrap_or(&[]);
        let _ = decode(p, chunk);
        let _ = decode(p, &[]);
        let _ = map.file_address(p);
        for v in [0.0, -1.0, 1e300, f64::NAN, f64::INFINITY, p.min.unwrap_or(0.0), p.max.unwrap_or(1.0)] {
            if let Ok(w) = encode(p, v) {
                let _ = decode(p, &w);
            }
            let _ = encode_reading(p, Some(v));
        }
        let _ = encode_reading(p, None);
    }
});
