#!/usr/bin/env bash
# The node image of molecule/launch_slurm ("bring your own environment"): the Slurm
# image plus a site environment, /opt/site-env, a venv with torch 2.13.0 (CPU)
# preinstalled from the host wheelhouse, as an NGC container or a site image
# brings torch: nothing of this collection is in it. The scenario's network is
# internal (no package index reachable), so everything the converge installs
# into it comes from the wheelhouse it copies (the scenario reads `docker diff`
# of each node: DeepSpeed added, torch unchanged). Rebuilt when the wheelhouse
# changes (its stamp's sha256 is the image's label), else reused.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${SLURM_IMAGE:-multinode-training/slurm:bookworm}
IMAGE=${SITE_ENV_IMAGE:-multinode-training/slurm-site-env:bookworm}
WHEELHOUSE=${WHEELHOUSE:-.cache/wheelhouse}
LABEL=multinode-training.wheelhouse

[ -f "$WHEELHOUSE/.stamp" ] || { echo "wheelhouse $WHEELHOUSE missing: run scripts/wheelhouse.sh first" >&2; exit 1; }
want=$(sha256sum "$WHEELHOUSE/.stamp" | cut -c1-16)
have=$(docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$IMAGE" 2>/dev/null || true)
if [ "$have" = "$want" ]; then
  echo "site-env image $IMAGE: present, reused"
  exit 0
fi
start=$(date +%s)
echo "site-env image $IMAGE: building from $BASE (torch into /opt/site-env)"
cid=$(docker run -d -v "$(realpath "$WHEELHOUSE"):/wheelhouse:ro" "$BASE" sleep infinity)
trap 'docker rm -f "$cid" >/dev/null' EXIT
docker exec "$cid" python3 -m venv /opt/site-env
docker exec "$cid" /opt/site-env/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir \
  --no-index --find-links /wheelhouse torch==2.13.0
docker commit --change 'CMD ["sleep", "infinity"]' --change "LABEL $LABEL=$want" "$cid" "$IMAGE" >/dev/null
echo "site-env image $IMAGE: built in $(($(date +%s) - start)) s"
