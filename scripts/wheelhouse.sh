#!/usr/bin/env bash
# Host-side wheelhouse for container nodes: torch 2.13.0 (CPU) and the
# pure-Python dependencies as wheels, plus the DeepSpeed sdist. Molecule mounts
# it read-only at /wheelhouse so nodes install with --no-index, like an offline
# cluster would. Rebuilt only when scripts/wheelhouse.txt or the DeepSpeed
# version changes (a stamp file records both).
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=${WHEELHOUSE:-.cache/wheelhouse}
DS_VERSION=${DEEPSPEED_VERSION:-0.19.8}
PY=${PYTHON:-python3}
stamp="$DEST/.stamp"
want="$(sha256sum scripts/wheelhouse.txt | cut -d' ' -f1) deepspeed==$DS_VERSION"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "wheelhouse $DEST: up to date, reused"
  exit 0
fi
mkdir -p "$DEST"
echo "wheelhouse $DEST: downloading (torch from the local CPU wheel where pip finds one)"
"$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: \
  -r scripts/wheelhouse.txt -d "$DEST" 2>&1 | grep -v "^WARNING: Location" || true
# The sdist alone: its metadata step imports torch, so no dependency resolution.
"$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: \
  "deepspeed==$DS_VERSION" -d "$DEST" 2>&1 | grep -v "^WARNING: Location" || true
ls "$DEST"/torch-2.13.0*.whl "$DEST/deepspeed-$DS_VERSION.tar.gz" >/dev/null
echo "$want" >"$stamp"
echo "wheelhouse $DEST: $(ls "$DEST" | wc -l) files, $(du -sh "$DEST" | cut -f1)"
