#!/usr/bin/env bash
# The test command: set-up (idempotent), the gates, release build, then every
# test, each integration test file timed (the times are printed at the end):
# the stock-kernel guest's files, with the rest of the build, clippy and the
# host tests beside them, then the few host tests that need the machine to
# themselves.
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

# Host tests that need the machine to themselves, as FILE:TEST: in the
# whole suite they run after the guest files, not beside them. A
# differential flamegraph is of the whole machine's samples (the guest's
# QEMU draws changes of its own); the uprobe catalog's test needs a machine
# where no process runs QEMU.
ALONE_TESTS="exports:differential_flamegraph_marks_what_b_adds \
  network:the_host_recording_attaches_the_catalogs_uprobes_only_where_their_binary_runs"

# Each stock-kernel guest's wall time, boots and steps (tests/src/lib.rs
# run_guest), printed at the end.
export VTRACE_GUEST_RUNS=$(mktemp)
# Every test command's output (one log per lane: two lanes run at once in
# the whole suite), time and failure.
log=$(mktemp)
beside_log=$(mktemp)
times=$(mktemp)
failed=$(mktemp)
trap 'rm -f "$log" "$beside_log" "$times" "$failed" "$VTRACE_GUEST_RUNS"' EXIT
lane_log=$log
# timed NAME COMMAND...: one test command, timed, its output kept in the
# lane's log (and shown, in the foreground lane).
timed() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  if [ "$lane_log" = "$log" ]; then
    "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
  else
    "$@" >> "$lane_log" 2>&1
    rc=$?
  fi
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
# in --quick, the long ones left out; in the whole suite, the tests that
# run alone left out too).
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
    else
      for t in $ALONE_TESTS; do [ "${t%%:*}" = "$name" ] && skip+=(--skip "${t#*:}"); done
    fi
    run "$name" --test "$name" -- --test-threads=1 "${skip[@]}"
  done
}

lints_rc=0
if [ $QUICK = 0 ]; then
  # The stock-kernel guest's files first: QEMU's TCG runs the guest on one
  # core. Beside them, on the other, one lane: the rest of the build (one
  # job), clippy (its own target directory), then the host tests. The
  # build holds cargo's lock on target/, so the guest files' test binaries
  # are run as cargo test would, from their package's directory.
  exes=()
  for name in $GUEST_FILES; do
    exe=$(cargo test --release --no-run --test "$name" 2>&1 | sed -n 's/^ *Executable .*(\(.*\))$/\1/p')
    exes+=("${exe:+$PWD/$exe}")
  done
  beside_steps=$(mktemp)
  start=$(date +%s)
  # Each line of beside_steps: a step of the lane, its exit status (the
  # host tests: how many files failed), when it ended.
  ( lane_log=$beside_log
    cargo build --release --all-targets -j 1 >> "$beside_log" 2>&1
    rc=$?
    echo "build $rc $(( $(date +%s) - start ))" >> "$beside_steps"
    cargo clippy --release --all-targets -j 1 --target-dir target/clippy -- -D warnings >> "$beside_log" 2>&1
    echo "clippy $? $(( $(date +%s) - start ))" >> "$beside_steps"
    if [ $rc = 0 ]; then
      failed_before=$(wc -l < "$failed")
      host_tests
      echo "host-tests $(( $(wc -l < "$failed") - failed_before )) $(( $(date +%s) - start ))" >> "$beside_steps"
    else
      echo "the build of the host tests failed: they did not run" >> "$beside_log"
      echo "build" >> "$failed"
    fi ) &
  beside=$!
  i=0
  for name in $GUEST_FILES; do
    timed "$name" test_binary "${exes[$i]}"
    i=$((i + 1))
  done
  guests_end=$(( $(date +%s) - start ))
  wait $beside
  lints_rc=$(awk '$1 == "clippy" {print $2}' "$beside_steps")
  echo
  echo "beside the guest files (all in $guests_end s), on the other core:"
  cat "$beside_log"
  echo "beside the guest files: $(awk '{printf "%s exit %s at %s s; ", $1, $2, $3}' "$beside_steps")"
  rm -f "$beside_steps"
  # Then the host tests that need the machine to themselves.
  for t in $ALONE_TESTS; do
    run "${t#*:} (alone)" --test "${t%%:*}" -- --exact "${t#*:}" --test-threads=1
  done
else
  host_tests
fi

echo
echo "the stock-kernel guests:"
cat "$VTRACE_GUEST_RUNS"
echo "time per test file:"
cat "$times"
read -r passed failures < <(cat "$log" "$beside_log" \
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
