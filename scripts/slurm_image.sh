#!/usr/bin/env bash
# The Slurm test cluster image: the molecule base image plus Debian's slurm-wlm
# (slurmctld, slurmd and the client commands) and munge, from the Debian
# archive (no registry). One image serves the controller/submit host and the
# compute nodes; molecule/launch_slurm starts the daemons each role needs.
# An image that already exists is reused (one `docker image inspect`).
set -euo pipefail

BASE=${MOLECULE_IMAGE_PREFIX:-multinode-training/debian}:bookworm
IMAGE=${SLURM_IMAGE:-multinode-training/slurm:bookworm}

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "slurm image $IMAGE: present, reused"
  exit 0
fi
docker image inspect "$BASE" >/dev/null 2>&1 || {
  echo "base image $BASE missing: run scripts/base_images.sh bookworm first" >&2
  exit 1
}
start=$(date +%s)
echo "slurm image $IMAGE: building from $BASE (slurm-wlm, munge)"
docker build -q -t "$IMAGE" - >/dev/null <<DOCKERFILE
FROM $BASE
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      slurm-wlm munge \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && rm -f /etc/munge/munge.key \
 && mkdir -p /run/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm \
 && chown munge:munge /run/munge
CMD ["sleep", "infinity"]
DOCKERFILE
echo "slurm image $IMAGE: built in $(( $(date +%s) - start )) s"
