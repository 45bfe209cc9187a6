#!/usr/bin/env python3
"""Is vtrace's self-cost figure real? Checks the kernel-measured, calibrated
cost per event against the time a CPU-bound load actually loses.

  sudo benches/calibrate.py [--rounds 7] [--loops 200000]   (after cargo build --release)

The load: `perf bench sched pipe` pinned to one CPU, two tasks passing a
token through pipes: every op is two context switches and four syscalls,
and the CPU never idles, so whatever vtrace's programs cost on that CPU
lengthens the op. Interleaved rounds (order rotated) of: untraced; plain
`vtrace record` with the kernel's BPF statistics off (what the programs
really cost, nothing measuring them); and the same with the statistics on
throughout (what they add).

Printed: the real cost per op (traced - untraced, medians), beside what
the recording says per op: the programs' run time as the statistics
measured it, and calibrated (less the floor, plus the hook cost, both
measured at start-up: docs/overhead.md). What remains between the real
cost and the calibrated one is what no in-kernel counter sees: the
programs' memory traffic slowing the workload's own.
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRACE = os.path.join(ROOT, "target/release/vtrace")


def pipe_cmd(loops):
    return ["taskset", "-c", "1", "perf", "bench", "sched", "pipe", "-l", str(loops)]


def usecs_per_op(out):
    m = re.search(r"([\d.]+) usecs/op", out)
    if not m:
        raise RuntimeError(f"no usecs/op in: {out[-400:]}")
    return float(m.group(1))


def run(config, loops, tmp, idx):
    rec = os.path.join(tmp, f"r{idx}.vtrace")
    if config == "untraced":
        p = subprocess.run(pipe_cmd(loops), capture_output=True, text=True, check=True)
        return usecs_per_op(p.stdout), None
    stats = "off" if config == "vtrace, stats off" else "always"
    p = subprocess.run([VTRACE, "record", "--self-stats", stats, "-o", rec, "--", *pipe_cmd(loops)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-500:])
    return usecs_per_op(p.stdout), rec


def recorded_cost(rec, ops):
    r = json.loads(subprocess.run([VTRACE, "report", "--format", "json", rec], capture_output=True,
                                  text=True, check=True).stdout)
    o = r["overhead"]
    progs = [p for p in o["programs"] if p["events"] > 0]
    measured = sum(p["measured_ns_per_event"] * p["events"] for p in progs) / ops
    calibrated = sum(p["ns_per_event"] * p["events"] for p in progs) / ops
    events = sum(p["events"] for p in progs) / ops
    return measured, calibrated, events, o["bpf_stats_floor_ns"], o["bpf_hook_ns"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--loops", type=int, default=200000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("calibrate.py: run as root (it loads eBPF programs)")
    configs = ["untraced", "vtrace, stats off", "vtrace, stats always"]
    tmp = tempfile.mkdtemp(prefix="vtrace-calibrate-")
    times = {c: [] for c in configs}
    recorded = []
    try:
        for rnd in range(args.rounds):
            order = configs[rnd % 3:] + configs[:rnd % 3]
            for i, c in enumerate(order):
                us, rec = run(c, args.loops, tmp, i)
                times[c].append(us)
                if rec and c == "vtrace, stats always":
                    recorded.append(recorded_cost(rec, args.loops))
                if rec:
                    shutil.rmtree(rec, ignore_errors=True)
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {c: statistics.median(v) * 1000 for c, v in times.items()}
    print(f"\n== perf bench sched pipe -l {args.loops}, pinned to CPU 1: ns per op, {args.rounds} interleaved rounds")
    for c in configs:
        v = [x * 1000 for x in times[c]]
        print(f"{c:<24}{med[c]:>10.0f} ns/op   [{min(v):.0f}, {max(v):.0f}]")
    real = med["vtrace, stats off"] - med["untraced"]
    stats_cost = med["vtrace, stats always"] - med["vtrace, stats off"]
    m = statistics.median(x[0] for x in recorded)
    cal = statistics.median(x[1] for x in recorded)
    ev = statistics.median(x[2] for x in recorded)
    floor = statistics.median(x[3] for x in recorded)
    hook = statistics.median(x[4] for x in recorded)
    print(f"\nreal cost of the programs:              {real:>7.0f} ns/op  ({ev:.1f} program runs per op)")
    print(f"recorded, as the statistics measure it: {m:>7.0f} ns/op")
    print(f"recorded, calibrated (- floor {floor:.0f}, + hook {hook:.0f} ns/run): {cal:>7.0f} ns/op")
    print(f"what the statistics add when on:        {stats_cost:>7.0f} ns/op ({stats_cost / max(ev, 1e-9):.0f} ns per run)")
    print(f"real - calibrated, per run (what the figure still misses): {(real - cal) / max(ev, 1e-9):.0f} ns")


if __name__ == "__main__":
    main()
