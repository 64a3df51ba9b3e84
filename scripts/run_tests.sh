#!/usr/bin/env bash
# `make test` after its setup (venv-test, host-packages): every test step. The checks (make
# lint, sanity, unit, badinput: `make checks`, one item each; make wheel: the real build
# whose wheel the launch scenarios distribute) are dealt into scripts/run_molecule.sh's two
# streams with the molecule scenarios, so that they run beside a scenario rather than
# before all of them (a scenario that distributes the wheel waits for make wheel; a free
# stream runs a check while nothing else can start). `make images` (the
# molecule base images, the Slurm image, the wheelhouse: debootstrap and downloads, several
# minutes on a fresh machine) runs beside the first checks from the start, and every
# scenario waits for it (MOLECULE_AFTER): the checks need no image. The CUDA build and the
# GPU check's CPU part run in the background from the start: cuda-build spends a cold run
# mostly downloading the CUDA 13 and CUDA 12 stacks (~6.3 GB, network, not CPU), then gpu-check
# (the GPU bundle and a DeepSpeed build against a preinstalled torch). Every step runs
# even after a failure of another; logs are printed whole when a step ends. A failed
# step's last lines are printed again at the very end, so that the tail of the log (all a
# CI page may show) names the failing test, not just the step.
#   bash scripts/run_tests.sh        # what `make test` runs (SCENARIOS: the scenarios)
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
steps=$(mktemp -d /tmp/test-steps.XXXXXX)
trap 'rm -rf "$steps"' EXIT
start=$(date +%s)
(
  $MAKE --no-print-directory images >"$steps/images.log" 2>&1
  echo $? >"$steps/.images.rc"
  echo "$(($(date +%s) - start))" >"$steps/.images.ended"
) &
images=$!
echo "=== images: started in the background, the scenarios wait for it (log printed when the scenarios end)"
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
# shellcheck disable=SC2086 # SCENARIOS is a list of names
MAKE="$MAKE" MOLECULE_AFTER="$steps/.images.rc" bash scripts/run_molecule.sh make:wheel make:lint make:sanity make:unit make:badinput ${SCENARIOS:?} 2>&1 | tee "$steps/molecule.log" ||
  failed+=(molecule)
wait "$images"
echo "=== images (background, ended $(cat "$steps/.images.ended") s after the start):"
cat "$steps/images.log"
[ "$(cat "$steps/.images.rc")" = 0 ] || failed+=(images)
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
    if grep -qE '^=== .*(: the task that failed| failed; its last lines:)$' "$steps/$step.log"; then
      # each failed scenario's failing task, each failed check's tests (run_molecule.sh)
      sed -nE '/^=== .*(: the task that failed| failed; its last lines:)$/,$p' "$steps/$step.log"
    else
      grep -E '^(FAILED|ERROR) |^E  ' "$steps/$step.log" | tail -n 40 || true
      tail -n 25 "$steps/$step.log"
    fi
  done
  echo "make test: FAILED: ${failed[*]}"
  exit 1
fi
echo "make test: every step passed in $(($(date +%s) - start)) s"
