#!/usr/bin/env python3
"""The seeded fault campaign's over-the-wire subset: real processes killed and restarted.

Per seed, three processes talk over loopback: a private Mosquitto, the simulated plant
(`coolplane sim-plant serve`: CDUs, facility and meter on Modbus TCP, rack agents on MQTT) and
the daemon (`coolplane run`). A schedule drawn from the seed then
  * kills the daemon with SIGKILL and starts a new one after a gap (long gaps outlast the CDUs'
    BMS timeout, so the devices fall back to their local setpoints meanwhile);
  * kills the broker with SIGKILL and restarts it after a gap longer than the controller's
    `stale_after_s`;
  * on some seeds kills the daemon a second time;
and ends the last daemon with SIGTERM. Invariants, each fails the run:
  * no GPU throttled, and the plant's energy ledger closed (the plant's KPIs, `--kpis-out`);
  * no setpoint outside the devices' limits reached them (writes refused by a device: 0);
  * no CDU supply setpoint in force moved faster than the controller's rate limit (1 K/min,
    plus the 0.05 K of rounding) -- a restarted daemon starts from what the devices read back;
  * the daemon entered Safe mode after the broker died, within `stale_after_s` plus a tick and
    a telemetry period (plant time), and left it after the broker returned;
  * the last daemon stopped on SIGTERM with exit status 0 and its final report.
A failing seed is printed with the command that replays it.

    scripts/ci/wire_campaign.py --bin target/release/coolplane --seeds 3
"""

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SPEED = 60.0  # plant seconds per wall second
STALE_AFTER_S = 180.0  # the controller's default
TICK_S = 10.0  # the daemon's tick, plant s
TELEMETRY_S = 10.0  # rack telemetry period, plant s
RATE_K_PER_MIN = 1.0  # the controller's default supply rate limit


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, secs):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Run:
    def __init__(self, bin_path, seed, work, duration_min, inject=None):
        self.inject = inject
        self.bin = bin_path
        self.seed = seed
        self.work = work
        self.duration_min = duration_min
        self.rng = random.Random(seed)
        self.broker_port = free_port()
        # The plant's devices bind ports the system chooses (--modbus-port 0); read from its log.
        self.endpoints = []
        self.procs = []
        self.t0 = None
        self.daemon_logs = []
        self.failures = []

    # ---- processes -------------------------------------------------------------------------
    def spawn(self, args, log_name):
        log = open(os.path.join(self.work, log_name), "ab")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.work)
        self.procs.append(p)
        return p

    def start_broker(self):
        conf = os.path.join(self.work, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(f"listener {self.broker_port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        p = self.spawn([shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", conf], "mosquitto.log")
        if not wait_port(self.broker_port, 10):
            raise RuntimeError("the private Mosquitto did not start")
        return p

    def start_plant(self):
        args = [self.bin, "sim-plant", "serve", "--site", "hall-10k", "--seed", str(self.seed),
                "--start-day", str(self.seed * 37 % 365), "--speed", str(SPEED),
                "--modbus-port", "0", "--mqtt", f"127.0.0.1:{self.broker_port}",
                "--duration", f"{self.duration_min}m", "--kpis-out", "plant-kpis.json"]
        p = self.spawn(args, "plant.log")
        # Endpoints as the plant prints them once every device listens:
        # "  cdu  0  hall-a-cdu-01  modbus tcp 127.0.0.1:41429  map …", the meter last.
        end = time.monotonic() + 30
        while time.monotonic() < end and p.poll() is None:
            text = open(os.path.join(self.work, "plant.log"), errors="replace").read()
            lines = re.findall(r"^\s+(cdu|facility|meter|tank)\s+(\d+)\s+\S+\s+modbus tcp (\S+)", text, re.M)
            if any(role == "meter" for role, _, _ in lines):
                self.endpoints = lines
                break
            time.sleep(0.05)
        if not self.endpoints:
            raise RuntimeError("the simulated plant did not list its endpoints within 30 s (see plant.log)")
        for _, _, addr in self.endpoints:
            if not wait_port(int(addr.rsplit(":", 1)[1]), 10):
                raise RuntimeError(f"the simulated plant does not answer on {addr} (see plant.log)")
        self.t0 = time.monotonic()
        return p

    def cdu0_port(self):
        return next(int(a.rsplit(":", 1)[1]) for r, i, a in self.endpoints if r == "cdu" and i == "0")

    def write_register(self, port, address, value):
        """Modbus TCP function 06 (write single register), unit 1: a raw frame, no library."""
        pdu = bytes([0x06]) + address.to_bytes(2, "big") + (value & 0xFFFF).to_bytes(2, "big")
        frame = (7).to_bytes(2, "big") + (0).to_bytes(2, "big") + (len(pdu) + 1).to_bytes(2, "big") + b"\x01" + pdu
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            c.sendall(frame)
            c.recv(64)

    def daemon_config(self):
        if not self.endpoints:
            raise RuntimeError("no endpoints in plant.log")
        dev = []
        for role, idx, addr in self.endpoints:
            dev.append(f'[[device]]\nrole = "{role}"\nindex = {idx}\naddress = "{addr}"\n'
                       f'map = "builtin:coolplane-{role}"\npoll_s = 5.0\ntimeout_ms = 300\n'
                       f'backoff_ms = 200\nbackoff_max_ms = 2000\n')
        # `--inject late-safe`: a controller that waits 15 min before calling data stale.
        stale = 900.0 if self.inject == "late-safe" else STALE_AFTER_S
        path = os.path.join(self.work, "daemon.toml")
        with open(path, "w") as f:
            f.write(f'[daemon]\nsite = "hall-10k"\npolicy = "trim-respond"\ntick_s = {TICK_S}\n'
                    f'speed = {SPEED}\n\n[controller]\nstale_after_s = {stale}\n\n'
                    f'[mqtt]\nhost = "127.0.0.1"\nport = {self.broker_port}\n'
                    f'client_id = "wire-campaign-{self.seed}"\naccept_commands = false\n'
                    f'discovery = false\n\n' + "\n".join(dev))
        return path

    def start_daemon(self, n):
        log = f"daemon-{n}.log"
        self.daemon_logs.append(log)
        return self.spawn([self.bin, "--log-format", "json", "run", "--config", "daemon.toml"], log)

    def plant_min(self):
        return (time.monotonic() - self.t0) * SPEED / 60.0

    def sleep_until(self, minute):
        while self.plant_min() < minute:
            time.sleep(0.05)

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    # ---- the run ---------------------------------------------------------------------------
    def schedule(self):
        r = self.rng
        s = {
            "daemon_kill_min": r.uniform(8, 15),
            "daemon_gap_min": r.uniform(0.5, 4.0),
            "broker_kill_min": r.uniform(25, 32),
            "broker_gap_min": r.uniform(4.0, 7.0),
        }
        if r.random() < 0.5:
            s["second_daemon_kill_min"] = r.uniform(44, 48)
            s["second_daemon_gap_min"] = r.uniform(0.5, 2.0)
        return s

    def run(self):
        sched = self.schedule()
        print(f"seed {self.seed}: schedule (plant minutes) "
              + ", ".join(f"{k} {v:.1f}" for k, v in sched.items()), flush=True)
        broker = self.start_broker()
        plant = self.start_plant()
        self.daemon_config()
        daemon = self.start_daemon(1)
        self.sleep_until(sched["daemon_kill_min"])
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        self.sleep_until(sched["daemon_kill_min"] + sched["daemon_gap_min"])
        daemon = self.start_daemon(2)
        if self.inject == "jump":
            # Someone else writes CDU 0's supply setpoint to 45 °C in one go (register 0, x10).
            self.sleep_until(sched["daemon_kill_min"] + sched["daemon_gap_min"] + 3.0)
            self.write_register(self.cdu0_port(), 0, 450)
        self.sleep_until(sched["broker_kill_min"])
        broker.send_signal(signal.SIGKILL)
        broker.wait()
        broker_down_wall = dt.datetime.now(dt.timezone.utc)
        self.sleep_until(sched["broker_kill_min"] + sched["broker_gap_min"])
        broker = self.start_broker()
        broker_up_wall = dt.datetime.now(dt.timezone.utc)
        outage_log = self.daemon_logs[-1]
        n = 3
        if "second_daemon_kill_min" in sched:
            self.sleep_until(sched["second_daemon_kill_min"])
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
            self.sleep_until(sched["second_daemon_kill_min"] + sched["second_daemon_gap_min"])
            daemon = self.start_daemon(n)
        self.sleep_until(self.duration_min - 2.0)
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            self.failures.append(f"daemon: SIGTERM gave exit status {code} (want 0)")
        last_log = open(os.path.join(self.work, self.daemon_logs[-1]), errors="replace").read()
        if not re.search(r"^adapters: \d+ ticks", last_log, re.M):
            self.failures.append("daemon: no final report after SIGTERM")
        try:
            plant.wait(timeout=self.duration_min * 60 / SPEED + 60)
        except subprocess.TimeoutExpired:
            self.failures.append("plant: did not stop at the end of its duration")
        self.check_plant()
        self.check_safe_mode(outage_log, broker_down_wall, broker_up_wall)
        self.stop_all()
        return sched

    # ---- invariants ------------------------------------------------------------------------
    def check_plant(self):
        path = os.path.join(self.work, "plant-kpis.json")
        try:
            k = json.load(open(path))
        except (OSError, ValueError) as e:
            self.failures.append(f"plant: no KPIs ({e})")
            return
        self.kpis = k
        if k["throttle_gpu_s"] != 0:
            self.failures.append(f"no-throttling: {k['throttle_gpu_s']:.0f} GPU-s, hottest {k['gpu_temp_max_c']:.1f} °C")
        # The scenario harness's tolerance (ENERGY_LEDGER_TOLERANCE_PCT).
        if not abs(k["energy_balance_error_pct"]) <= 0.01:
            self.failures.append(f"energy-ledger: error {k['energy_balance_error_pct']} % (tolerance 0.01 %)")
        if k["rejected_writes"] != 0:
            self.failures.append(f"setpoint-limits: {k['rejected_writes']} write(s) refused by the devices")
        rate = k["supply_setpoint_max_rate_k_per_min"]
        if not rate <= RATE_K_PER_MIN + 0.05 + 1e-9:
            self.failures.append(f"setpoint-rate: a supply setpoint moved {rate:.2f} K/min (limit {RATE_K_PER_MIN})")

    def events(self, log):
        out = []
        for line in open(os.path.join(self.work, log), errors="replace"):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            msg = j.get("fields", {}).get("message", "")
            ts = j.get("timestamp")
            if ts:
                out.append((dt.datetime.fromisoformat(ts.replace("Z", "+00:00")), msg))
        return out

    def check_safe_mode(self, log, down, up):
        ev = self.events(log)
        to_safe = [t for t, m in ev if "→ Safe" in m and t >= down]
        budget_s = (STALE_AFTER_S + TICK_S + TELEMETRY_S) / SPEED + 2.0
        if not to_safe:
            self.failures.append("safe-mode: the daemon never entered Safe mode after the broker died")
        else:
            late = (to_safe[0] - down).total_seconds()
            if late > budget_s:
                self.failures.append(f"safe-mode: entered {late * SPEED:.0f} s (plant) after the broker died "
                                     f"(at most {budget_s * SPEED:.0f} s)")
            self.safe_after_plant_s = late * SPEED
        if not [t for t, m in ev if "Safe → Auto" in m and t >= up]:
            self.failures.append("safe-mode: the daemon did not leave Safe mode after the broker returned")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/coolplane")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=60.0, help="plant minutes per seed")
    ap.add_argument("--inject", choices=["jump", "late-safe"],
                    help="a deliberate defect, to show the checks fail: a 45 °C setpoint write from "
                         "outside, or a daemon that calls data stale only after 15 min")
    a = ap.parse_args()
    bin_path = os.path.abspath(a.bin)
    failing = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        work = tempfile.mkdtemp(prefix=f"wire-campaign-{seed}-")
        r = Run(bin_path, seed, work, a.minutes, a.inject)
        try:
            r.run()
        except Exception as e:  # a run that could not be set up is a failure too
            r.failures.append(f"setup: {e}")
        finally:
            r.stop_all()
        k = getattr(r, "kpis", None)
        if k:
            print(f"  plant: throttle {k['throttle_gpu_s']:.0f} GPU-s, hottest {k['gpu_temp_max_c']:.1f} °C, "
                  f"ledger error {k['energy_balance_error_pct']:.2e} %, writes {k['setpoint_writes']} "
                  f"(refused {k['rejected_writes']}), largest supply setpoint move "
                  f"{k['supply_setpoint_max_rate_k_per_min']:.2f} K/min")
        if hasattr(r, "safe_after_plant_s"):
            print(f"  daemon: Safe mode {r.safe_after_plant_s:.0f} s (plant) after the broker died")
        if r.failures:
            failing.append(seed)
            for f in r.failures:
                print(f"  VIOLATION {f}")
            print(f"  logs: {work}")
            print(f"  replay: scripts/ci/wire_campaign.py --bin {a.bin} --seeds 1 --first-seed {seed}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wire campaign: {a.seeds} seed(s), {len(failing)} failing {failing if failing else ''}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
