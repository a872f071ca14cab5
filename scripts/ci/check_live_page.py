#!/usr/bin/env python3
"""Check two DOM dumps of coolplane's live page (headless Chromium `--dump-dom`, taken a few
seconds apart during a demo) and its screenshot.

Fails unless: the page shows a PUE number, a controller mode, a plant time, a hottest-GPU figure
and a CDU table with at least one row of numbers; it received live data (the updates counter
counts `state` events of the event stream, at least two: the state at connect and one pushed
after it; the connection is not left "connecting" or "reconnecting"); the plan panel says "no
plan yet" (no plan source exists); the two loads differ (plant time and CDU table moved on: the
numbers are live); the screenshot is a PNG of the stated size.

Load the page as `http://HOST:PORT/?updates=N` (N >= 2): a headless browser's dump waits for open
connections to end, and the page closes its event stream after N live updates.

usage: check_live_page.py DOM1 DOM2 SCREENSHOT.png
"""
import re
import struct
import sys
from html.parser import HTMLParser


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.by_id = {}
        self.stack = []  # (tag, id) of open elements
        self.rows = []  # CDU table rows (lists of cell texts)
        self.in_cdus = False
        self.row = None
        self.cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("br", "meta", "link", "input", "img", "hr"):
            return
        self.stack.append((tag, a.get("id")))
        if a.get("id") == "cdus":
            self.in_cdus = True
        if self.in_cdus and tag == "tr":
            self.row = []
        if self.in_cdus and tag == "td":
            self.cell = ""

    def handle_endtag(self, tag):
        while self.stack:
            t, i = self.stack.pop()
            if t == "table" and i == "cdus":
                self.in_cdus = False
            if t == tag:
                break
        if tag == "td" and self.row is not None and self.cell is not None:
            self.row.append(self.cell.strip())
            self.cell = None
        if tag == "tr" and self.row is not None:
            if self.row:
                self.rows.append(self.row)
            self.row = None

    def handle_data(self, data):
        for _, i in self.stack:
            if i:
                self.by_id[i] = self.by_id.get(i, "") + data
        if self.cell is not None:
            self.cell += data


def load(path):
    p = Page()
    p.feed(open(path, encoding="utf-8").read())
    return p


def text(p, i):
    return p.by_id.get(i, "").strip()


def check(p, name):
    pue = text(p, "pue")
    assert re.fullmatch(r"\d\.\d{4}", pue), f"{name}: PUE is {pue!r}, not a number"
    assert 1.0 < float(pue) < 2.0, f"{name}: PUE {pue} implausible"
    assert text(p, "mode") in ("Auto", "Manual", "Safe"), f"{name}: mode {text(p, 'mode')!r}"
    assert re.fullmatch(r"\d+:\d\d:\d\d", text(p, "clock")), f"{name}: plant time {text(p, 'clock')!r}"
    assert re.fullmatch(r"\d+\.\d", text(p, "hot")), f"{name}: hottest GPU {text(p, 'hot')!r}"
    updates = text(p, "updates")
    assert updates.isdigit() and int(updates) >= 2, (
        f"{name}: {updates!r} live updates over the event stream (at least 2 expected)"
    )
    conn = text(p, "conn")
    assert conn == "live" or conn.startswith("stopped after"), f"{name}: connection {conn!r}"
    assert text(p, "plan") == "no plan yet", f"{name}: plan panel {text(p, 'plan')!r}"
    assert p.rows, f"{name}: the CDU table is empty"
    for r in p.rows:
        assert len(r) == 9, f"{name}: CDU row {r}"
        assert re.fullmatch(r"-?\d+\.\d\d", r[1]), f"{name}: CDU {r[0]} supply {r[1]!r}"
        assert r[8] in ("fresh", "stale", "fallback"), f"{name}: CDU {r[0]} state {r[8]!r}"
    return pue


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    a, b = load(sys.argv[1]), load(sys.argv[2])
    pa, pb = check(a, "load 1"), check(b, "load 2")
    assert text(a, "clock") != text(b, "clock"), "plant time did not move between the two loads"
    assert a.rows != b.rows, "the CDU table did not change between the two loads"
    png = open(sys.argv[3], "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG"
    w, h = struct.unpack(">II", png[16:24])
    assert (w, h) == (1280, 1200) and len(png) > 20_000, f"screenshot {w}x{h}, {len(png)} bytes"
    print(
        f"live page ok: PUE {pa} -> {pb}, plant time {text(a, 'clock')} -> {text(b, 'clock')}, "
        f"{len(b.rows)} CDU rows, mode {text(b, 'mode')}, hottest GPU {text(b, 'hot')} °C, "
        f"screenshot {w}x{h} {len(png)} bytes"
    )


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, OSError) as e:
        print(f"live page check FAILED: {e}", file=sys.stderr)
        sys.exit(1)
