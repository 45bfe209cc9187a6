#!/usr/bin/env python3
"""What survives SIGKILL at several points of a run, with the defaults
(--interval 1s, --checkpoint 10s).

For each kill time, `vtrace record --layers cpu,net,fs` records a spinner
(cpu-mix) beside a ping over loopback, is killed with SIGKILL, and what it
left is read back (`vtrace report` of the staging directory, then `vtrace
recover`). Printed per kill: what was left, the intervals and seconds of CPU
time that survive, the checkpoint every other table is as of, how many
tables came back, the spinner's recovered CPU time against its schedstat at
the kill, and loopback's packets at both hops against lo's own counters
read with them (the checkpoint's window).

Usage (root, after `cargo build --release`): benches/kill-points.py [SECONDS ...]
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRACE = os.path.join(ROOT, "target/release/vtrace")
CPU_MIX = os.path.join(ROOT, "target/release/cpu-mix")
PING_TARGET = "127.0.0.7"  # a loopback address of its own, to find the ping afterwards


def staging_of(out):
    parent, name = os.path.split(out)
    for entry in os.listdir(parent):
        if entry.startswith(f".{name}.tmp."):
            return os.path.join(parent, entry)
    return None


def schedstat_ns(pid):
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        pass
    return total


def workload_pid(staging):
    try:
        with open(os.path.join(staging, "journal/meta.json")) as f:
            return json.load(f)["workload"]["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def one(kill_at, tmp):
    out = os.path.join(tmp, f"kill{kill_at}.vtrace")
    script = f"ping -i 0.05 -q {PING_TARGET} >/dev/null & exec {CPU_MIX} --only spin --seconds 120"
    vt = subprocess.Popen(
        [VTRACE, "record", "--layers", "cpu,net,fs", "-o", out, "--", "sh", "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.monotonic()
    pid, truth = None, 0
    while time.monotonic() - started < kill_at:
        staging = staging_of(out)
        if pid is None and staging:
            pid = workload_pid(staging)
        time.sleep(0.01)
    if pid is None and staging_of(out):
        pid = workload_pid(staging_of(out))
    truth = schedstat_ns(pid) if pid else 0
    vt.send_signal(signal.SIGKILL)
    vt.wait()
    subprocess.run(["pkill", "-f", f"ping -i 0.05 -q {PING_TARGET}"])
    staging = staging_of(out)
    row = {"kill_s": kill_at}
    if staging is None:
        row["left"] = "nothing"
        return row
    if not os.path.isfile(os.path.join(staging, "journal/meta.json")):
        row["left"] = "staging, no journal (removed by the next record)"
        shutil.rmtree(staging)
        return row
    rep = subprocess.run([VTRACE, "report", "--format", "json", staging], capture_output=True, text=True)
    if rep.returncode != 0:
        row["left"] = f"unreadable: {rep.stderr.strip()}"
        return row
    r = json.loads(rep.stdout)
    inc = r["incomplete"]
    row["left"] = "journal" + (" + checkpoint" if inc.get("checkpoint_ns") is not None else "")
    row["intervals"] = inc["intervals"]
    row["cpu_s"] = inc["covered_ns"] / 1e9
    row["checkpoint_s"] = inc["checkpoint_ns"] / 1e9 if inc.get("checkpoint_ns") is not None else None
    rec = subprocess.run([VTRACE, "recover", staging, "-o", out], capture_output=True, text=True)
    row["recovered"] = rec.returncode == 0
    if rec.returncode == 0:
        with open(os.path.join(out, "meta.json")) as f:
            row["tables"] = len(json.load(f)["tables"])
    got = sum(t["total_ns"] for t in r["threads"] if t["pid"] == pid)
    row["spinner_s"] = got / 1e9
    row["schedstat_s"] = truth / 1e9
    counters = next((c for c in r.get("device_counters", []) if c["name"] == "lo"), None)
    hops = {d["hop"]: d["packets"] for d in r.get("devices", []) if d["name"] == "lo"}
    if counters:
        row["lo"] = (
            f"tx {hops.get('xmit', 0)}/{counters['tx_packets']} rx {hops.get('receive', 0)}/{counters['rx_packets']}"
        )
    return row


def main():
    if os.geteuid() != 0:
        sys.exit("run as root")
    points = [float(a) for a in sys.argv[1:]] or [0.3, 3, 15, 35]
    tmp = tempfile.mkdtemp(prefix="vtrace-kill-points-")
    try:
        print(
            f"{'kill at':>8}  {'left':<22} {'intervals':>9} {'CPU to':>8} {'ckpt at':>8} {'tables':>6} "
            f"{'spinner':>9} {'schedstat':>9}  lo packets probe/counters"
        )
        for t in points:
            r = one(t, tmp)
            fmt = lambda k, f: (f.format(r[k]) if r.get(k) is not None else "-")
            print(
                f"{t:>7.1f}s  {r['left']:<22} {fmt('intervals', '{}'):>9} {fmt('cpu_s', '{:.1f} s'):>8} "
                f"{fmt('checkpoint_s', '{:.1f} s'):>8} {fmt('tables', '{}'):>6} {fmt('spinner_s', '{:.2f} s'):>9} "
                f"{fmt('schedstat_s', '{:.2f} s'):>9}  {r.get('lo', '-')}",
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
