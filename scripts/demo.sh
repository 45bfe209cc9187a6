#!/usr/bin/env bash
# The main job on its embedded default: set-up, build, then `vtrace demo`
# (redis-server in a netns behind a veth pair, redis-benchmark GET/SET 64 B,
# recorded and reported). Extra arguments go to `vtrace demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: vtrace loads eBPF programs" >&2; exit 1; }
bash scripts/setup.sh demo
cargo build --release -p vtrace
exec target/release/vtrace demo "$@"
