#!/usr/bin/env bash
# Cold build overhead and no-change re-run, for this tree and optionally a baseline revision:
#   benchmarks/build_phases.sh [--baseline REV] [--warm-only]
# For each tree (baseline first, then this one), same conditions:
#   cold: build_deepspeed.yml with an empty work folder (venv, torch, sdist, compile, manifest, fetch),
#         ops [cpu_adam], no wheelhouse; the profile_tasks callback times every task and
#         benchmarks/profile_phases.py splits the run into compile, downloads and the rest (the target:
#         the time outside the compile step and the downloads);
#   warm: the same command again (nothing to do): wall time and tasks per host from the recap
#         (ok = tasks run, skipped = tasks skipped; both listed).
# --warm-only skips the cold runs and times the default command (the embedded default, dist/ of this
# clone) twice per tree instead, after one settling run. Prints figures; asserts nothing about time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
baseline="" warm_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) baseline=$2; shift 2 ;;
    --warm-only) warm_only=1; shift ;;
    *) echo "usage: $0 [--baseline REV] [--warm-only]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /var/tmp/bench-build-phases.XXXXXX)
cleanup() { [ -n "$baseline" ] && git -C "$root" worktree remove --force "$work/baseline" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
trees=()
if [ -n "$baseline" ]; then git worktree add --detach -f "$work/baseline" "$baseline" >/dev/null 2>&1; trees+=("$work/baseline"); fi
trees+=("$root")
export PATH=$root/.venv/bin:$PATH ANSIBLE_NOCOLOR=1
now() { python3 -c 'import time; print(time.time())'; }
recap() { grep -E '^(localhost|[^ ]+) +: ok=' "$1" | tail -1 | tr -s ' ' | cut -d' ' -f3-7; }

play() {  # tree, log, extra args...
  local tree=$1 log=$2; shift 2
  (cd "$tree" && ANSIBLE_CONFIG=$tree/ansible.cfg ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks \
    PROFILE_TASKS_TASK_OUTPUT_LIMIT=all ansible-playbook build_deepspeed.yml "$@" >"$log" 2>&1) \
    || { tail -40 "$log"; exit 1; }
}

for tree in "${trees[@]}"; do
  label=$([ "$tree" = "$root" ] && echo "this tree" || echo "baseline $baseline")
  if [ $warm_only = 1 ]; then
    play "$tree" "$work/settle.log"
    for run in 1 2; do
      start=$(now); play "$tree" "$work/warm$run.log"; end=$(now)
      printf '%-20s warm re-run %d: %6.1f s   %s\n' "$label" "$run" "$(python3 -c "print($end - $start)")" "$(recap "$work/warm$run.log")"
    done
    continue
  fi
  args=(-e "_deepspeed_build_workdir=$work/ansible-$(basename "$tree")" -e "_deepspeed_build_dist_dir=$work/dist-$(basename "$tree")"
        -e '{"deepspeed_build_ops": ["cpu_adam"], "deepspeed_build_wheelhouse": false}')
  start=$(now); play "$tree" "$work/cold.log" "${args[@]}"; end=$(now)
  printf '== %s: cold %.1f s wall, %s\n' "$label" "$(python3 -c "print($end - $start)")" "$(recap "$work/cold.log")"
  python3 benchmarks/profile_phases.py "$work/cold.log" | sed 's/^/   /'
  start=$(now); play "$tree" "$work/warm.log" "${args[@]}"; end=$(now)
  printf '== %s: warm re-run %.1f s wall, %s\n' "$label" "$(python3 -c "print($end - $start)")" "$(recap "$work/warm.log")"
  cp "$work/cold.log" "/tmp/build_phases-cold-$(basename "$tree").log" 2>/dev/null || true
  rm -rf "$work/ansible-$(basename "$tree")"
done
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
