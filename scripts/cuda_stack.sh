#!/usr/bin/env bash
# The CUDA torch stack for the CUDA build test, downloaded once per machine into a
# cache OUTSIDE the clone (fresh clones on the same machine reuse it):
#   $MULTINODE_TRAINING_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/multinode-training)/cuda-stack/
# It holds, as files pip installs with --no-index: torch 2.13.0 from PyPI (CUDA 13.0
# build, with its nvidia-* libraries: about 2.4 GB), DeepSpeed's runtime and build
# requirements (with nvidia-ml-py, which a CUDA build of it needs), the DeepSpeed sdist, and nvidia-cuda-cuobjdump (the test's
# cross-check of the project's fatbin reader). The machine's pip configuration is
# bypassed: a local find-links folder with a CPU torch would otherwise win.
# Redone only when the lists change (a stamp records them). Prints the folder.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${MULTINODE_TRAINING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multinode-training}
DEST="$CACHE/cuda-stack/wheels"
DS_VERSION=${DEEPSPEED_VERSION:-0.19.8}
CUOBJDUMP="nvidia-cuda-cuobjdump>=13.2"
# What a CUDA build of DeepSpeed needs beyond scripts/wheelhouse.txt (its wheel's metadata).
CUDA_EXTRA="nvidia-ml-py"
PY=${PYTHON:-python3}
stamp="$DEST/.stamp"
want="$(sha256sum scripts/wheelhouse.txt | cut -d' ' -f1) deepspeed==$DS_VERSION $CUOBJDUMP $CUDA_EXTRA"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "cuda stack $DEST: up to date, reused ($(du -sh "$DEST" | cut -f1))" >&2
  echo "$DEST"
  exit 0
fi
mkdir -p "$DEST"
echo "cuda stack $DEST: downloading torch 2.13.0 (CUDA 13.0) with its nvidia-* libraries from PyPI:" \
  "about 2.4 GB (skipped for files already there)" >&2
start=$(date +%s)
pypi() { env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
  "$PY" -m pip download -q --disable-pip-version-check --dest "$DEST" "$@" >&2; }
pypi --only-binary=:all: -r scripts/wheelhouse.txt $CUDA_EXTRA
pypi --no-deps --no-binary=:all: "deepspeed==$DS_VERSION"
pypi --no-deps --only-binary=:all: "$CUOBJDUMP"
ls "$DEST"/torch-2.13.0-*manylinux*.whl "$DEST/deepspeed-$DS_VERSION.tar.gz" "$DEST"/nvidia_cuda_cuobjdump-*.whl >/dev/null
echo "$want" >"$stamp"
echo "cuda stack $DEST: $(ls "$DEST" | wc -l) files, $(du -sh "$DEST" | cut -f1), $(( $(date +%s) - start )) s" >&2
echo "$DEST"
