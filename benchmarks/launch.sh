#!/usr/bin/env bash
# Launch overhead of `ansible-playbook train.yml` against torchrun started by hand.
#
# The same job (the bundled smoke job, $JOB_ARGS) is timed twice per run, side by side:
#   by hand   - torchrun typed on every node at once, as the seeds do it (address and port
#               typed in, one rendezvous id, is_host and --local_addr where containers need
#               them);
#   train.yml - ansible-playbook train.yml --skip-tags prepare,nccl (validate, facts,
#               security and preflight incl. the TCP reachability check, launch, wait,
#               stop-check, log collection, report).
# It prints the wall-clock seconds, the difference, and the median of each, and per mode and size the
# median CPU seconds of the controller side (ansible-playbook and its workers: ctl_cpu; with all the
# nodes on this machine, the rest of the machine's CPU went to the nodes), and the median seconds of
# train.yml outside the job's own run (around: its wall clock minus the span from the first node's
# start of torchrun to the last node's end, from the job records it brought home, job.json and
# result.json; the by-hand run's noise is not in it, the job's slowdown by what runs beside it is
# not either); it asserts nothing.
# KEEP=<dir> keeps the train.yml logs and the collected job directories.
#
# Modes (MODES, default "local docker ssh"):
#   local  - the embedded default: this machine, no inventory, train_nproc_per_node processes
#            (by hand: torchrun run here);
#   docker - N containers over the community.docker.docker connection (by hand: docker exec);
#   ssh    - N containers running sshd, reached over SSH the way users reach their nodes
#            (key login, ControlPersist and pipelining from ansible.cfg; by hand: ssh).
#
#   bash benchmarks/launch.sh                                # local, docker and ssh at 2 nodes
#   MODES=ssh NODES="2 8" REPEAT=3 bash benchmarks/launch.sh
#   PROJECTS="/tmp/before $PWD" REPEAT=3 bash benchmarks/launch.sh   # two checkouts, side by side
#       # (/tmp/before: `git worktree add /tmp/before <commit>`; it uses this checkout's .venv,
#       # .cache/wheelhouse and dist/)
#
# Needs: docker, the image multinode-training/debian:bookworm (scripts/base_images.sh),
# .cache/wheelhouse (scripts/wheelhouse.sh), dist/deepspeed-*.whl (build_deepspeed.yml); for
# local: the venv of `make demo` (/opt/multinode-training/venv); for ssh: the Debian archive
# once (openssh-server for the image).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# The checkouts whose train.yml is measured, each run right after the same by-hand run
# (before and after a change, side by side under the same load).
PROJECTS=${PROJECTS:-$ROOT}
MODES=${MODES:-"local docker ssh"}
NODES=${NODES:-2}
REPEAT=${REPEAT:-1}
NPROC=${NPROC:-1}
LOCAL_NPROC=${LOCAL_NPROC:-2}
PORT=${PORT:-29461}
# The job: the smoke job's all-reduce part (DeepSpeed init would only add the same
# seconds to both sides).
JOB_ARGS=${JOB_ARGS:---skip-deepspeed}
BASE_IMAGE=multinode-training/debian:bookworm
BENCH_IMAGE=multinode-training/bench-launch:venv
SSH_IMAGE=multinode-training/bench-launch:ssh
PREFIX=bench-launch
VENV=/opt/multinode-training/venv
CODE=/opt/multinode-training/code/smoke_train.py
export PATH=$ROOT/.venv/bin:$PATH
WORK=$(mktemp -d /tmp/bench-launch.XXXXXX)
MAX=0
for n in $NODES; do [ "$n" -gt "$MAX" ] && MAX=$n; done

cleanup() {
  # KEEP=<dir>: the train.yml logs and the collected job directories are copied there first.
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp -r "$WORK"/ansible-*.log "$WORK"/runs "$KEEP"/ 2>/dev/null || true; fi
  for i in $(seq 1 "$MAX"); do docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }

prepare_images() {
  local wheel
  if ! docker image inspect "$BENCH_IMAGE" >/dev/null 2>&1; then
    wheel=$(ls -t "$ROOT"/dist/deepspeed-*.whl | head -1)
    echo "preparing $BENCH_IMAGE (once): venv with torch and $(basename "$wheel")"
    docker rm -f "$PREFIX-prep" >/dev/null 2>&1 || true
    docker run -d --name "$PREFIX-prep" -v "$ROOT/.cache/wheelhouse:/wheelhouse:ro" -v "$ROOT/dist:/dist:ro" \
      "$BASE_IMAGE" sleep infinity >/dev/null
    docker exec "$PREFIX-prep" python3 -m venv "$VENV"
    docker exec "$PREFIX-prep" "$VENV/bin/pip" install -q --no-index --find-links /wheelhouse torch "/dist/$(basename "$wheel")"
    docker commit "$PREFIX-prep" "$BENCH_IMAGE" >/dev/null
    docker rm -f "$PREFIX-prep" >/dev/null
  fi
  if [[ " $MODES " == *" ssh "* ]] && ! docker image inspect "$SSH_IMAGE" >/dev/null 2>&1; then
    echo "preparing $SSH_IMAGE (once): $BENCH_IMAGE with openssh-server"
    docker rm -f "$PREFIX-prep" >/dev/null 2>&1 || true
    docker run -d --name "$PREFIX-prep" "$BENCH_IMAGE" sleep infinity >/dev/null
    docker exec "$PREFIX-prep" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null && mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh'
    docker commit "$PREFIX-prep" "$SSH_IMAGE" >/dev/null
    docker rm -f "$PREFIX-prep" >/dev/null
  fi
}

start_nodes() {  # mode -> containers node1..MAX
  local mode=$1 i
  for i in $(seq 1 "$MAX"); do
    docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true
    if [ "$mode" = ssh ]; then
      docker run -d --name "$PREFIX-node$i" "$SSH_IMAGE" /usr/sbin/sshd -D -e >/dev/null
      docker cp "$WORK/id.pub" "$PREFIX-node$i:/root/.ssh/authorized_keys"
      docker exec "$PREFIX-node$i" chown root:root /root/.ssh/authorized_keys
    else
      docker run -d --name "$PREFIX-node$i" "$BENCH_IMAGE" sleep infinity >/dev/null
    fi
    docker exec "$PREFIX-node$i" mkdir -p "$(dirname "$CODE")"
    docker cp "$ROOT/roles/train/files/smoke_train.py" "$PREFIX-node$i:$CODE"
  done
  if [ "$mode" = ssh ]; then
    for i in $(seq 1 "$MAX"); do  # sshd up before anything is timed
      until ssh "${SSH_OPTS[@]}" "root@$(addr "$PREFIX-node$i")" true 2>/dev/null; do sleep 0.5; done
    done
  fi
}
addr() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }

on_node() {  # mode i argv... -> runs argv on node i as a user would by hand
  local mode=$1 i=$2
  shift 2
  if [ "$mode" = ssh ]; then
    ssh "${SSH_OPTS[@]}" "root@$(addr "$PREFIX-node$i")" "$(printf '%q ' "$@")"
  else
    docker exec "$PREFIX-node$i" "$@"
  fi
}

by_hand() {  # mode N run -> seconds
  local mode=$1 n=$2 run=$3 ip1 start pids=() i
  if [ "$mode" = local ]; then
    start=$(now)
    "$VENV/bin/python" -m torch.distributed.run --nnodes 1 --nproc_per_node "$LOCAL_NPROC" --rdzv_backend c10d \
      --rdzv_endpoint "127.0.0.1:$PORT" --rdzv_id "hand-local-$run-$RANDOM" "$CODE" $JOB_ARGS \
      >"$WORK/hand-local-$run.log" 2>&1 || { echo "by-hand run failed: $WORK/hand-local-$run.log" >&2; exit 1; }
    echo "$(now) - $start" | bc
    return
  fi
  ip1=$(addr "$PREFIX-node1")
  start=$(now)
  for i in $(seq 1 "$n"); do
    on_node "$mode" "$i" "$VENV/bin/python" -m torch.distributed.run --nnodes "$n" \
      --nproc_per_node "$NPROC" --rdzv_backend c10d --rdzv_endpoint "$ip1:$PORT" --rdzv_id "hand-$n-$run" \
      --rdzv_conf "is_host=$([ "$i" = 1 ] && echo true || echo false)" --local_addr "$(addr "$PREFIX-node$i")" \
      "$CODE" $JOB_ARGS >"$WORK/hand-$mode-$n-$run-$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "by-hand run failed: $WORK/hand-$mode-$n-$run-*.log" >&2; exit 1; }; done
  echo "$(now) - $start" | bc
}

inventory() {  # mode N -> inventory file
  local mode=$1 n=$2 inv="$WORK/hosts-$mode-$n.yml" i
  {
    echo "all:"; echo "  children:"; echo "    train:"; echo "      hosts:"
    for i in $(seq 1 "$n"); do
      if [ "$mode" = ssh ]; then
        echo "        $PREFIX-node$i: {ansible_host: $(addr "$PREFIX-node$i"), ansible_user: root," \
             "ansible_ssh_private_key_file: $WORK/id, ansible_python_interpreter: /usr/bin/python3," \
             "ansible_ssh_common_args: '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'}"
      else
        echo "        $PREFIX-node$i: {ansible_connection: community.docker.docker, ansible_python_interpreter: /usr/bin/python3}"
      fi
    done
  } >"$inv"
  echo "$inv"
}

with_ansible() {  # project mode N run -> seconds
  local project=$1 mode=$2 n=$3 run=$4 start inv=() extra=() log job wall
  log="$WORK/ansible-$(basename "$project")-$mode-$n-$run.log"
  job="ansible-$mode-$n-$run-$RANDOM"
  if [ "$mode" = local ]; then
    extra=(-e "train_nproc_per_node=$LOCAL_NPROC")
  else
    inv=(-i "$(inventory "$mode" "$n")")
    extra=(-e train_nccl=false -e "train_nproc_per_node=$NPROC")
  fi
  start=$(now)
  # /usr/bin/time: the CPU seconds of ansible-playbook and what it waited for (its workers, their ssh
  # clients; not the detached ssh ControlMasters, not the nodes' side) -> $log.cpu
  ANSIBLE_CONFIG=$project/ansible.cfg /usr/bin/time -f '%U %S' -o "$log.cpu" ansible-playbook "${inv[@]}" \
    "$project/train.yml" --skip-tags prepare,nccl \
    "${extra[@]}" -e "train_rdzv_port=$PORT" -e "{\"train_args\": [\"$JOB_ARGS\"]}" -e train_runs_dir="$WORK/runs" \
    -e train_job_id="$job" >"$log" 2>&1 \
    || { echo "train.yml run failed: $log" >&2; tail -30 "$log" >&2; exit 1; }
  wall=$(echo "$(now) - $start" | bc)
  echo "$wall - $(job_span "$WORK/runs/$job")" | bc >"$log.around"
  echo "$wall"
}
job_span() {  # collected job directory -> seconds from the first node's start to the last node's end
  python3 - "$1" <<'PY'
import glob, json, os, sys
starts, ends = [], []
for job_json in glob.glob(os.path.join(sys.argv[1], "*", "job.json")):  # one directory per node; report.html beside them
    node = os.path.dirname(job_json)
    with open(job_json) as job, open(os.path.join(node, "result.json")) as result:
        starts.append(json.load(job)["start"])
        ends.append(json.load(result)["end"])
print("%.3f" % (max(ends) - min(starts)))
PY
}
around_job() {  # project mode N run -> train.yml's seconds outside the job's own run
  cat "$WORK/ansible-$(basename "$1")-$2-$3-$4.log.around"
}
controller_cpu() {  # project mode N run -> CPU seconds of the controller side of that run
  awk '{print $1 + $2}' "$WORK/ansible-$(basename "$1")-$2-$3-$4.log.cpu"
}

ssh-keygen -q -t ed25519 -N '' -f "$WORK/id"
SSH_OPTS=(-i "$WORK/id" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR)
[ "$MODES" = local ] || prepare_images

labels=()
for project in $PROJECTS; do
  label=$(git -C "$project" rev-parse --short HEAD 2>/dev/null || basename "$project")
  labels+=("$label")
done
echo "train.yml of: $(for i in "${!labels[@]}"; do printf '%s=%s ' "${labels[$i]}" "$(echo $PROJECTS | cut -d' ' -f$((i + 1)))"; done)"
header=$(printf '%-7s %-6s %-6s %9s' mode nodes run by_hand)
for label in "${labels[@]}"; do header+=$(printf ' %9s %9s' "$label" "+$label"); done
echo "$header"
for mode in $MODES; do
  sizes=$NODES
  [ "$mode" = local ] && sizes=1
  [ "$mode" = local ] || start_nodes "$mode"
  for n in $sizes; do
    declare -A col=()
    hands=()
    for run in $(seq 1 "$REPEAT"); do
      hand=$(by_hand "$mode" "$n" "$run")
      hands+=("$hand")
      line=$(printf '%-7s %-6s %-6s %9.2f' "$mode" "$n" "$run" "$hand")
      i=0
      for project in $PROJECTS; do
        ans=$(with_ansible "$project" "$mode" "$n" "$run")
        add=$(echo "$ans - $hand" | bc)
        col[t$i]+="$ans " col[a$i]+="$add " col[c$i]+="$(controller_cpu "$project" "$mode" "$n" "$run") "
        col[o$i]+="$(around_job "$project" "$mode" "$n" "$run") "
        line+=$(printf ' %9.2f %9.2f' "$ans" "$add")
        i=$((i + 1))
      done
      echo "$line"
    done
    line=$(printf '%-7s %-6s %-6s %9.2f' "$mode" "$n" median "$(echo "${hands[*]}" | median)")
    for i in "${!labels[@]}"; do
      line+=$(printf ' %9.2f %9.2f' "$(echo "${col[t$i]}" | median)" "$(echo "${col[a$i]}" | median)")
    done
    echo "$line"
    line=$(printf '%-7s %-6s %-6s %9s' "$mode" "$n" ctl_cpu "")
    for i in "${!labels[@]}"; do line+=$(printf ' %9.2f %9s' "$(echo "${col[c$i]}" | median)" ""); done
    echo "$line"
    line=$(printf '%-7s %-6s %-6s %9s' "$mode" "$n" around "")
    for i in "${!labels[@]}"; do line+=$(printf ' %9.2f %9s' "$(echo "${col[o$i]}" | median)" ""); done
    echo "$line"
    unset col
  done
done
echo "(seconds; +<commit>: train.yml minus by hand; ctl_cpu: median CPU seconds of ansible-playbook and its workers; around: median seconds of train.yml outside the run of the job. job: smoke_train.py $JOB_ARGS; containers: $NPROC process(es)" \
  "per node, local: $LOCAL_NPROC; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
