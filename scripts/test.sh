#!/usr/bin/env bash
# The test command: set-up (idempotent), the gates, release build, then every
# test, each integration test file timed (the times are printed at the end):
# the stock-kernel guest's files first, with clippy beside them, then the rest.
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
# Everything the tests run, built once, test files included: each file
# below is run from the workspace (no `-p`), so its dependencies' features
# are this build's and no file's time is a compile.
cargo build --release --all-targets
set +e

# Test files that boot the stock-kernel guest (minutes each), and tests
# that boot the lab's TCG VM: left out of --quick.
GUEST_FILES="stock_kernel vm_platforms kata sriov"
GUEST_TESTS="qemu_guest_traffic_is_seen_at_the_vmm_and_the_tap linuxvm_lab_instance \
  a_vm_up_killed_while_qemu_starts_is_undone"
# Files left out of --quick that run without a guest: accuracy's long
# runs against ground truth, benches over many rounds, serve's end-to-end
# runs with Prometheus and DuckDB, the fuzzing of hostile input, and the
# lab's platforms brought up and down one by one.
LONG_FILES="accuracy bench serve hostile_input lab"

log=$(mktemp)
# Each stock-kernel guest's wall time, boots and steps (tests/src/lib.rs
# run_guest), printed at the end.
export VTRACE_GUEST_RUNS=$(mktemp)
trap 'rm -f "$log" "$VTRACE_GUEST_RUNS"' EXIT
times=()
failed=()
# run NAME CARGO-TEST-ARGS...: one cargo test, timed, its output kept.
run() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  cargo test --release "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  times+=("$(printf '%6d s  %s' $(( $(date +%s) - start )) "$name")")
  [ "$rc" = 0 ] || failed+=("$name")
}

lints_rc=0
if [ $QUICK = 0 ]; then
  # The stock-kernel guest's files first: QEMU's TCG runs the guest on one
  # core, and clippy takes the other (one job, its own target directory, so
  # no cargo lock is shared): the lints cost no time of their own. No host
  # test runs beside a guest (host tests measure the whole machine).
  lints_log=$(mktemp)
  lints_end=$(mktemp)
  start=$(date +%s)
  { cargo clippy --release --all-targets -j 1 --target-dir target/clippy -- -D warnings > "$lints_log" 2>&1
    rc=$?; date +%s > "$lints_end"; exit $rc; } &
  lints=$!
  for name in $GUEST_FILES; do
    run "$name" --test "$name" -- --test-threads=1
  done
  wait $lints
  lints_rc=$?
  echo "clippy beside the guest files: exit $lints_rc after $(( $(cat "$lints_end") - start )) s; the guest files took $(( $(date +%s) - start )) s"
  rm -f "$lints_end"
  [ $lints_rc = 0 ] || cat "$lints_log"
  rm -f "$lints_log"
fi
run "unit tests" --lib --bins -- --test-threads=1
run "doc tests" --doc
skip=()
if [ $QUICK = 1 ]; then
  for t in $GUEST_TESTS; do skip+=(--skip "$t"); done
fi
for f in tests/tests/*.rs; do
  name=$(basename "$f" .rs)
  if [[ " $GUEST_FILES " == *" $name "* ]] || { [ $QUICK = 1 ] && [[ " $LONG_FILES " == *" $name "* ]]; }; then
    continue
  fi
  run "$name" --test "$name" -- --test-threads=1 "${skip[@]}"
done

echo
echo "the stock-kernel guests:"
cat "$VTRACE_GUEST_RUNS"
echo "time per test file:"
printf '%s\n' "${times[@]}"
read -r passed failures < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" \
  | awk '{p += $1; f += $2} END {print p + 0, f + 0}')
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  # A test binary that crashed or did not build counts no failed test itself.
  [ "$failures" -ge ${#failed[@]} ] || failures=${#failed[@]}
fi
echo "tests: $passed passed, $failures failed"
[ $lints_rc = 0 ] || echo "gates: cargo clippy failed (its output above)"
[ ${#failed[@]} = 0 ] && [ $lints_rc = 0 ]
