#!/usr/bin/env bash
# The CUDA build for real, on this machine without a GPU: build_deepspeed.yml builds
# fused_adam for the explicit arch list 8.0;9.0+PTX against PyPI's CUDA torch and nvcc, then
#  - the GPU code in the op binary, read by the project's fatbin reader (what the
#    manifest records) and by cuobjdump, must be exactly what the arch list asked for:
#    SASS for 8.0 and 9.0, PTX for 9.0 only (+PTX on the highest, none for 8.0);
#  - a second run of the build changes nothing and compiles nothing;
#  - the wheelhouse for the nodes holds the CUDA torch stack;
#  - the wheel, installed from that wheelhouse into a clean venv, loads its prebuilt op
#    with DS_ACCELERATOR=cuda and no compiler on PATH, and ds_report lists it installed.
# Everything heavy lives in a cache outside the clone, reused by fresh clones on this
# machine: the CUDA stack (scripts/cuda_stack.sh, ~2.4 GB once), the build folder (venv
# with the CUDA torch, wheel; the role's build key decides a rebuild) and the check venv
# (redone when the wheel changes). One arch list is enough: its 8.0 (SASS, no PTX) beside
# 9.0+PTX shows that +PTX applies to its arch alone; a second list would be minutes more of
# nvcc on a 2-core host for nothing new (the build key's arch list is unit-tested).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/${VENV:-.venv}/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg"
# Ansible's default output: the checks below read its task banners (ansible.cfg's
# multinode.training.phases prints one line per phase).
export ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default
t0=$(date +%s)
CACHE=${MULTINODE_TRAINING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multinode-training}
WHEELS=$(bash scripts/cuda_stack.sh)
DS_VERSION=${DEEPSPEED_VERSION:-0.19.8}
# The modules read the cache as the only index: the machine's pip configuration
# (find-links with a CPU torch) must not take part.
export PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
echo "cuda stack ready: $(( $(date +%s) - t0 )) s"

# cuobjdump, from its PyPI wheel (the toolkit here has none).
tools="$CACHE/cuda-stack/tools"
if [ ! -x "$tools/cuobjdump" ]; then
  mkdir -p "$tools"
  python3 - "$tools" "$WHEELS"/nvidia_cuda_cuobjdump-*.whl <<'EOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[2]) as whl:
    member = next(n for n in whl.namelist() if n.endswith("/bin/cuobjdump"))
    with open(os.path.join(sys.argv[1], "cuobjdump"), "wb") as out:
        out.write(whl.read(member))
os.chmod(os.path.join(sys.argv[1], "cuobjdump"), 0o755)
EOF
fi

# build <slug> <arch list> <wheelhouse true|false> [venv of an earlier build to share]:
# prints the dist folder (a second arch list would share the first one's venv). A run that compiled (cold) or changed something (a stale apt
# index is refreshed) is followed by a second one, which must change nothing and
# compile nothing; a warm run that changed nothing is that proof itself.
build() {
  local slug=$1 arch=$2 wheelhouse=$3 shared=${4:-} dir="$CACHE/cuda-build/$1" run start recap compiled
  mkdir -p "$dir/work"
  # Builds run one after another: the second arch list compiles in the first one's
  # build venv (the same CUDA torch) instead of installing 2.4 GB of it again.
  if [ -n "$shared" ] && [ ! -e "$dir/work/venv" ]; then ln -s "$shared" "$dir/work/venv"; fi
  cat >"$dir/vars.json" <<EOF
{"deepspeed_build_accelerator": "cuda", "deepspeed_build_cuda_arch_list": "$arch",
 "deepspeed_build_ops": ["fused_adam"],
 "deepspeed_build_source": "local", "deepspeed_build_local_path": "$WHEELS/deepspeed-$DS_VERSION.tar.gz",
 "deepspeed_build_pip_args": ["--no-index", "--find-links", "$WHEELS"],
 "deepspeed_build_wheelhouse": $wheelhouse,
 "_deepspeed_build_workdir": "$dir/work", "_deepspeed_build_dist_dir": "$dir/dist"}
EOF
  for run in 1 2; do
    start=$(date +%s)
    ansible-playbook build_deepspeed.yml -e "@$dir/vars.json" >"$dir/run$run.log" 2>&1 \
      || { tail -60 "$dir/run$run.log" >&2; exit 1; }
    recap=$(grep -E '^localhost ' "$dir/run$run.log" | tr -s ' ')
    compiled=$(grep -q 'Build the wheel with ops' "$dir/run$run.log" && echo compiled || echo 'nothing compiled')
    echo "arch list '$arch' run $run: $(( $(date +%s) - start )) s, $compiled, $recap" >&2
    [ "$run" = 1 ] && [ "$compiled" = compiled ] && continue
    if ! grep -q 'changed=0 ' <<<"$recap" || [ "$compiled" = compiled ]; then
      echo "run $run of the CUDA build for '$arch' was not idempotent:" >&2
      grep -E '^changed:|TASK \[' "$dir/run$run.log" | grep -B1 '^changed' >&2 || true
      exit 1
    fi
    break
  done
  echo "$dir/dist"
}

# check_gpu_code <dist> <expected sass> <expected ptx>: reader, manifest and cuobjdump agree.
check_gpu_code() {
  local dist=$1 sass=$2 ptx=$3 tmp
  tmp=$(mktemp -d)
  python3 - "$dist" "$tmp" "$sass" "$ptx" "$tools/cuobjdump" <<'EOF'
import glob, json, re, subprocess, sys, zipfile
sys.path.insert(0, ".collections")
from ansible_collections.multinode.training.plugins.module_utils._build import fatbin as _fatbin
dist, tmp, sass, ptx, cuobjdump = sys.argv[1:]
want = {"sass": sass.split(",") if sass else [], "ptx": ptx.split(",") if ptx else []}
manifest_path, = glob.glob(dist + "/deepspeed-*.whl.manifest.json")
manifest = json.load(open(manifest_path))
op, = [o for o in manifest["ops"] if o["name"] == "fused_adam"]
with zipfile.ZipFile(dist + "/" + manifest["wheel"]) as whl:
    so = tmp + "/op.so"
    open(so, "wb").write(whl.read(op["file"]))
reader = _fatbin.read_coverage(open(so, "rb").read())
def listed(flag):
    out = subprocess.run([cuobjdump, flag, so], capture_output=True, text=True).stdout
    return sorted({"%d.%d" % divmod(int(n), 10) for n in re.findall(r"\.sm_(\d+)\.(?:cubin|ptx)", out)},
                  key=lambda a: tuple(map(int, a.split("."))))
tool = {"sass": listed("--list-elf"), "ptx": listed("--list-ptx")}
print("  %s: manifest %s, reader %s, cuobjdump %s" % (op["file"].split("/")[-1], op["cuda"], reader, tool))
for name, got in (("manifest", op["cuda"]), ("fatbin reader", reader), ("cuobjdump", tool)):
    if got != want:
        sys.exit("%s says fused_adam holds %s, expected %s" % (name, got, want))
EOF
  rm -rf "$tmp"
}

t=$(date +%s)
dist_a=$(build 80-90ptx "8.0;9.0+PTX" true)
echo "build '8.0;9.0+PTX': $(( $(date +%s) - t )) s"
check_gpu_code "$dist_a" "8.0,9.0" "9.0"

# The nodes' wheelhouse: the CUDA torch and its nvidia-* libraries.
ls "$dist_a"/wheelhouse/torch-2.13.0-*manylinux*.whl "$dist_a"/wheelhouse/nvidia_cublas-*.whl \
  "$dist_a"/wheelhouse/nvidia_cudnn_cu13-*.whl >/dev/null
echo "wheelhouse $dist_a/wheelhouse: $(ls "$dist_a"/wheelhouse/*.whl | wc -l) wheels, $(du -sh "$dist_a/wheelhouse" | cut -f1)"

# A clean venv from the wheelhouse alone, redone when the wheel changes.
t=$(date +%s)
wheel=$(ls "$dist_a"/deepspeed-*.whl)
sha=$(sha256sum "$wheel" | cut -d' ' -f1)
venv="$CACHE/cuda-build/80-90ptx/check-venv"
if [ "$(cat "$venv/.wheel_sha256" 2>/dev/null)" != "$sha" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # --no-compile: this venv only loads one op; byte-compiling torch's files is CPU for nothing
  "$venv/bin/python" -m pip install -q --no-compile --no-index --find-links "$dist_a/wheelhouse" "$wheel"
  echo "$sha" >"$venv/.wheel_sha256"
fi
ext=$(mktemp -d)
# No compiler, no nvcc, no CUDA_HOME: only the venv's own commands (env -i drops CC, CXX,
# CUDA_HOME...). Commands run by absolute path: that PATH holds no sh, no env.
run_clean() { env -i HOME="$HOME" PATH="$venv/bin" DS_ACCELERATOR=cuda TORCH_EXTENSIONS_DIR="$ext" "$@"; }
# Asked first by the very python that loads the op, on its own PATH: a JIT build needs a host
# C/C++ compiler from PATH (torch runs c++, nvcc runs gcc; torch may still guess CUDA_HOME
# /usr/local/cuda for nvcc itself), so none may be found there, nor nvcc, nor a variable
# naming one. Python, not `sh -c 'command -v ...'`: that PATH has no sh, so env would fail
# with 127 and the check could never fire.
no_compiler='
import os, shutil, sys
found = {n: shutil.which(n) for n in ("c++", "g++", "gcc", "cc", "clang", "clang++", "nvcc")}
found = {n: p for n, p in found.items() if p}
named = {k: v for k, v in os.environ.items() if k in ("CC", "CXX", "CUDAHOSTCXX", "NVCC_CCBIN", "CUDA_HOME", "CUDA_PATH")}
if found or named:
    sys.exit("a compiler is reachable from the clean environment (PATH=%s): %s" % (os.environ.get("PATH"), dict(found, **named)))
print("  no compiler on the clean PATH (%s)" % os.environ.get("PATH"))
'
run_clean "$venv/bin/python" -c "$no_compiler"'
from deepspeed.accelerator import get_accelerator
from deepspeed.git_version_info import installed_ops
acc = get_accelerator()
assert acc._name == "cuda", acc._name
assert installed_ops.get("fused_adam"), installed_ops
mod = acc.create_op_builder("FusedAdamBuilder").load()
assert mod.__file__.startswith("'"$venv"'"), mod.__file__
print("  fused_adam loaded from", mod.__file__)
'
report=$(run_clean "$venv/bin/ds_report" 2>&1) || { echo "$report" >&2; exit 1; }
line=$(grep -E '^fused_adam ' <<<"$report" | sed 's/\x1b\[[0-9;]*m//g' || true)
echo "  ds_report: $line"
grep -q '\[YES\]' <<<"$line" \
  || { echo "ds_report does not list fused_adam installed:" >&2; echo "$report" >&2; exit 1; }
if [ -n "$(ls -A "$ext")" ]; then echo "loading JIT-compiled: $(ls -A "$ext")" >&2; exit 1; fi
rm -rf "$ext"
echo "clean venv check: $(( $(date +%s) - t )) s"

# The node side's contract with this CUDA torch (its NCCL recorder included), in the same clean venv.
t=$(date +%s)
run_clean "$venv/bin/python" scripts/check_torch_contract.py | sed 's/^/  /' || exit 1
echo "torch contract (CUDA wheel): $(( $(date +%s) - t )) s"
echo "CUDA build test passed in $(( $(date +%s) - t0 )) s"
