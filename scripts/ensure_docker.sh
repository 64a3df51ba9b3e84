#!/usr/bin/env bash
# Make sure a Docker engine answers. If none does and this is a Debian/Ubuntu
# machine where we are root, install docker.io (and debootstrap, which
# base_images.sh needs when no registry answers) and start dockerd without
# systemd (CI containers and build sandboxes have no init system).
set -euo pipefail

if docker info >/dev/null 2>&1; then
  echo "docker: engine answers"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "docker: no engine answers and this machine cannot install one here (need root and apt-get)." >&2
  echo "        start a Docker engine, then re-run." >&2
  exit 1
fi
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  echo "docker: installing ${missing[*]} from the distribution archive"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
    systemctl start docker
  else
    # A dockerd killed with its session leaves its pid files behind, and a new one
    # refuses to start over them.
    for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
      if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
        rm -f "$pidfile"
      fi
    done
    echo "docker: starting dockerd (log: /var/log/dockerd.log)"
    # dockerd outlives this script: it must not inherit its open files (a
    # `flock <file> make molecule` would stay locked as long as dockerd runs).
    (
      for fd in /proc/self/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
      done
      exec setsid nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null
    ) &
  fi
fi
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && { echo "docker: engine answers"; exit 0; }
  sleep 1
done
echo "docker: dockerd did not answer within 60 s; see /var/log/dockerd.log" >&2
tail -20 /var/log/dockerd.log >&2 || true
exit 1
