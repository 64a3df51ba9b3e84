#!/usr/bin/env bash
# Run `molecule test` for each scenario given; keep going after a failure so a
# run reports every broken scenario, then print one summary line and fail if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# The scenarios stay in molecule/ (not molecule 26's extensions/molecule for
# collections): naming the glob explicitly tells molecule where they are, which
# is what its "should migrate to 'extensions/molecule'" warning asks for.
export MOLECULE_GLOB="${MOLECULE_GLOB:-molecule/*/molecule.yml}"
passed=0 failed=0 failed_names=()
for s in "$@"; do
  echo "=== molecule scenario: $s"
  start=$(date +%s)
  if molecule test -s "$s"; then
    passed=$((passed + 1)); echo "=== $s: passed in $(( $(date +%s) - start )) s"
  else
    failed=$((failed + 1)); failed_names+=("$s"); echo "=== $s: FAILED after $(( $(date +%s) - start )) s"
  fi
done
[ ${#failed_names[@]} -eq 0 ] || echo "failed scenarios: ${failed_names[*]}"
echo "molecule: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
