#!/usr/bin/env bash
# Base images for molecule: Debian bookworm and bullseye with python3 (Ansible's
# target interpreter). A registry is tried first; where none answers (the usual
# case on air-gapped build hosts) the image is made with debootstrap and
# `docker import`. An image that already exists is reused, so a warm run costs
# one `docker image inspect` per release.
set -euo pipefail

PREFIX=${MOLECULE_IMAGE_PREFIX:-multinode-training/debian}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
RELEASES=("$@")
[ ${#RELEASES[@]} -gt 0 ] || RELEASES=(bookworm bullseye)
# Packages every node image needs: python3 for Ansible, procps for ps/pkill in
# verify steps, iproute2 for address discovery, ca-certificates for pip.
INCLUDE=python3,python3-venv,python3-pip,python3-apt,ca-certificates,procps,iproute2,sudo,openssh-client

build_one() {
  local release=$1 image="$PREFIX:$1"
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image: present, reused"
    return 0
  fi
  if timeout 30 docker pull "debian:$release" >/dev/null 2>&1; then
    echo "base image $image: pulled debian:$release, adding python3"
    docker build -t "$image" - <<DOCKERFILE
FROM debian:$release
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(echo $INCLUDE | tr , ' ') && rm -rf /var/lib/apt/lists/*
DOCKERFILE
    return 0
  fi
  command -v debootstrap >/dev/null || {
    echo "debootstrap missing: run scripts/ensure_docker.sh first (it installs it)" >&2
    exit 1
  }
  local root
  root=$(mktemp -d "/var/tmp/debootstrap-$release.XXXXXX")
  trap 'rm -rf "$root"' RETURN
  echo "base image $image: no registry, debootstrap $release from $MIRROR"
  debootstrap --variant=minbase --include="$INCLUDE" "$release" "$root" "$MIRROR" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2
    echo "debootstrap $release failed; full log: $root.log" >&2
    exit 1
  }
  rm -f "$root.log"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | docker import \
    --change 'CMD ["sleep", "infinity"]' \
    --change 'ENV LANG=C.UTF-8' \
    - "$image" >/dev/null
  echo "base image $image: imported"
}

for r in "${RELEASES[@]}"; do
  build_one "$r"
done
