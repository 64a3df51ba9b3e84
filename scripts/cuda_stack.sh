#!/usr/bin/env bash
# The CUDA torch stacks for the CUDA build test, downloaded once per machine into a
# cache OUTSIDE the clone (fresh clones on the same machine reuse it):
#   $MULTINODE_TRAINING_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/multinode-training)/cuda-stack/
# Usage: cuda_stack.sh [13|12] (the CUDA major; default 13). Prints the wheels folder.
#  13: wheels/ holds, as files pip installs with --no-index: torch 2.13.0 from PyPI (CUDA 13.0
#      build, with its nvidia-* libraries: about 2.4 GB), DeepSpeed's runtime and build
#      requirements (scripts/wheelhouse.txt, with nvidia-ml-py, which a CUDA build of it needs),
#      the DeepSpeed sdist, and nvidia-cuda-cuobjdump (the test's cross-check of the project's
#      fatbin reader). The toolkit is the machine's nvcc 13.0.
#  12: wheels-cu12/ holds the same with torch 2.10.0 (PyPI's CUDA 12.8 build, with its
#      nvidia-*-cu12 libraries: about 3.9 GB) in place of torch 2.13.0; beside it cuda-12.4/, a
#      CUDA 12.4.1 toolkit shaped like /usr/local/cuda-13.0 (bin/nvcc, include/, lib/, nvvm/).
#      PyPI has no CUDA 12 nvcc: its nvidia-cuda-nvcc-cu12 wheels hold ptxas, libnvvm,
#      libdevice and the crt headers only. So the compiler driver and the programs it runs
#      (nvcc, cicc, cudafe++, fatbinary, nvlink, bin2c) come from Debian 13's non-free
#      nvidia-cuda-toolkit 12.4.131 (apt-get download, into a private apt folder: the machine's
#      apt sources are not touched), the headers, libcudart and ptxas/libnvvm/libdevice from
#      PyPI's nvidia-*-cu12 wheels of the same release (12.4.131 / 12.4.127). CUDA 12.4 is
#      the newest CUDA 12 compiler driver either registry has (Debian experimental's 12.5
#      aside); DeepSpeed accepts 12.4 nvcc against torch's 12.8 (cuda_minor_mismatch_ok).
# The machine's pip configuration is bypassed: a local find-links folder with a CPU torch
# would otherwise win. Redone only when the lists change (a stamp records them).
set -euo pipefail
cd "$(dirname "$0")/.."

MAJOR=${1:-13}
CACHE=${MULTINODE_TRAINING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multinode-training}
DS_VERSION=${DEEPSPEED_VERSION:-0.19.8}
CUOBJDUMP="nvidia-cuda-cuobjdump>=13.2"
# What a CUDA build of DeepSpeed needs beyond scripts/wheelhouse.txt (its wheel's metadata).
CUDA_EXTRA="nvidia-ml-py"
PY=${PYTHON:-python3}
case $MAJOR in
  13) DEST="$CACHE/cuda-stack/wheels" TORCH=2.13.0 WHAT="torch 2.13.0 (CUDA 13.0)" SIZE="about 2.4 GB" ;;
  12) DEST="$CACHE/cuda-stack/wheels-cu12" TORCH=2.10.0 WHAT="torch 2.10.0 (CUDA 12.8)" SIZE="about 3.9 GB" ;;
  *) echo "usage: $0 [13|12]" >&2; exit 2 ;;
esac
# The CUDA 12 toolkit: PyPI's pieces, and the Debian package with the compiler driver.
TOOLKIT="$CACHE/cuda-stack/cuda-12.4"
TK_WHEELS="nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127 nvidia-cuda-cccl-cu12==12.4.127.post1"
TK_DEB="nvidia-cuda-toolkit/trixie" TK_DEB_VERSION="12.4.131~"
stamp="$DEST/.stamp"
want="$(sha256sum scripts/wheelhouse.txt | cut -d' ' -f1) deepspeed==$DS_VERSION $CUOBJDUMP $CUDA_EXTRA"
[ "$MAJOR" = 12 ] && want="$want torch==$TORCH $TK_WHEELS $TK_DEB $TK_DEB_VERSION"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && { [ "$MAJOR" = 13 ] || [ -x "$TOOLKIT/bin/nvcc" ]; }; then
  echo "cuda stack $DEST: up to date, reused ($(du -sh "$DEST" | cut -f1))" >&2
  echo "$DEST"
  exit 0
fi
mkdir -p "$DEST"
echo "cuda stack $DEST: downloading $WHAT with its nvidia-* libraries from PyPI:" \
  "$SIZE (skipped for files already there)" >&2
start=$(date +%s)
pip_() { env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
  "$PY" -m pip "$@" -q --disable-pip-version-check >&2; }
pypi() { pip_ download --dest "$DEST" "$@"; }
if [ "$MAJOR" = 13 ]; then
  pypi --only-binary=:all: -r scripts/wheelhouse.txt $CUDA_EXTRA
  pypi --no-deps --no-binary=:all: "deepspeed==$DS_VERSION"
  pypi --no-deps --only-binary=:all: "$CUOBJDUMP"
  ls "$DEST"/torch-2.13.0-*manylinux*.whl "$DEST/deepspeed-$DS_VERSION.tar.gz" "$DEST"/nvidia_cuda_cuobjdump-*.whl >/dev/null
else
  # scripts/wheelhouse.txt with its torch line for torch $TORCH.
  reqs="$CACHE/cuda-stack/wheelhouse-cu12.txt"
  sed "s/^torch==.*/torch==$TORCH/" scripts/wheelhouse.txt >"$reqs"
  grep -qx "torch==$TORCH" "$reqs"
  pypi --only-binary=:all: -r "$reqs" $CUDA_EXTRA
  pypi --no-deps --no-binary=:all: "deepspeed==$DS_VERSION"
  ls "$DEST/torch-$TORCH-"*manylinux*.whl "$DEST/deepspeed-$DS_VERSION.tar.gz" >/dev/null
fi

if [ "$MAJOR" = 12 ]; then
  echo "cuda toolkit $TOOLKIT: assembling CUDA 12.4.1 from PyPI ($TK_WHEELS) and Debian ($TK_DEB)" >&2
  parts="$CACHE/cuda-stack/cuda-12.4-parts" tmp="$TOOLKIT.tmp"
  rm -rf "$parts" "$tmp"
  mkdir -p "$parts/apt/lists/partial" "$parts/apt/cache/archives/partial" "$tmp/bin/crt" "$tmp/nvvm/bin" \
    "$tmp/dist-info" "$tmp/targets/x86_64-linux"
  # shellcheck disable=SC2086 # TK_WHEELS is a list
  pip_ download --dest "$parts" --no-deps --only-binary=:all: $TK_WHEELS
  # Debian 13's non-free index, in a private apt folder; the machine's sources stay as they are.
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie non-free" \
    >"$parts/apt/sources.list"
  apt=(-o "Dir::Etc::sourcelist=$parts/apt/sources.list" -o Dir::Etc::sourceparts=/nonexistent
    -o "Dir::State::Lists=$parts/apt/lists" -o "Dir::Cache=$parts/apt/cache" -o APT::Sandbox::User=root)
  apt-get "${apt[@]}" -q update >&2
  (cd "$parts" && apt-get "${apt[@]}" -q download "$TK_DEB" >&2)
  deb=$(ls "$parts"/nvidia-cuda-toolkit_*.deb)
  case "$(dpkg-deb -f "$deb" Version)" in "$TK_DEB_VERSION"*) ;; *)
    echo "$deb is not CUDA $TK_DEB_VERSION, which the PyPI pieces are" >&2; exit 1 ;; esac
  dpkg-deb -x "$deb" "$parts/deb"
  pip_ install --root-user-action=ignore --no-deps --no-index --no-compile --target "$parts/py" "$parts"/nvidia_*.whl
  # PyPI: include/ (runtime, crt, cccl), lib/libcudart.so.12, bin/ptxas, nvvm/{lib64,libdevice,include}.
  for pkg in "$parts"/py/nvidia/cuda_*/; do cp -a "$pkg"/. "$tmp"/; done
  mv "$parts"/py/nvidia_*.dist-info "$tmp/dist-info/"
  find "$tmp" \( -name __init__.py -o -name __pycache__ \) -prune -exec rm -rf {} +
  # Debian: the compiler driver and the programs it runs (the same 12.4.131 release).
  cp -a "$parts"/deb/usr/lib/nvidia-cuda-toolkit/bin/nvcc "$tmp/bin/"
  cp -a "$parts"/deb/usr/lib/nvidia-cuda-toolkit/bin/crt/. "$tmp/bin/crt/"
  cp -a "$parts"/deb/usr/lib/nvidia-cuda-toolkit/bin/cicc "$tmp/nvvm/bin/"
  for prog in cudafe++ fatbinary nvlink bin2c __nvcc_device_query; do cp -a "$parts/deb/usr/bin/$prog" "$tmp/bin/"; done
  cp -a "$parts"/deb/usr/share/doc/nvidia-cuda-toolkit/copyright "$tmp/dist-info/nvidia-cuda-toolkit.copyright"
  # Debian's nvcc.profile names its /usr paths; this one, the toolkit's own layout (as cuda-13.0's).
  cat >"$tmp/bin/nvcc.profile" <<'EOF'

TOP              = $(_HERE_)/..

NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice

LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):

INCLUDES        +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)

LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)/stubs" "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"

CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
  ln -s libcudart.so.12 "$tmp/lib/libcudart.so"
  ln -s lib "$tmp/lib64"
  ln -s ../../include "$tmp/targets/x86_64-linux/include"
  ln -s ../../lib "$tmp/targets/x86_64-linux/lib"
  "$tmp/bin/nvcc" --version | grep -q "release 12.4," || { "$tmp/bin/nvcc" --version >&2; exit 1; }
  rm -rf "$TOOLKIT" "$parts"
  mv "$tmp" "$TOOLKIT"
  echo "cuda toolkit $TOOLKIT: $(du -sh "$TOOLKIT" | cut -f1)" >&2
fi
echo "$want" >"$stamp"
echo "cuda stack $DEST: $(ls "$DEST" | wc -l) files, $(du -sh "$DEST" | cut -f1), $(( $(date +%s) - start )) s" >&2
echo "$DEST"
