#!/usr/bin/env bash
# train.yml side by side with what its users would type instead, on the same 2 container nodes x 2 CPU
# ranks (sshd and pdsh in the node image, a venv with torch and the DeepSpeed wheel on both):
#   deepspeed - `deepspeed --hostfile` on node1 (its default pdsh launcher: pdsh ssh-es into both
#               nodes and runs deepspeed.launcher.launch there);
#   torchrun  - torchrun typed on each node (docker exec), static rendezvous on node1
#               (--node_rank, --master_addr: the PyTorch multi-node recipe);
#   train.yml - ansible-playbook train.yml over ssh, nodes prepared (--skip-tags prepare,nccl; one
#               run before the timed ones created the job's account and copied the code).
# Per launcher, two runs:
#   ok   - the bundled smoke job ($OK_ARGS): seconds from the command to the first step line
#          (`smoke: rank=0 step=1`) on the controller (the terminal of the command; by hand: node1's);
#   fail - global rank 3 (node2's second rank) raises at step 5 while the other ranks ignore SIGTERM and
#          block, as ranks in a collective with a dead peer do ($FAIL_ARGS): seconds from the rank's
#          failure (the time it printed) until no process of the job is left on any node, seen from
#          outside (every 0.5 s, the processes of each container whose command line names the job:
#          smoke_train.py, torch.distributed.run/torchrun, deepspeed, pdsh, the collection's
#          supervisor.py, mt_watch.py, mt_rank.py); the processes left 60 s after the failure; whether
#          the rank's exception (`RuntimeError: injected failure on rank 3`) reaches the user (the
#          command's output; by hand: either node's terminal).
# What is left after a run is killed by pid (docker exec kill -9) before the next one. Asserts nothing.
#
#   bash benchmarks/launchers.sh            # KEEP=<dir> keeps the logs
#
# Needs: docker, the image multinode-training/debian:bookworm (scripts/base_images.sh),
# .cache/wheelhouse (scripts/wheelhouse.sh), dist/deepspeed-*.whl (build_deepspeed.yml), the Debian
# archive once (openssh-server, pdsh for the image).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NPROC=2
PORT=${PORT:-29471}
OK_ARGS=${OK_ARGS:-}
FAIL_ARGS=${FAIL_ARGS:---skip-deepspeed --no-record --steps 60 --step-seconds 1 --fail-rank 3 --fail-step 5 --hang-others}
WATCH=60
BASE_IMAGE=multinode-training/debian:bookworm
# benchmarks/launch.sh's images: the venv (torch and the wheel), then sshd; this one adds pdsh.
VENV_IMAGE=multinode-training/bench-launch:venv
SSH_IMAGE=multinode-training/bench-launch:ssh
IMAGE=multinode-training/bench-launch:pdsh
PREFIX=bench-launchers
VENV=/opt/multinode-training/venv
CODE=/opt/multinode-training/code/smoke_train.py
JOB_RE='smoke_train\.py|torch\.distributed\.run|torchrun|deepspeed|pdsh|supervisor\.py|mt_watch\.py|mt_rank\.py'
export PATH=$ROOT/.venv/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg
WORK=$(mktemp -d /tmp/bench-launchers.XXXXXX)

cleanup() {
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp -r "$WORK"/*.log "$WORK"/runs "$KEEP"/ 2>/dev/null || true; fi
  for i in 1 2; do docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
addr() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }
# Each line of stdin with the time it arrived (the controller's clock; the containers share it).
stamp() { python3 -u -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line)); sys.stdout.flush()'; }

prepare_image() {
  docker image inspect "$IMAGE" >/dev/null 2>&1 && return
  local from=$SSH_IMAGE wheel
  docker rm -f "$PREFIX-prep" >/dev/null 2>&1 || true
  if ! docker image inspect "$SSH_IMAGE" >/dev/null 2>&1; then
    from=$BASE_IMAGE
    wheel=$(ls -t "$ROOT"/dist/deepspeed-*.whl | head -1)
  fi
  echo "preparing $IMAGE (once) from $from"
  docker run -d --name "$PREFIX-prep" -v "$ROOT/.cache/wheelhouse:/wheelhouse:ro" -v "$ROOT/dist:/dist:ro" \
    "$from" sleep infinity >/dev/null
  if [ "$from" = "$BASE_IMAGE" ]; then
    docker exec "$PREFIX-prep" python3 -m venv "$VENV"
    docker exec "$PREFIX-prep" "$VENV/bin/pip" install -q --no-index --find-links /wheelhouse torch "/dist/$(basename "$wheel")"
  fi
  docker exec "$PREFIX-prep" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    openssh-server pdsh >/dev/null && mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh'
  docker commit "$PREFIX-prep" "$IMAGE" >/dev/null
  docker rm -f "$PREFIX-prep" >/dev/null
}

start_nodes() {  # node1, node2 with sshd, one key pair for the controller and for pdsh between the nodes
  local i
  for i in 1 2; do
    docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true
    docker run -d --name "$PREFIX-node$i" "$IMAGE" /usr/sbin/sshd -D -e >/dev/null
    docker cp "$WORK/id.pub" "$PREFIX-node$i:/root/.ssh/authorized_keys"
    docker cp "$WORK/id" "$PREFIX-node$i:/root/.ssh/id_ed25519"
    printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' \
      | docker exec -i "$PREFIX-node$i" sh -c 'cat >/root/.ssh/config'
    docker exec "$PREFIX-node$i" sh -c 'chown root:root /root/.ssh/* && chmod 600 /root/.ssh/*'
    docker exec "$PREFIX-node$i" mkdir -p "$(dirname "$CODE")"
    docker cp "$ROOT/roles/train/files/smoke_train.py" "$PREFIX-node$i:$CODE"
  done
  IP1=$(addr "$PREFIX-node1") IP2=$(addr "$PREFIX-node2")
  printf '%s slots=%s\n%s slots=%s\n' "$IP1" "$NPROC" "$IP2" "$NPROC" \
    | docker exec -i "$PREFIX-node1" sh -c 'cat >/root/hostfile'
  for ip in "$IP1" "$IP2"; do  # sshd up before anything is timed
    until ssh "${SSH_OPTS[@]}" "root@$ip" true 2>/dev/null; do sleep 0.5; done
  done
  {
    echo "all:"; echo "  children:"; echo "    train:"; echo "      hosts:"
    for i in 1 2; do
      echo "        $PREFIX-node$i: {ansible_host: $(addr "$PREFIX-node$i"), ansible_user: root," \
           "ansible_ssh_private_key_file: $WORK/id, ansible_python_interpreter: /usr/bin/python3," \
           "ansible_ssh_common_args: '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'}"
    done
  } >"$WORK/hosts.yml"
}

# The job's processes on each node, every 0.5 s, until $WORK/stop exists: "<time> <node> <count> <pids>".
poll_processes() {
  python3 - "$WORK" "$JOB_RE" "$PREFIX-node1" "$PREFIX-node2" <<'PY' &
import os, re, subprocess, sys, time
work, pattern, nodes = sys.argv[1], sys.argv[2], sys.argv[3:]
snippet = ("import os, re, sys\n"
           "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
           "    try: args = open('/proc/%s/cmdline' % pid, 'rb').read().replace(b'\\0', b' ').decode()\n"
           "    except OSError: continue\n"
           "    if re.search(sys.argv[1], args) and 'import os, re, sys' not in args: print(pid)\n")
with open(os.path.join(work, "processes.log"), "w") as out:
    while not os.path.exists(os.path.join(work, "stop")):
        for node in nodes:
            found = subprocess.run(["docker", "exec", node, "python3", "-c", snippet, pattern],
                                   capture_output=True, text=True).stdout.split()
            out.write("%.3f %s %d %s\n" % (time.time(), node, len(found), ",".join(found)))
            out.flush()
        time.sleep(0.5)
PY
  POLLER=$!
}

stop_polling() { touch "$WORK/stop"; wait "$POLLER" 2>/dev/null || true; rm -f "$WORK/stop"; }

kill_leftovers() {  # every process of a job left on the nodes, by pid
  local i pids
  for i in 1 2; do
    pids=$(docker exec "$PREFIX-node$i" python3 -c "import os, re, sys
print(' '.join(p for p in filter(str.isdigit, os.listdir('/proc'))
    if re.search(sys.argv[1], open('/proc/%s/cmdline' % p, 'rb').read().replace(b'\0', b' ').decode(errors='replace'))
    and int(p) != os.getpid()))" "$JOB_RE" 2>/dev/null || true)
    [ -z "$pids" ] || docker exec "$PREFIX-node$i" kill -9 $pids 2>/dev/null || true
  done
}

launch() {  # launcher kind args -> runs it in the background; output (stamped) in $WORK/<launcher>-<kind>*.log
  local launcher=$1 kind=$2 args=$3 i
  PIDS=()
  case $launcher in
    deepspeed)
      docker exec -w "$(dirname "$CODE")" "$PREFIX-node1" "$VENV/bin/deepspeed" --hostfile /root/hostfile \
        --master_addr "$IP1" --master_port "$PORT" --no_local_rank "$CODE" $args 2>&1 \
        | stamp >"$WORK/$launcher-$kind.log" &
      PIDS+=($!) ;;
    torchrun)
      for i in 1 2; do
        docker exec "$PREFIX-node$i" "$VENV/bin/torchrun" --nnodes 2 --nproc_per_node "$NPROC" \
          --node_rank $((i - 1)) --master_addr "$IP1" --master_port "$((PORT + 1))" "$CODE" $args 2>&1 \
          | stamp >"$WORK/$launcher-$kind-node$i.log" &
        PIDS+=($!)
      done ;;
    train.yml)
      ansible-playbook -i "$WORK/hosts.yml" train.yml --skip-tags prepare,nccl -e train_nccl=false \
        -e "train_nproc_per_node=$NPROC" -e "train_rdzv_port=$((PORT + 2))" -e "train_runs_dir=$WORK/runs" \
        -e "train_job_id=$kind-$RANDOM" -e "{\"train_args\": $(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' $args)}" \
        2>&1 | stamp >"$WORK/$launcher-$kind.log" &
      PIDS+=($!) ;;
  esac
}

first_step() {  # launcher start -> seconds to the first step line in its output
  cat "$WORK/$1"-ok*.log | awk -v s="$2" '/smoke: rank=0 step=1 / {printf "%.1f\n", $1 - s; exit}'
}

failed_at() {  # launcher -> the failing rank's own time (its line: failing at step 5 time=<t>)
  { cat "$WORK/$1"-fail*.log; cat "$WORK"/runs/fail-*/*/ranks/*/attempt_*/*/stdout.log 2>/dev/null; } \
    | grep -o 'failing at step [0-9]* time=[0-9.]*' | head -1 | sed 's/.*time=//'
}

run_ok() {  # launcher -> "seconds to the first step line"
  local launcher=$1 start pid
  start=$(now)
  launch "$launcher" ok "$OK_ARGS"
  for pid in "${PIDS[@]}"; do wait "$pid" || true; done
  first_step "$launcher" "$start"
  kill_leftovers
}

run_fail() {  # launcher -> "seconds to nothing left|processes left after 60 s|exception reaches the user"
  local launcher=$1 t_fail="" waited=0 pid
  rm -f "$WORK/processes.log"
  poll_processes
  launch "$launcher" fail "$FAIL_ARGS"
  while [ -z "$t_fail" ] && [ "$waited" -lt 600 ]; do sleep 1; waited=$((waited + 1)); t_fail=$(failed_at "$launcher"); done
  # the train.yml play ends by itself (its rank logs come home with it); watch the nodes WATCH s past the failure
  while [ "$(echo "$(now) < ${t_fail:-0} + $WATCH + 1" | bc)" = 1 ]; do
    sleep 1
    [ -n "$t_fail" ] || t_fail=$(failed_at "$launcher")
  done
  stop_polling
  kill_leftovers  # the hung commands end with their processes
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -n "$t_fail" ] || t_fail=$(failed_at "$launcher")
  python3 - "$WORK/processes.log" "${t_fail:-0}" "$WATCH" <<'PY'
import sys
path, t_fail, watch = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
# every poll of a node from the failure on: the nodes' processes at that moment (each node's latest poll)
latest, states = {}, []
for line in open(path):
    t, node, count = line.split()[:3]
    latest[node] = int(count)
    if float(t) >= t_fail and len(latest) == 2:
        states.append((float(t), sum(latest.values())))
busy = [t for t, total in states if total]
if not busy:
    gone = "%.1f" % (states[0][0] - t_fail)
elif busy[-1] >= t_fail + watch - 1:
    gone = "> %d" % watch
else:
    gone = "%.1f" % (min(t for t, total in states if t > busy[-1]) - t_fail)
left = [total for t, total in states if t >= t_fail + watch]
print("%s|%d" % (gone, left[0] if left else 0))
PY
  if grep -qh 'injected failure on rank 3' "$WORK/$launcher"-fail*.log; then echo yes; else echo no; fi
}

ssh-keygen -q -t ed25519 -N '' -f "$WORK/id"
SSH_OPTS=(-i "$WORK/id" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR)
prepare_image
start_nodes
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); warm-up: train.yml once (the job's account, the code)"
ansible-playbook -i "$WORK/hosts.yml" train.yml --skip-tags prepare,nccl -e train_nccl=false \
  -e "train_nproc_per_node=$NPROC" -e "train_rdzv_port=$((PORT + 2))" -e "train_runs_dir=$WORK/runs" \
  -e '{"train_args": ["--skip-deepspeed"]}' >"$WORK/warmup.log" 2>&1 || { tail -30 "$WORK/warmup.log"; exit 1; }

declare -A first gone left told
for launcher in deepspeed torchrun train.yml; do
  first[$launcher]=$(run_ok "$launcher")
  echo "$launcher ok: first step line after ${first[$launcher]:-?} s (load $(cut -d' ' -f1 /proc/loadavg))"
done
for launcher in deepspeed torchrun train.yml; do
  out=$(run_fail "$launcher")
  IFS='|' read -r gone[$launcher] left[$launcher] <<<"$(echo "$out" | head -1)"
  told[$launcher]=$(echo "$out" | tail -1)
  echo "$launcher fail: nothing left after ${gone[$launcher]} s, ${left[$launcher]} process(es) left after $WATCH s," \
       "exception reaches the user: ${told[$launcher]} (load $(cut -d' ' -f1 /proc/loadavg))"
done
printf '\n%-11s %16s %22s %18s %16s\n' launcher "first step (s)" "failure -> none (s)" "left after ${WATCH} s" "exception shown"
for launcher in deepspeed torchrun train.yml; do
  printf '%-11s %16s %22s %18s %16s\n' "$launcher" "${first[$launcher]:-?}" "${gone[$launcher]}" "${left[$launcher]}" \
    "${told[$launcher]}"
done
echo "(2 containers x $NPROC CPU ranks on this machine, $(nproc) CPUs, load after: $(cut -d' ' -f1-3 /proc/loadavg);" \
  "ok: smoke_train.py ${OK_ARGS:-(defaults: DeepSpeed ZeRO-2, 5 steps)}; fail: $FAIL_ARGS)"
