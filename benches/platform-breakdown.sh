#!/usr/bin/env bash
# One CPU breakdown per lab platform under the same redis-benchmark load
# (GET/SET, 64 B values, 20 clients, N requests each): lab up, record with
# --platform, print the role table, lab down.
# Usage: sudo benches/platform-breakdown.sh [requests] [platforms...]  (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
shift || true
platforms=${*:-host runc crun lxc docker gvisor linuxvm lwip}
vt=target/release/vtrace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in $platforms; do
  addr=$($vt lab up "$p" | sed -n 's/.*redis \([0-9.]*\):6379.*/\1/p' | head -1)
  if [ "$p" = host ]; then
    sel=(--pid "$(python3 -c 'import json;print([r["pid"] for r in json.load(open("/run/vtrace-lab/host.json"))["resources"] if r.get("comm")=="redis-server"][0])')")
  else
    sel=(--platform "$p")
  fi
  $vt record "${sel[@]}" -o "$tmp/$p.vtrace" -- redis-benchmark -h "$addr" -t get,set -d 64 -n "$n" -c 20 -q > "$tmp/$p.bench" 2>/dev/null || true
  rps=$(tr '\r' '\n' < "$tmp/$p.bench" | grep -E "^(SET|GET): [0-9]" | awk '{printf "%s %s  ", $1, $2}')
  echo "== $p: $rps"
  $vt report --format json "$tmp/$p.vtrace" | python3 -c '
import json, sys
r = json.load(sys.stdin); cap = r["wall_ns"] * r["cpus"]
print("   wall %.2f s; role: total CPU-s (%% of capacity)  user/system/softirq/hardirq" % (r["wall_ns"] / 1e9))
for g in r["roles"]:
    if g["total_ns"] * 200 < cap: continue
    print("   %-8s %-10s %6.3f s (%5.1f%%)  %5.3f/%5.3f/%5.3f/%5.3f" % (g["platform"], g["role"], g["total_ns"] / 1e9, 100 * g["total_ns"] / cap,
          g["user_ns"] / 1e9, g["system_ns"] / 1e9, g["softirq_ns"] / 1e9, g["hardirq_ns"] / 1e9))
'
  $vt lab down "$p" > /dev/null
done
