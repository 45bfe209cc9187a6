#!/usr/bin/env python3
"""Per-thread error against each thread's own schedstat, recording after
recording, for a thread that sleeps and wakes thousands of times beside a
spinner and a syscall thread (cpu-mix --only spin,syscall,sleep): the case of
issue #25. Prints one row per thread and recording, with the recording's
untraced context switches and what they would have over-charged.

    sudo benches/accuracy-sleepers.py [--rounds 10] [--seconds 3] [--vtrace PATH]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--vtrace", default=os.path.join(ROOT, "target/release/vtrace"))
    ap.add_argument("--splits", default="ticks,syscalls")
    a = ap.parse_args()
    mix = os.path.join(ROOT, "target/release/cpu-mix")
    worst = {}
    print(f"{'split':<9}{'#':>3} {'thread':<12}{'schedstat_ms':>13}{'vtrace_ms':>11}{'err%':>8}"
          f"{'unbounded_ms':>13}{'untraced':>9}{'trimmed_ms':>11}")
    with tempfile.TemporaryDirectory() as d:
        for split in a.splits.split(","):
            for i in range(1, a.rounds + 1):
                rec, truth = os.path.join(d, "r.vtrace"), os.path.join(d, "t.json")
                subprocess.run([a.vtrace, "record", "--layers", "cpu", "--cpu-split", split, "--force", "-o", rec,
                                "--", mix, "--seconds", str(a.seconds), "--only", "spin,syscall,sleep",
                                "--out", truth], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                r = json.loads(subprocess.run([a.vtrace, "report", "--format", "json", rec], check=True,
                                              capture_output=True).stdout)
                ov = r["overhead"]
                for t in json.load(open(truth))["threads"]:
                    row = next(x for x in r["threads"] if x["tid"] == t["tid"])
                    err = (row["total_ns"] - t["schedstat_ns"]) * 100 / t["schedstat_ns"]
                    worst.setdefault((split, t["name"]), []).append(err)
                    print(f"{split:<9}{i:>3} {t['name']:<12}{t['schedstat_ns']/1e6:>13.2f}{row['total_ns']/1e6:>11.2f}"
                          f"{err:>+8.2f}{row.get('unbounded_ns', 0)/1e6:>13.3f}{ov['untraced_switches']:>9}"
                          f"{ov.get('untraced_trimmed_ns', 0)/1e6:>11.2f}", flush=True)
    print("\nper split and thread: median error, worst error (%)")
    for (split, name), errs in sorted(worst.items()):
        print(f"{split:<9}{name:<12}{statistics.median(errs):>+8.2f}{max(errs, key=abs):>+8.2f}")

if __name__ == "__main__":
    sys.exit(main())
