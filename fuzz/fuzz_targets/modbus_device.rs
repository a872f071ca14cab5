//! Modbus request handling of a simulated device (the shipped CDU, tank, facility and meter
//! maps): each input is a sequence of Modbus TCP frames (MBAP header + PDU) decoded as the
//! protocol defines them, handed to the device one after the other.
#![no_main]

use coolplane_adapters::regmap::RegisterMap;
use coolplane_sim_wire::{DeviceUnderTest, CDU_MAP, FACILITY_MAP, METER_MAP, TANK_MAP};
use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use tokio_modbus::Request;

fn be16(b: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

/// One PDU as the Modbus application protocol lays it out; `None` for a frame a server's codec
/// rejects before the device sees it.
fn request(pdu: &[u8]) -> Option<Request<'static>> {
    let (&fc, rest) = pdu.split_first()?;
    let a = be16(rest)?;
    Some(match fc {
        0x01 => Request::ReadCoils(a, be16(&rest[2..])?),
        0x02 => Request::ReadDiscreteInputs(a, be16(&rest[2..])?),
        0x03 => Request::ReadHoldingRegisters(a, be16(&rest[2..])?),
        0x04 => Request::ReadInputRegisters(a, be16(&rest[2..])?),
        0x05 => Request::WriteSingleCoil(a, be16(&rest[2..])? == 0xFF00),
        0x06 => Request::WriteSingleRegister(a, be16(&rest[2..])?),
        0x10 => {
            let n = usize::from(be16(&rest[2..])?);
            let bytes = rest.get(5..5 + 2 * n)?;
            Request::WriteMultipleRegisters(a, Cow::Owned(bytes.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect()))
        }
        0x17 => {
            let rn = be16(&rest[2..])?;
            let wa = be16(&rest[4..])?;
            let wn = usize::from(be16(&rest[6..])?);
            let bytes = rest.get(9..9 + 2 * wn)?;
            Request::ReadWriteMultipleRegisters(a, rn, wa, Cow::Owned(bytes.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect()))
        }
        _ => Request::Custom(fc, Cow::Owned(rest.to_vec())),
    })
}

/// The shipped maps, parsed once per process; every input starts on a fresh device.
fn maps() -> &'static [Arc<RegisterMap>; 4] {
    static MAPS: OnceLock<[Arc<RegisterMap>; 4]> = OnceLock::new();
    MAPS.get_or_init(|| {
        [CDU_MAP, TANK_MAP, FACILITY_MAP, METER_MAP]
            .map(|text| Arc::new(RegisterMap::from_toml_str("map", text).expect("a shipped map does not parse")))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let map = &maps()[usize::from(which % 4)];
    let dev = DeviceUnderTest::from_map(Arc::clone(map));
    // MBAP: transaction id, protocol id, length (unit id + PDU), unit id.
    while rest.len() >= 7 {
        let len = usize::from(u16::from_be_bytes([rest[4], rest[5]]));
        if len < 2 || rest.len() < 6 + len {
            break;
        }
        let pdu = &rest[7..6 + len];
        if let Some(req) = request(pdu) {
            let _ = dev.call(rest[6], req);
        }
        rest = &rest[6 + len..];
    }
    // Whatever was accepted lies within the map's firmware ranges.
    for (name, v) in dev.pending_writes() {
        let p = map.point(&name).unwrap();
        assert!(p.writable, "write accepted on read-only point {name}");
        assert!(v.is_finite(), "non-finite value accepted for {name}");
        assert!(p.min.is_none_or(|lo| v >= lo - 1e-6) && p.max.is_none_or(|hi| v <= hi + 1e-6), "{name} = {v} outside the map's range");
    }
});
