#!/usr/bin/env bash
# Launch overhead of `ansible-playbook train.yml` against torchrun started by hand.
#
# For N nodes (default: 2 and 4) this starts N containers from one prepared image
# (venv with torch + the DeepSpeed wheel), then times the same job twice:
#   by hand  - `docker exec` of torchrun on every container, concurrently, as the seeds
#              do it (address and port typed in, one rendezvous id), plus the two
#              settings containers need to work at all (is_host, --local_addr);
#   train.yml - ansible-playbook train.yml --skip-tags prepare,nccl against the containers
#              (validate, facts, preflight incl. the TCP reachability check, launch,
#              wait, stop-check, log collection, report).
# and prints the wall-clock seconds and the difference. It asserts nothing.
#
#   bash benchmarks/launch.sh            # 2 and 4 nodes, 1 repetition
#   NODES="2 4 8" REPEAT=3 bash benchmarks/launch.sh
#
# Needs: docker, the image multinode-training/debian:bookworm (scripts/base_images.sh),
# .cache/wheelhouse (scripts/wheelhouse.sh), dist/deepspeed-*.whl (build_deepspeed.yml).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NODES=${NODES:-"2 4"}
REPEAT=${REPEAT:-1}
NPROC=${NPROC:-1}
# The job: the bundled smoke job's all-reduce part (DeepSpeed init would only add the
# same seconds to both sides).
JOB_ARGS=${JOB_ARGS:---skip-deepspeed}
BASE_IMAGE=multinode-training/debian:bookworm
BENCH_IMAGE=multinode-training/bench-launch:venv
PREFIX=bench-launch
VENV=/opt/multinode-training/venv
export PATH=$ROOT/.venv/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg
WORK=$(mktemp -d /tmp/bench-launch.XXXXXX)
MAX=$(tr ' ' '\n' <<<"$NODES" | sort -n | tail -1)

cleanup() {
  for i in $(seq 1 "$MAX"); do docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wheel=$(ls -t "$ROOT"/dist/deepspeed-*.whl | head -1)
if ! docker image inspect "$BENCH_IMAGE" >/dev/null 2>&1; then
  echo "preparing $BENCH_IMAGE (once): venv with torch and $(basename "$wheel")"
  docker rm -f "$PREFIX-prep" >/dev/null 2>&1 || true
  docker run -d --name "$PREFIX-prep" -v "$ROOT/.cache/wheelhouse:/wheelhouse:ro" -v "$ROOT/dist:/dist:ro" \
    "$BASE_IMAGE" sleep infinity >/dev/null
  docker exec "$PREFIX-prep" python3 -m venv "$VENV"
  docker exec "$PREFIX-prep" "$VENV/bin/pip" install -q --no-index --find-links /wheelhouse torch "/dist/$(basename "$wheel")"
  docker commit "$PREFIX-prep" "$BENCH_IMAGE" >/dev/null
  docker rm -f "$PREFIX-prep" >/dev/null
fi

for i in $(seq 1 "$MAX"); do
  docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true
  docker run -d --name "$PREFIX-node$i" "$BENCH_IMAGE" sleep infinity >/dev/null
  docker exec "$PREFIX-node$i" mkdir -p /opt/multinode-training/code
  docker cp "$ROOT/roles/train/files/smoke_train.py" "$PREFIX-node$i:/opt/multinode-training/code/smoke_train.py"
done
addr() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }

by_hand() {  # N run -> seconds
  local n=$1 run=$2 ip1 start pids=() i
  ip1=$(addr "$PREFIX-node1")
  start=$(date +%s.%N)
  for i in $(seq 1 "$n"); do
    docker exec "$PREFIX-node$i" "$VENV/bin/python" -m torch.distributed.run --nnodes "$n" \
      --nproc_per_node "$NPROC" --rdzv_backend c10d --rdzv_endpoint "$ip1:29400" --rdzv_id "hand-$n-$run" \
      --rdzv_conf "is_host=$([ "$i" = 1 ] && echo true || echo false)" --local_addr "$(addr "$PREFIX-node$i")" \
      /opt/multinode-training/code/smoke_train.py $JOB_ARGS >"$WORK/hand-$n-$run-$i.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "by-hand run failed: $WORK/hand-$n-$run-*.log" >&2; exit 1; }; done
  echo "$(date +%s.%N) - $start" | bc
}

with_ansible() {  # N run -> seconds
  local n=$1 run=$2 inv="$WORK/hosts-$n.yml" start i
  {
    echo "all:"; echo "  children:"; echo "    train:"; echo "      hosts:"
    for i in $(seq 1 "$n"); do
      echo "        $PREFIX-node$i: {ansible_connection: community.docker.docker, ansible_python_interpreter: /usr/bin/python3}"
    done
  } >"$inv"
  start=$(date +%s.%N)
  ansible-playbook -i "$inv" "$ROOT/train.yml" --skip-tags prepare,nccl -e train_nccl=false \
    -e train_cpu_nproc="$NPROC" -e "{\"train_args\": [\"$JOB_ARGS\"]}" -e train_runs_dir="$WORK/runs" \
    -e train_job_id="ansible-$n-$run-$RANDOM" >"$WORK/ansible-$n-$run.log" 2>&1 \
    || { echo "train.yml run failed: $WORK/ansible-$n-$run.log" >&2; tail -30 "$WORK/ansible-$n-$run.log" >&2; exit 1; }
  echo "$(date +%s.%N) - $start" | bc
}

printf '%-6s %-4s %12s %12s %12s\n' nodes run by_hand_s train_yml_s added_s
for n in $NODES; do
  for run in $(seq 1 "$REPEAT"); do
    hand=$(by_hand "$n" "$run")
    ans=$(with_ansible "$n" "$run")
    printf '%-6s %-4s %12.2f %12.2f %12.2f\n' "$n" "$run" "$hand" "$ans" "$(echo "$ans - $hand" | bc)"
  done
done
echo "(job: smoke_train.py $JOB_ARGS, $NPROC process(es) per node; forks=$(ansible-config dump 2>/dev/null | sed -n 's/^DEFAULT_FORKS.*= //p'))"
