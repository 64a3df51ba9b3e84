#!/usr/bin/env bash
# Cost of the preflight fabric check (docs/fabric.md) at 2, 3 and 8 nodes.
#
# Per node count and run, on N containers over the community.docker.docker connection:
#   check  - ansible-playbook fabric_check.yml (validate, facts, security, preflight, the probe
#            job, the verdict): the acceptance entry point's wall clock;
#   probe  - the probe's own seconds inside that (fabric.json `seconds`: from the process group
#            up to the last figure, without torch's import and the rendezvous);
#   off/warn - ansible-playbook train.yml with train_fabric_check=off and =warn, and +warn, what
#            the check adds to a launch (warn - off).
# It prints the seconds and the medians; it asserts nothing.
#
#   bash benchmarks/fabric.sh                     # NODES="2 3 8" REPEAT=1
#   NODES="3" REPEAT=3 bash benchmarks/fabric.sh
#
# Needs: docker and the image multinode-training/bench-launch:venv (the base image with the venv,
# torch and the DeepSpeed wheel: benchmarks/launch.sh builds it once, `MODES=docker bash
# benchmarks/launch.sh`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NODES=${NODES:-"2 3 8"}
REPEAT=${REPEAT:-1}
PORT=${PORT:-29471}
IMAGE=multinode-training/bench-launch:venv
PREFIX=bench-fabric
CODE=/opt/multinode-training/code/smoke_train.py
export PATH=$ROOT/.venv/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg
WORK=$(mktemp -d /tmp/bench-fabric.XXXXXX)
MAX=0
for n in $NODES; do [ "$n" -gt "$MAX" ] && MAX=$n; done
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "no $IMAGE: MODES=docker bash benchmarks/launch.sh builds it" >&2; exit 1; }

cleanup() {
  for i in $(seq 1 "$MAX"); do docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true; done
  [ -n "${KEEP:-}" ] && cp -r "$WORK" "$KEEP" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }

for i in $(seq 1 "$MAX"); do
  docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true
  docker run -d --name "$PREFIX-node$i" "$IMAGE" sleep infinity >/dev/null
  docker exec "$PREFIX-node$i" mkdir -p "$(dirname "$CODE")"
  docker cp "$ROOT/roles/train/files/smoke_train.py" "$PREFIX-node$i:$CODE"
done

play() {  # N log playbook args... -> seconds
  local n=$1 log=$2 playbook=$3 start
  shift 3
  start=$(now)
  ansible-playbook -i "$WORK/hosts-$n.yml" "$ROOT/$playbook" --skip-tags prepare,nccl -e train_nccl=false \
    -e train_nproc_per_node=1 -e "train_rdzv_port=$PORT" -e train_runs_dir="$WORK/runs" -e '{"train_args": ["--skip-deepspeed"]}' \
    "$@" >"$log" 2>&1 || { echo "$playbook failed: $log" >&2; tail -30 "$log" >&2; exit 1; }
  echo "$(now) - $start" | bc
}

printf '%-6s %-6s %8s %8s %8s %8s %8s\n' nodes run check probe off warn +warn
for n in $NODES; do
  { echo "all:"; echo "  children:"; echo "    train:"; echo "      hosts:"
    for i in $(seq 1 "$n"); do
      echo "        $PREFIX-node$i: {ansible_connection: community.docker.docker, ansible_python_interpreter: /usr/bin/python3}"
    done; } >"$WORK/hosts-$n.yml"
  checks=() probes=() adds=()
  for run in $(seq 1 "$REPEAT"); do
    job="fab-$n-$run-$RANDOM"
    check=$(play "$n" "$WORK/check-$n-$run.log" fabric_check.yml -e train_job_id="$job")
    probe=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['result']['seconds'])" "$WORK/runs/$job/fabric.json")
    off=$(play "$n" "$WORK/off-$n-$run.log" train.yml -e train_fabric_check=off -e train_job_id="off-$job")
    warn=$(play "$n" "$WORK/warn-$n-$run.log" train.yml -e train_fabric_check=warn -e train_job_id="warn-$job")
    add=$(echo "$warn - $off" | bc)
    checks+=("$check") probes+=("$probe") adds+=("$add")
    printf '%-6s %-6s %8.2f %8.2f %8.2f %8.2f %8.2f\n' "$n" "$run" "$check" "$probe" "$off" "$warn" "$add"
  done
  printf '%-6s %-6s %8.2f %8.2f %8s %8s %8.2f\n' "$n" median "$(echo "${checks[*]}" | median)" \
    "$(echo "${probes[*]}" | median)" "" "" "$(echo "${adds[*]}" | median)"
done
