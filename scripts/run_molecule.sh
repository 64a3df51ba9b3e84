#!/usr/bin/env bash
# Run `molecule test` for each scenario given; keep going after a failure so a
# run reports every broken scenario, then print one summary line and fail if any failed.
# An item `make:<target>` runs `$MAKE <target>` in a stream instead: `make test`
# (scripts/run_tests.sh) deals its checks (make:wheel, make:lint, make:sanity,
# make:unit, make:badinput) out with the scenarios, so that they run beside a scenario
# instead of before all of them.
#
# MOLECULE_STREAMS (default 2) items run at once: a scenario waits on containers part of
# the time (module round trips, jobs that sleep), though on 2 cores two streams keep the
# CPU about 90 % busy in a full run: more at once would not finish sooner. The items
# wait in one queue, make:wheel first, then the longest first (weights below: seconds
# of a run on the 2-core test host beside another stream); a free stream takes the
# first item that can start (below). The scenarios that distribute the host's wheel
# (needs_wheel) wait until make:wheel has ended when it is one of the items. The launch
# cluster's steps are two scenarios (default, launch_diagnosis) so that neither stream
# carries all of it. Every item logs to its own
# file, printed whole when it ends, so the output of two items never interleaves.
# Container names are per scenario (molecule.yml), so scenarios never share a container.
# MOLECULE_AFTER (scripts/run_tests.sh): a file that another step (make images) writes its
# exit status to when it ends; every scenario waits for it, and fails at once when it is
# not 0 (the make targets do not wait).
set -uo pipefail
cd "$(dirname "$0")/.."
# The scenarios stay in molecule/ (not molecule 26's extensions/molecule for
# collections): naming the glob explicitly tells molecule where they are, which
# is what its "should migrate to 'extensions/molecule'" warning asks for.
export MOLECULE_GLOB="${MOLECULE_GLOB:-molecule/*/molecule.yml}"
# community.docker waits 60 s for an answer from the engine by default; removing a
# converged node (a venv with torch in its layer) while the other stream runs jobs
# took longer than that in a CI run ("Error removing container: Read timed out").
export DOCKER_TIMEOUT="${DOCKER_TIMEOUT:-600}"
streams=${MOLECULE_STREAMS:-2}
[[ $streams =~ ^[1-9][0-9]*$ ]] || { echo "MOLECULE_STREAMS=$streams: not a positive integer; valid: 1, 2, ..." >&2; exit 2; }
logs=$(mktemp -d /tmp/molecule-logs.XXXXXX)
trap 'rm -rf "$logs"' EXIT

weight() {
  case $1 in
    default) echo 1900 ;; launch_diagnosis) echo 1800 ;; launch_slurm) echo 800 ;;
    deepspeed_build) echo 400 ;; wheel_distribute) echo 250 ;; toolchain) echo 165 ;;
    nccl_tuning) echo 210 ;; installed) echo 500 ;; make:wheel) echo 770 ;; make:lint) echo 120 ;; make:sanity) echo 200 ;;
    make:unit) echo 130 ;; make:badinput) echo 200 ;; *) echo 300 ;;
  esac
}
needs_wheel() {  # scenarios whose prepare snapshots dist/'s wheel (molecule/default/prepare.yml)
  case $1 in default | launch_diagnosis | launch_slurm | wheel_distribute | installed) return 0 ;; esac
  return 1
}
wheel_item=no
for s in "$@"; do [ "$s" = make:wheel ] && wheel_item=yes; done

# One queue: make:wheel first (it starts a stream at once: four scenarios wait for its
# wheel), then every other item longest first. While make:wheel runs, a stream that is
# free takes the queue's first item that can start now: a make target always; a
# scenario that does not distribute the wheel once the images are made (MOLECULE_AFTER).
# After it, the queue's first item, which waits for the images if they are not made
# yet (run_one). So on a fresh machine the checks (make:lint, make:sanity, make:unit,
# make:badinput: they need neither) run while the wheel and the images are made, and
# the launch scenarios start as soon as the wheel is there rather than after all the
# checks; on a warm one (a wheel in seconds) the checks fill the streams' ends.
declare -a load plan
for ((i = 0; i < streams; i++)); do load[i]=0 plan[i]=""; done
{ for s in "$@"; do [ "$s" = make:wheel ] && echo "$s"; done
  for s in "$@"; do [ "$s" = make:wheel ] || echo "$(weight "$s") $s"; done | sort -k1,1rn -k2 | awk '{print $2}'
} >"$logs/.queue"
# The plan printed at the start: the same order dealt by weight (nothing waiting).
while read -r s; do
  best=0
  for ((i = 1; i < streams; i++)); do ((load[i] < load[best])) && best=$i; done
  load[best]=$((load[best] + $(weight "$s")))
  plan[best]+="$s "
done <"$logs/.queue"

wheel_pending() { [ "$wheel_item" = yes ] && ! grep -q '^make:wheel ' "$logs/.results" 2>/dev/null; }
images_pending() { [ -n "${MOLECULE_AFTER:-}" ] && [ ! -s "$MOLECULE_AFTER" ]; }
startable() {  # the queue's items that can start now, one per line
  local s images
  images_pending && images=no || images=yes
  while read -r s; do
    if [[ $s == make:* ]]; then echo "$s"; continue; fi
    [ "$images" = yes ] || continue
    needs_wheel "$s" || echo "$s"
  done <"$logs/.queue"
}
next_item() {  # pops the next item (empty when none is left): while make:wheel runs, the
  # first that can start now; after it, the first in the queue (it may wait for the images)
  (
    flock 9
    pick=""
    if wheel_pending; then pick=$(startable | head -n 1); fi
    [ -n "$pick" ] || pick=$(head -n 1 "$logs/.queue")
    [ -n "$pick" ] || exit 0
    echo "$pick"
    grep -vxF -- "$pick" "$logs/.queue" >"$logs/.queue.new" || true
    mv "$logs/.queue.new" "$logs/.queue"
  ) 9>>"$logs/.queue.lock"
}

run_one() {  # item -> its log file, then its result line; returns molecule's (make's) status
  local s=$1 start rc
  if [ "$wheel_item" = yes ] && needs_wheel "$s"; then
    while ! grep -q '^make:wheel ' "$logs/.results" 2>/dev/null; do sleep 5; done
  fi
  if [[ $s != make:* ]] && [ -n "${MOLECULE_AFTER:-}" ]; then
    while [ ! -s "$MOLECULE_AFTER" ]; do sleep 5; done
    if [ "$(cat "$MOLECULE_AFTER")" != 0 ]; then
      echo "=== $s: FAILED: not started, the images it needs were not made (make images failed)"
      echo "$s 1" >>"$logs/.results"
      return 1
    fi
  fi
  start=$(date +%s)
  echo "=== $s: started (log printed when it ends)"
  if [[ $s == make:* ]]; then
    ${MAKE:-make} --no-print-directory -k "${s#make:}" >"$logs/$s.log" 2>&1
  else
    molecule test -s "$s" >"$logs/$s.log" 2>&1
  fi
  rc=$?
  {
    echo "=== $( [[ $s == make:* ]] && echo "make ${s#make:}" || echo "molecule scenario: $s")"
    cat "$logs/$s.log"
    if [ "$rc" -eq 0 ]; then echo "=== $s: passed in $(($(date +%s) - start)) s"
    else echo "=== $s: FAILED after $(($(date +%s) - start)) s"; fi
  } | flock "$logs/.print" cat
  echo "$s $rc" >>"$logs/.results"
  return "$rc"
}

pids=()
for ((i = 0; i < streams; i++)); do
  [ -n "${plan[i]}" ] || continue
  echo "=== molecule stream $((i + 1)) (about ${load[i]} s, if the weights hold): ${plan[i]}"
  (while s=$(next_item) && [ -n "$s" ]; do run_one "$s"; done; exit 0) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

passed=0 failed=0 failed_names=()
touch "$logs/.results"
for s in "$@"; do
  rc=$(awk -v s="$s" '$1 == s {print $2}' "$logs/.results")
  if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names+=("$s"); fi
done
# A CI page may show only the last lines: for each failed scenario, the task that
# failed comes last: its TASK line, the last `fatal:` / `failed:` line of the log and
# the 12 lines after it, then the last 30 lines of that result (a failed loop item
# that ran a play ends with that play's own failure and recap, far below its start),
# then once more the task and the first line of its assertion or message;
# for a failed make target, its failing tests and last lines.
why() {  # scenario log -> its failing task and message, colours stripped, at most 47 lines
  sed 's/\x1b\[[0-9;]*m//g; s/^ *│ //' "$1" | awk '
    function flush() { if (n >= 0) { last = head; from = (n > 42) ? n - 29 : 13
        if (n > 42) last = last "   ... (" n - 42 " lines left out)\n"
        for (i = from; i <= n; i++) last = last body[i] "\n"
        last = last "failed task: " task (said == "" ? "" : " |" said) "\n" }
      n = -1 }
    BEGIN { n = -1 }
    /^(TASK \[|PLAY RECAP|PLAY \[|RUNNING HANDLER)/ { flush(); task = $0; next }
    /└─ Return code/ { flush(); next }
    /^(fatal|failed): \[/ { flush(); head = task "\n" $0 "\n"; n = 0; said = ""; next }
    n >= 0 { body[++n] = $0; if (n <= 12) head = head $0 "\n"
      if (said == "" && $0 ~ /^ +(assertion|msg):/) { said = $0; gsub(/ +/, " ", said) } }
    END { flush(); printf "%s", last }'
}
for s in "${failed_names[@]}"; do
  [ -f "$logs/$s.log" ] || continue
  if [[ $s == make:* ]]; then  # a check: its failing tests, then its last lines
    echo "=== $s failed; its last lines:"
    grep -E '^(FAILED|ERROR) |^E  ' "$logs/$s.log" | tail -n 40 || true
    tail -n 25 "$logs/$s.log"
  else
    echo "=== $s: the task that failed"
    why "$logs/$s.log"
  fi
done
[ ${#failed_names[@]} -eq 0 ] || echo "failed: ${failed_names[*]}"
echo "molecule: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
