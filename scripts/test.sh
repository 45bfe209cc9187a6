#!/usr/bin/env bash
# The test command: set-up (idempotent), the gates, release build, then every
# test, each integration test file timed (the times are printed at the end):
# the stock-kernel guest's files in two lanes side by side, the rest of the
# build and clippy first in one of them, then the host test files.
# Kernel-touching tests run one at a time (--test-threads=1) as root.
#   test.sh           the whole suite (what CI's .ci/run calls)
#   test.sh --quick   host only, for the loop while developing (under 5
#                     minutes once built): no guest boots (the stock-kernel
#                     guest, the lab's TCG VM), no benches, no serve end-to-end,
#                     no fuzzing, no lab bring-ups, no gates
set -uo pipefail
cd "$(dirname "$0")/.."
QUICK=0
case "${1:-}" in
  --quick) QUICK=1 ;;
  "") ;;
  *) echo "test.sh: unknown option '$1' (--quick, or nothing for the whole suite)" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "run as root: the tests load eBPF programs and build network namespaces" >&2; exit 1; }
set -e
bash scripts/setup.sh
if [ $QUICK = 0 ]; then
  # Habits as gates: formatting and the module layering (scripts/check-layering.py);
  # the lints run beside the guest files below.
  cargo fmt --all -- --check
  python3 scripts/check-layering.py
fi
# Test files that boot the stock-kernel guest (minutes each), and tests
# that boot the lab's TCG VM: left out of --quick.
GUEST_FILES="stock_kernel vm_platforms kata sriov"
# The two lanes the guest files run in, one per core (see below), about
# equally long: SR-IOV's, the stock kernel's and Kata's files (about 240,
# 75 and 610 s here, side by side with the other lane) in one; the rest of
# the build, clippy and the VM platforms' file (about 250, 160 and 580 s)
# in the other. SR-IOV's file runs beside the build and clippy, not beside
# the VM platforms' file: two nested-KVM guests side by side starve each
# other's device emulation (a fresh clone had the VF guest's receive
# softirq 212 ms after its interrupt on average, against 1 ms alone, and a
# bench's vhost-net transmits untimed).
LANE_A_GUESTS="sriov stock_kernel kata"
LANE_B_GUESTS="vm_platforms"
# Everything the tests run is built once, test files included: each file
# below is run from the workspace (no `-p`), so its dependencies' features
# are this build's and no file's time is a compile. The whole suite builds
# first what the guest files run (the binaries and their four test files);
# the rest (the unit tests' build of the library, the other test files)
# is built on the spare core beside them, then run there (see below).
if [ $QUICK = 0 ]; then
  guest_tests=()
  for name in $GUEST_FILES; do guest_tests+=(--test "$name"); done
  cargo build --release --bins "${guest_tests[@]}"
else
  cargo build --release --all-targets
fi
set +e
GUEST_TESTS="qemu_guest_traffic_is_seen_at_the_vmm_and_the_tap linuxvm_lab_instance \
  a_vm_up_killed_while_qemu_starts_is_undone"
# Files left out of --quick that run without a guest: accuracy's long
# runs against ground truth, benches over many rounds, serve's end-to-end
# runs with Prometheus and DuckDB, the fuzzing of hostile input, and the
# lab's platforms brought up and down one by one.
LONG_FILES="accuracy bench serve hostile_input lab"

# Each stock-kernel guest's wall time, boots and steps (tests/src/lib.rs
# run_guest), printed at the end.
export VTRACE_GUEST_RUNS=$(mktemp)
# Every test command's output (the build and clippy beside the guest files
# keep a log of their own), time and failure.
log=$(mktemp)
beside_log=$(mktemp)
times=$(mktemp)
failed=$(mktemp)
trap 'rm -f "$log" "$beside_log" "$times" "$failed" "$VTRACE_GUEST_RUNS"' EXIT
# timed NAME COMMAND...: one test command, timed, its output shown and kept.
# Its output goes to $log (a lane beside gives its own).
timed() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  printf '%6d s  %s\n' $(( $(date +%s) - start )) "$name" >> "$times"
  [ "$rc" = 0 ] || echo "$name" >> "$failed"
}
# run NAME CARGO-TEST-ARGS...: one cargo test, timed.
run() { local name=$1; shift; timed "$name" cargo test --release "$@"; }
# test_binary EXE: a test binary run as cargo test runs it, from its
# package's directory (EXE empty: it was not built).
test_binary() {
  [ -n "$1" ] || { echo "test.sh: no test binary"; return 1; }
  (cd tests && "$1" --test-threads=1)
}
# The unit and doc tests, then every host test file (the guest files and,
# in --quick, the long ones left out).
host_tests() {
  run "unit tests" --lib --bins -- --test-threads=1
  run "doc tests" --doc
  local f name skip t
  for f in tests/tests/*.rs; do
    name=$(basename "$f" .rs)
    if [[ " $GUEST_FILES " == *" $name "* ]] || { [ $QUICK = 1 ] && [[ " $LONG_FILES " == *" $name "* ]]; }; then
      continue
    fi
    skip=()
    if [ $QUICK = 1 ]; then
      for t in $GUEST_TESTS; do skip+=(--skip "$t"); done
    fi
    run "$name" --test "$name" -- --test-threads=1 "${skip[@]}"
  done
}

lints_rc=0
if [ $QUICK = 0 ]; then
  # The stock-kernel guest's files first, in two lanes, one per core: a
  # guest under QEMU's TCG is one busy thread. Lane A runs SR-IOV's and the
  # stock kernel's files, then Kata's (the longest); lane B the rest of the build (one job),
  # clippy (one job, on the build's own dependencies and proc macros;
  # vtrace's build script runs apart under clippy, and AYA_BUILD_SKIP
  # keeps it from building the eBPF object again, which clippy does not
  # lint: about a minute of the lane), then the VM platforms' file. Side by side, each guest runs about a quarter slower than alone
  # here (Kata's file 615 s against 500 s), and the guest files end about
  # 150 s sooner than one after the other. Each guest is a machine of its
  # own: no guest file touches the host kernel, so two guests side by side
  # are not two kernel-touching tests at once. No host test runs beside a guest: on
  # CI's machine, host tests (several busy threads) beside them slowed the
  # guests by as much as they saved (the Kata file went from about 600 s
  # to past its 900 s). The build holds cargo's lock on target/, so the
  # guest files' test binaries are run as cargo test would, from their
  # package's directory.
  declare -A exes
  for name in $GUEST_FILES; do
    exe=$(cargo test --release --no-run --test "$name" 2>&1 | sed -n 's/^ *Executable .*(\(.*\))$/\1/p')
    exes[$name]=${exe:+$PWD/$exe}
  done
  beside_steps=$(mktemp)
  lane_b_log=$(mktemp)
  start=$(date +%s)
  # Each line of beside_steps: a step of lane B, its exit status, when it ended.
  ( cargo build --release --all-targets -j 1 >> "$beside_log" 2>&1
    echo "build $? $(( $(date +%s) - start ))" >> "$beside_steps"
    AYA_BUILD_SKIP=1 cargo clippy --release --all-targets -j 1 -- -D warnings >> "$beside_log" 2>&1
    echo "clippy $? $(( $(date +%s) - start ))" >> "$beside_steps"
    for name in $LANE_B_GUESTS; do
      log=$lane_b_log timed "$name" test_binary "${exes[$name]}" > /dev/null
    done ) &
  beside=$!
  for name in $LANE_A_GUESTS; do
    timed "$name" test_binary "${exes[$name]}"
  done
  lane_a_end=$(( $(date +%s) - start ))
  wait $beside
  guests_end=$(( $(date +%s) - start ))
  # Lane B's guest files, shown whole now (their output interleaved with lane A's would not read).
  cat "$lane_b_log"
  cat "$lane_b_log" >> "$log"
  rm -f "$lane_b_log"
  lints_rc=$(awk '$1 == "clippy" {print $2}' "$beside_steps")
  build_rc=$(awk '$1 == "build" {print $2}' "$beside_steps")
  # The build's and clippy's output only when they failed.
  [ "$build_rc" = 0 ] && [ "$lints_rc" = 0 ] || cat "$beside_log"
  echo "the guest files (all in $guests_end s; lane A's in $lane_a_end s): lane B's $(awk '{printf "%s exit %s at %s s; ", $1, $2, $3}' "$beside_steps")"
  rm -f "$beside_steps"
  if [ "$build_rc" = 0 ]; then
    host_tests
  else
    echo "the build of the host tests failed (its output above): they did not run"
    echo "build" >> "$failed"
  fi
else
  host_tests
fi

echo
echo "the stock-kernel guests:"
cat "$VTRACE_GUEST_RUNS"
echo "time per test file:"
cat "$times"
read -r passed failures < <(cat "$log" \
  | sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' \
  | awk '{p += $1; f += $2} END {print p + 0, f + 0}')
nfailed=$(wc -l < "$failed")
if [ "$nfailed" -gt 0 ]; then
  echo "failed: $(tr '\n' ' ' < "$failed")"
  # A test binary that crashed or did not build counts no failed test itself.
  [ "$failures" -ge "$nfailed" ] || failures=$nfailed
fi
echo "tests: $passed passed, $failures failed"
[ "$lints_rc" = 0 ] || echo "gates: cargo clippy failed (its output above)"
[ "$nfailed" = 0 ] && [ "$lints_rc" = 0 ]
