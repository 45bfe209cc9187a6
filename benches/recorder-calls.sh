#!/usr/bin/env bash
# What vtrace's recorder does between intervals: the system calls it makes
# each second of a recording in the steady state (strace -c of a short and
# a long recording of `sleep`: their difference cancels set-up and
# wrap-up), and its own CPU over the long one without strace (the
# recording's vtrace_user_ns and vtrace_system_ns). At --interval 250ms,
# the guest tests' interval for a sandbox's start: in a TCG guest each
# call costs tens of microseconds, and the recorder shares the guest's one
# CPU with what it records. Root, strace installed.
#   benches/recorder-calls.sh [VTRACE] [INTERVAL] [SECONDS]
set -euo pipefail
vtrace=${1:-target/release/vtrace}
interval=${2:-250ms}
long=${3:-12}
short=2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for s in $short $long; do
  strace -f -c -o "$dir/calls-$s.txt" "$vtrace" record --interval "$interval" -o "$dir/traced-$s.vtrace" \
    -- sleep "$s" > /dev/null 2>&1
done
"$vtrace" record --interval "$interval" -o "$dir/plain.vtrace" -- sleep "$long" > /dev/null 2>&1
python3 - "$dir" "$short" "$long" "$interval" <<'EOF'
import json, sys
d, short, long, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def calls(seconds):
    out = {}
    for line in open(f"{d}/calls-{seconds}.txt"):
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            out[f[-1]] = int(f[3])
    return out

a, b = calls(short), calls(long)
rates = sorted(((b.get(k, 0) - a.get(k, 0)) / (long - short), k) for k in b)[::-1]
print(f"vtrace record --interval {interval}, steady state: system calls per second")
for rate, name in rates[:10]:
    print(f"  {name:16s} {rate:8.0f}")
print(f"  {'all':16s} {sum(r for r, _ in rates):8.0f}")
meta = json.load(open(f"{d}/plain.vtrace/meta.json"))
o = meta["overhead"]
wall = meta["wall_ns"] / 1e9
print(f"its own CPU over {wall:.1f} s (no strace): user {o['vtrace_user_ns'] / 1e9:.3f} s, "
      f"system {o['vtrace_system_ns'] / 1e9:.3f} s ({(o['vtrace_user_ns'] + o['vtrace_system_ns']) / 1e7 / wall:.2f} % of one CPU)")
EOF
