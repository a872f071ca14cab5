#!/usr/bin/env python3
"""Read a simulated CDU with pymodbus (software nobody here wrote) and check the float block.

Usage: pymodbus_float_block.py HOST PORT

The CDU map (maps/coolplane-cdu.toml) states: input registers 0.. hold int16 x10 measurements,
input registers 100.. hold IEEE-754 float32 values with LOW word first ("word-swapped"). This
script decodes the floats with that word order and checks them against the int16 values read
in the same second: they must agree within the int16 resolution plus one sensor sample's change.
Exits non-zero on any mismatch.
"""
import struct
import sys

from pymodbus.client import ModbusTcpClient


def read_input(client, address, count):
    # pymodbus renamed the unit-id keyword over its 3.x releases: try the known spellings.
    for kw in ("slave", "device_id", "unit"):
        try:
            rr = client.read_input_registers(address, count=count, **{kw: 1})
        except TypeError:
            continue
        if rr.isError():
            raise SystemExit(f"pymodbus: exception reading input {address}+{count}: {rr}")
        return rr.registers
    raise SystemExit("pymodbus: no known unit-id keyword")


def f32_low_first(lo, hi):
    return struct.unpack(">f", struct.pack(">HH", hi, lo))[0]


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    client = ModbusTcpClient(host, port=port, timeout=3)
    if not client.connect():
        raise SystemExit(f"pymodbus: cannot connect to {host}:{port}")
    ints = read_input(client, 0, 3)
    floats = read_input(client, 100, 6)
    client.close()
    i16 = lambda w: w - 65536 if w >= 32768 else w
    supply_i, return_i, flow_i = i16(ints[0]) / 10.0, i16(ints[1]) / 10.0, ints[2] / 10.0
    supply_f = f32_low_first(floats[0], floats[1])
    return_f = f32_low_first(floats[2], floats[3])
    flow_f = f32_low_first(floats[4], floats[5])
    print(f"pymodbus: supply {supply_f:.2f} °C (int16 {supply_i}), return {return_f:.2f} °C (int16 {return_i}), flow {flow_f:.1f} L/min (u16 {flow_i})")
    ok = abs(supply_f - supply_i) <= 0.6 and abs(return_f - return_i) <= 0.6 and abs(flow_f - flow_i) <= 0.05 * max(flow_i, 1.0)
    ok = ok and 10.0 < supply_f < 70.0 and return_f > supply_f and flow_f > 0
    if not ok:
        raise SystemExit("pymodbus: the float block does not match the int16 registers with the stated word order")
    print("pymodbus: float block (low word first) agrees with the int16 registers")


if __name__ == "__main__":
    main()
