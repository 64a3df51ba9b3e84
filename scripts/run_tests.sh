#!/usr/bin/env bash
# `make test` after its setup (venv-test, harness): every test step, with the CUDA build
# and the GPU check's CPU part beside the others. cuda-build spends a cold run mostly
# downloading the ~2.4 GB CUDA stack from PyPI (network, not CPU), so it runs in the
# background from the start, then gpu-check (the GPU bundle and a DeepSpeed build against a
# preinstalled torch), while lint, sanity, unit, badinput, wheel and molecule run in the
# foreground; their logs are printed whole when they end. Fails if any step failed; every
# step runs even after a failure of another (the CUDA build is not stopped by a failing
# lint, and the reverse). A failed
# step's last lines are printed again at the very end, so that the tail of the log (all a
# CI page may show) names the failing test, not just the step.
#   bash scripts/run_tests.sh        # what `make test` runs
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
steps=$(mktemp -d /tmp/test-steps.XXXXXX)
trap 'rm -rf "$steps"' EXIT
start=$(date +%s)
background=(cuda-build gpu-check)
(
  for step in "${background[@]}"; do
    $MAKE --no-print-directory "$step" >"$steps/$step.log" 2>&1
    echo "$step $? $(($(date +%s) - start))" >>"$steps/.background"
  done
) &
bg=$!
echo "=== ${background[*]}: started in the background, one after the other (logs printed when they end)"
failed=()
for step in lint sanity unit badinput wheel molecule; do
  echo "=== make $step"
  $MAKE --no-print-directory "$step" 2>&1 | tee "$steps/$step.log" || failed+=("$step")
done
wait "$bg"
for step in "${background[@]}"; do
  read -r _ rc ended < <(grep "^$step " "$steps/.background" || echo "$step 1 ?")
  echo "=== $step (background, ended $ended s after the start):"
  cat "$steps/$step.log"
  [ "$rc" -eq 0 ] || failed+=("$step")
done
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
