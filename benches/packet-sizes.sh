#!/usr/bin/env bash
# Packet size at the host-side device of each lab platform for 64 B and 16 KB
# redis values (the study's Table 2): server->client packets as the host
# receives them, client->server as the device transmits them.
# Usage: sudo benches/packet-sizes.sh [platforms...]   (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
vt=target/release/vtrace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A dev=([host]=vtl-host0 [runc]=vtl-runc0 [crun]=vtl-crun0 [lxc]=vtl-lxc0 [docker]=vtl-docker0 [gvisor]=vtl-gvisor0 [linuxvm]=vtl-vm0 [lwip]=vtl-lwip0)
printf "%-9s %-12s %6s | %-34s | %-34s\n" platform device value "server->client (receive): mean / p50 / max bucket" "client->server (xmit): mean / max"
for p in ${*:-host runc crun lxc docker gvisor linuxvm lwip}; do
  addr=$($vt lab up "$p" | sed -n 's/.*redis \([0-9.]*\):6379.*/\1/p' | head -1)
  for size in 64 16384; do
    n=400; [ "$p" = linuxvm ] && n=200
    $vt record -o "$tmp/r.vtrace" -- redis-benchmark -h "$addr" -t set,get -d "$size" -n "$n" -c 5 -q >/dev/null 2>&1 || true
    $vt report --format json "$tmp/r.vtrace" | python3 -c '
import json, sys
r = json.load(sys.stdin); dev = sys.argv[1]
def summary(hop):
    h = next((d for d in r["devices"] if d["name"] == dev and d["hop"] == hop), None)
    if not h or not h["packets"]: return "-"
    hist = [(b["le"], b["count"]) for b in h["size_hist"]]
    seen, p50 = 0, 0
    for le, c in hist:
        seen += c
        if seen * 2 >= h["packets"]: p50 = le; break
    top = max(le for le, c in hist if c)
    top = ">65536" if top > 65536 else top
    return "%6d B / <=%-5s / <=%s  (%d pkts)" % (h["bytes"] // h["packets"], p50, top, h["packets"])
print("%-9s %-12s %6s | %-34s | %s" % (sys.argv[2], dev, sys.argv[3], summary("receive"), summary("xmit")))
' "${dev[$p]}" "$p" "$size"
  done
  $vt lab down "$p" >/dev/null
done
