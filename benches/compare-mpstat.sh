#!/usr/bin/env bash
# Side-by-side of vtrace's whole-system CPU breakdown and `mpstat` over the
# same interval, under a steady load (cpu-mix: user spin, /dev/zero reads,
# loopback TCP). Prints both; the differences are explained in the README.
# Usage: sudo benches/compare-mpstat.sh [seconds]   (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT
target/release/cpu-mix --seconds $((secs + 3)) --out "$tmp/truth.json" &
sleep 1
# One mpstat interval of $secs seconds, started together with vtrace.
mpstat -P ALL "$secs" 1 > "$tmp/mpstat.txt" &
target/release/vtrace record --duration "${secs}s" -o "$tmp/run.vtrace" 2>/dev/null
wait
echo "== mpstat -P ALL $secs 1 (tick-sampled, HZ=$(getconf CLK_TCK) user-visible ticks)"
grep -E "Average|CPU" "$tmp/mpstat.txt" | head -4
target/release/vtrace report --format json "$tmp/run.vtrace" > "$tmp/report.json"
python3 - "$tmp/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cap = r["wall_ns"] * r["cpus"]
s = r["states"]
print("== vtrace (exact, % of wall x CPUs)")
print("  %usr   %sys  %soft   %irq %guest  %idle  unseen")
vals = [s["user_ns"], s["system_ns"], s["softirq_ns"], s["hardirq_ns"], s["guest_ns"], s["idle_ns"]]
unseen = cap - sum(vals)
print(" ".join("%6.2f" % (v * 100 / cap) for v in vals + [unseen]))
for c in r["per_cpu"]:
    w = r["wall_ns"]
    vals = [c["user_ns"], c["system_ns"], c["softirq_ns"], c["hardirq_ns"], c["guest_ns"], c["idle_ns"]]
    print("cpu%d " % c["cpu"] + " ".join("%6.2f" % (v * 100 / w) for v in vals))
PY
