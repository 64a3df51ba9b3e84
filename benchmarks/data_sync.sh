#!/usr/bin/env bash
# train_data_sync at 2 and 8 nodes: what leaves the controller against N x size, the time, the re-run.
#
# Per node count, on N fresh containers (community.docker.docker connection) and a dataset of
# SIZE_MIB MiB in 4 files of random bytes on the controller:
#   sync   - the first sync (ansible-playbook benchmarks/data_sync.yml: role train's data.yml);
#   rerun  - the same again: nothing sent, changed=0;
#   ctl    - bytes the controller sent to the nodes, read from outside: every byte ansible-playbook's
#            docker CLI calls write to the docker socket (module payloads included), through a
#            counting proxy (DOCKER_HOST) - against N x size, what a copy to every node sends;
#   peers  - bytes the nodes sent each other: the sum of their eth0 tx counters (kernel, outside).
# It prints one line per node count; it asserts nothing.
#
#   bash benchmarks/data_sync.sh            # NODES="2 8" SIZE_MIB=1024
#   NODES="3" SIZE_MIB=64 bash benchmarks/data_sync.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NODES=${NODES:-"2 8"}
SIZE_MIB=${SIZE_MIB:-1024}
IMAGE=${IMAGE:-multinode-training/debian:bookworm}
PREFIX=bench-data
export PATH=$ROOT/.venv/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg
WORK=$(mktemp -d /tmp/bench-data.XXXXXX)
MAX=0
for n in $NODES; do [ "$n" -gt "$MAX" ] && MAX=$n; done
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "no $IMAGE: make images builds it" >&2; exit 1; }

cleanup() {
  [ -n "${PROXY:-}" ] && kill "$PROXY" 2>/dev/null
  for i in $(seq 1 "$MAX"); do docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# The counting proxy: a unix socket in front of the docker engine's, counting client -> engine bytes.
cat >"$WORK/proxy.py" <<'PY'
import os, socket, sys, threading
listen, target, counter = sys.argv[1], sys.argv[2], sys.argv[3]
total = [0]
lock = threading.Lock()
def pump(src, dst, count):
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
            if count:
                with lock:
                    total[0] += len(data)
    except OSError:
        pass
    finally:
        try:  # a half-close, passed on: docker exec's stdin ends while its output still flows back
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def save():
    while True:
        threading.Event().wait(0.5)
        with lock:
            value = total[0]
        with open(counter + ".tmp", "w") as f:
            f.write(str(value))
        os.replace(counter + ".tmp", counter)
server = socket.socket(socket.AF_UNIX)
server.bind(listen)
server.listen(64)
threading.Thread(target=save, daemon=True).start()
while True:
    client, _ = server.accept()
    engine = socket.socket(socket.AF_UNIX)
    engine.connect(target)
    threading.Thread(target=pump, args=(client, engine, True), daemon=True).start()
    threading.Thread(target=pump, args=(engine, client, False), daemon=True).start()
PY
python3 "$WORK/proxy.py" "$WORK/docker.sock" /var/run/docker.sock "$WORK/sent" &
PROXY=$!
for _ in $(seq 50); do [ -S "$WORK/docker.sock" ] && break; sleep 0.1; done

mkdir -p "$WORK/data/ds"
for f in 1 2 3 4; do head -c "$((SIZE_MIB / 4))M" /dev/urandom >"$WORK/data/ds/part-$f.bin"; done
BYTES=$(du -cb "$WORK/data/ds" | tail -1 | cut -f1)

sent() { sleep 0.6; cat "$WORK/sent"; }
tx() {  # total eth0 tx bytes of nodes 1..N
  local n=$1 sum=0 i
  for i in $(seq 1 "$n"); do
    sum=$((sum + $(docker exec "$PREFIX-node$i" cat /sys/class/net/eth0/statistics/tx_bytes)))
  done
  echo "$sum"
}
play() {  # N log -> seconds
  local n=$1 log=$2 start
  start=$(date +%s.%N)
  DOCKER_HOST=unix://$WORK/docker.sock ansible-playbook -i "$WORK/hosts-$n.yml" "$ROOT/benchmarks/data_sync.yml" \
    -e train_progress_interval=5 -e "{\"train_data_sync\": [{\"src\": \"$WORK/data/ds\", \"dest\": \"/data/ds\"}]}" \
    >"$log" 2>&1 || { echo "failed: $log" >&2; tail -30 "$log" >&2; exit 1; }
  echo "$(date +%s.%N) - $start" | bc
}
mib() { echo "scale=1; $1 / 1048576" | bc; }

printf '%-5s %9s %9s %10s %10s %8s %8s %s\n' nodes size_MiB ctl_MiB NxSize_MiB peers_MiB sync_s rerun_s rerun
for n in $NODES; do
  {
    echo "all:"
    echo "  hosts:"
    for i in $(seq 1 "$n"); do
      echo "    $PREFIX-node$i: {ansible_connection: community.docker.docker}"
    done
  } >"$WORK/hosts-$n.yml"
  for i in $(seq 1 "$MAX"); do docker rm -f "$PREFIX-node$i" >/dev/null 2>&1 || true; done
  for i in $(seq 1 "$n"); do docker run -d --name "$PREFIX-node$i" "$IMAGE" sleep infinity >/dev/null; done
  c0=$(sent) t0=$(tx "$n")
  s1=$(play "$n" "$WORK/sync-$n.log")
  c1=$(sent) t1=$(tx "$n")
  s2=$(play "$n" "$WORK/rerun-$n.log")
  recap=$(grep -o 'changed=[0-9]*' "$WORK/rerun-$n.log" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
  printf '%-5s %9s %9s %10s %10s %8.1f %8.1f %s\n' "$n" "$(mib "$BYTES")" "$(mib $((c1 - c0)))" \
    "$(mib $((n * BYTES)))" "$(mib $((t1 - t0)))" "$s1" "$s2" "$recap"
  [ -n "${VERBOSE:-}" ] && grep -E '^\[|data:' "$WORK/sync-$n.log" | head -40
done
