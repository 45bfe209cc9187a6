#!/usr/bin/env bash
# The test command: set-up (idempotent), release build, then every test.
# Kernel-touching tests run one at a time (--test-threads=1) as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: the tests load eBPF programs and build network namespaces" >&2; exit 1; }
bash scripts/setup.sh
# Habits as gates: formatting, lints, and the module layering (scripts/check-layering.py).
cargo fmt --all -- --check
cargo clippy --release --all-targets -- -D warnings
python3 scripts/check-layering.py
cargo build --release
cargo test --release -- --test-threads=1
