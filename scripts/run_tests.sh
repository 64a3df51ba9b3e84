#!/usr/bin/env bash
# `make test` after its setup (venv-test, harness): every test step, with the CUDA build
# beside the others. cuda-build spends a cold run mostly downloading the ~2.4 GB CUDA stack
# from PyPI (network, not CPU), so it runs in the background from the start while lint,
# sanity, unit, badinput, wheel and molecule run in the foreground; its log is printed
# whole when it ends. Fails if any step failed; every step runs even after a failure of
# another (the CUDA build is not stopped by a failing lint, and the reverse). A failed
# step's last lines are printed again at the very end, so that the tail of the log (all a
# CI page may show) names the failing test, not just the step.
#   bash scripts/run_tests.sh        # what `make test` runs
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
log=$(mktemp /tmp/cuda-build.XXXXXX.log)
steps=$(mktemp -d /tmp/test-steps.XXXXXX)
trap 'rm -rf "$log" "$steps"' EXIT
start=$(date +%s)
$MAKE --no-print-directory cuda-build >"$log" 2>&1 &
cuda=$!
echo "=== cuda-build: started in the background (log printed when it ends)"
failed=()
for step in lint sanity unit badinput gpu-bundle wheel molecule; do
  echo "=== make $step"
  $MAKE --no-print-directory "$step" 2>&1 | tee "$steps/$step.log" || failed+=("$step")
done
wait "$cuda"
rc=$?
echo "=== cuda-build (background, $(($(date +%s) - start)) s since the start):"
cat "$log"
[ "$rc" -eq 0 ] || failed+=(cuda-build)
if [ ${#failed[@]} -gt 0 ]; then
  for step in "${failed[@]}"; do
    [ -f "$steps/$step.log" ] || continue
    echo "=== $step failed; its last lines again:"
    if grep -q '^=== .*: the task that failed$' "$steps/$step.log"; then
      # molecule: each failed scenario's failing task and its message (run_molecule.sh)
      sed -n '/^=== .*: the task that failed$/,$p' "$steps/$step.log"
    else
      grep -E '^(FAILED|ERROR) |^E  ' "$steps/$step.log" | tail -n 40 || true
      tail -n 25 "$steps/$step.log"
    fi
  done
  echo "make test: FAILED: ${failed[*]}"
  exit 1
fi
echo "make test: every step passed in $(($(date +%s) - start)) s"
