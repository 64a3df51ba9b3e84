#!/usr/bin/env bash
# The CUDA build for real, on this machine without a GPU, with two toolkits: build_deepspeed.yml
# builds fused_adam
#  A. for the explicit arch list 8.0;9.0+PTX with the machine's nvcc 13.0 against PyPI's torch
#     2.13.0 (CUDA 13.0);
#  B. for 7.0;8.0+PTX with a CUDA 12.4 toolkit (scripts/cuda_stack.sh 12; its nvcc first on
#     PATH, CUDA_HOME set) against PyPI's torch 2.10.0 (CUDA 12.8). CUDA 13 refuses sm_70, so
#     B's binary proves that the CUDA 12 toolkit compiled it, and its manifest must say nvcc
#     12.4, torch CUDA 12.8 (a pair DeepSpeed accepts). 12.4, not 12.8: no registry this
#     project reaches has a CUDA 12.8 nvcc (scripts/cuda_stack.sh says why).
# For each, then:
#  - the GPU code in the op binary, read by the project's fatbin reader (what the
#    manifest records) and by cuobjdump 13, must be exactly what the arch list asked for:
#    SASS for both archs, PTX for the highest only (+PTX on it, none for the lower one);
#  - a second run of the build changes nothing and compiles nothing;
#  - the wheelhouse for the nodes holds that CUDA torch stack;
#  - the wheel, installed from that wheelhouse into a clean venv, loads its prebuilt op
#    with DS_ACCELERATOR=cuda and no compiler on PATH, and ds_report lists it installed;
#  - scripts/check_torch_contract.py passes in that venv.
# Everything heavy lives in a cache outside the clone, reused by fresh clones on this
# machine: the CUDA stacks (scripts/cuda_stack.sh: ~2.4 GB once for 13, ~4 GB for 12 with its
# toolkit), the build folders (venv with the CUDA torch, wheel; the role's build key decides a
# rebuild) and the check venvs (redone when the wheel changes). In each arch list the lower
# arch (SASS, no PTX) beside the +PTX one shows that +PTX applies to its arch alone.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/${VENV:-.venv}/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg"
# Ansible's default output: the checks below read its task banners (ansible.cfg's
# multinode.training.phases prints one line per phase).
export ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default
t0=$(date +%s)
CACHE=${MULTINODE_TRAINING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multinode-training}
WHEELS=$(bash scripts/cuda_stack.sh 13)
WHEELS12=$(bash scripts/cuda_stack.sh 12)
CUDA12="$CACHE/cuda-stack/cuda-12.4"
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

# build <slug> <arch list> <wheelhouse true|false> <wheels folder> [torch requirement] [CUDA toolkit]:
# prints the dist folder. Without a torch requirement the role's default (auto: torch 2.13.0,
# here PyPI's CUDA 13.0 build) is built against. A toolkit, when given, is the build's: its
# bin/ first on PATH (the role takes nvcc from PATH before $CUDA_HOME) and CUDA_HOME. A run
# that compiled (cold) or changed something (a stale apt index is refreshed) is followed by a
# second one, which must change nothing and compile nothing; a warm run that changed nothing
# is that proof itself.
build() {
  local slug=$1 arch=$2 wheelhouse=$3 wheels=$4 torch=${5:-} toolkit=${6:-} dir="$CACHE/cuda-build/$1" run start recap compiled
  local torch_var="" toolkit_env=()
  [ -z "$torch" ] || torch_var=$'\n'" \"deepspeed_build_torch_requirement\": \"$torch\","
  [ -z "$toolkit" ] || toolkit_env=(PATH="$toolkit/bin:$PATH" CUDA_HOME="$toolkit")
  mkdir -p "$dir/work"
  cat >"$dir/vars.json" <<EOF
{"deepspeed_build_accelerator": "cuda", "deepspeed_build_cuda_arch_list": "$arch",$torch_var
 "deepspeed_build_ops": ["fused_adam"],
 "deepspeed_build_source": "local", "deepspeed_build_local_path": "$wheels/deepspeed-$DS_VERSION.tar.gz",
 "deepspeed_build_pip_args": ["--no-index", "--find-links", "$wheels"],
 "deepspeed_build_wheelhouse": $wheelhouse,
 "_deepspeed_build_workdir": "$dir/work", "_deepspeed_build_dist_dir": "$dir/dist"}
EOF
  for run in 1 2; do
    start=$(date +%s)
    env "${toolkit_env[@]}" ansible-playbook build_deepspeed.yml -e "@$dir/vars.json" >"$dir/run$run.log" 2>&1 \
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

# check_gpu_code <dist> <expected sass> <expected ptx> [manifest's nvcc release] [its torch CUDA]:
# reader, manifest and cuobjdump agree.
check_gpu_code() {
  local dist=$1 sass=$2 ptx=$3 nvcc=${4:-} torch_cuda=${5:-} tmp
  tmp=$(mktemp -d)
  python3 - "$dist" "$tmp" "$sass" "$ptx" "$tools/cuobjdump" "$nvcc" "$torch_cuda" <<'EOF'
import glob, json, re, subprocess, sys, zipfile
sys.path.insert(0, ".collections")
from ansible_collections.multinode.training.plugins.module_utils._build import fatbin as _fatbin
dist, tmp, sass, ptx, cuobjdump, nvcc, torch_cuda = sys.argv[1:]
want = {"sass": sass.split(",") if sass else [], "ptx": ptx.split(",") if ptx else []}
manifest_path, = glob.glob(dist + "/deepspeed-*.whl.manifest.json")
manifest = json.load(open(manifest_path))
if nvcc:
    got = (manifest["cuda"]["nvcc"], manifest["torch"]["cuda"])
    print("  manifest: nvcc %s, torch %s (CUDA %s)" % (got[0], manifest["torch"]["version"], got[1]))
    if got != (nvcc, torch_cuda):
        sys.exit("the manifest says nvcc %s, torch CUDA %s; expected %s, %s" % (got + (nvcc, torch_cuda)))
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

# check_wheel <slug> <dist> <label>: a clean venv from the wheelhouse alone, redone when the
# wheel changes, loads the prebuilt op with no compiler; then the torch contract in that venv.
check_wheel() {
  local dist=$2 label=$3 venv="$CACHE/cuda-build/$1/check-venv" t wheel sha ext report line
  t=$(date +%s)
  wheel=$(ls "$dist"/deepspeed-*.whl)
  sha=$(sha256sum "$wheel" | cut -d' ' -f1)
  if [ "$(cat "$venv/.wheel_sha256" 2>/dev/null)" != "$sha" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    # --no-compile: this venv only loads one op; byte-compiling torch's files is CPU for nothing
    "$venv/bin/python" -m pip install -q --no-compile --no-index --find-links "$dist/wheelhouse" "$wheel"
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
  local no_compiler='
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
  echo "torch contract ($label): $(( $(date +%s) - t )) s"
}

# A. nvcc 13.0, torch 2.13.0 (CUDA 13.0).
t=$(date +%s)
dist_a=$(build 80-90ptx "8.0;9.0+PTX" true "$WHEELS")
echo "build '8.0;9.0+PTX': $(( $(date +%s) - t )) s"
check_gpu_code "$dist_a" "8.0,9.0" "9.0"

# The nodes' wheelhouse: the CUDA torch and its nvidia-* libraries.
ls "$dist_a"/wheelhouse/torch-2.13.0-*manylinux*.whl "$dist_a"/wheelhouse/nvidia_cublas-*.whl \
  "$dist_a"/wheelhouse/nvidia_cudnn_cu13-*.whl >/dev/null
echo "wheelhouse $dist_a/wheelhouse: $(ls "$dist_a"/wheelhouse/*.whl | wc -l) wheels, $(du -sh "$dist_a/wheelhouse" | cut -f1)"
check_wheel 80-90ptx "$dist_a" "CUDA wheel"

# B. The CUDA 12.4 toolkit, torch 2.10.0 (CUDA 12.8): sm_70, which nvcc 13 refuses.
t=$(date +%s)
dist_b=$(build 70-80ptx-cu12 "7.0;8.0+PTX" true "$WHEELS12" torch==2.10.0 "$CUDA12")
echo "build '7.0;8.0+PTX' (CUDA 12.4): $(( $(date +%s) - t )) s"
check_gpu_code "$dist_b" "7.0,8.0" "8.0" 12.4 12.8
ls "$dist_b"/wheelhouse/torch-2.10.0-*manylinux*.whl "$dist_b"/wheelhouse/nvidia_cublas_cu12-*.whl \
  "$dist_b"/wheelhouse/nvidia_cudnn_cu12-*.whl "$dist_b"/wheelhouse/nvidia_nccl_cu12-*.whl >/dev/null
echo "wheelhouse $dist_b/wheelhouse: $(ls "$dist_b"/wheelhouse/*.whl | wc -l) wheels, $(du -sh "$dist_b/wheelhouse" | cut -f1)"
check_wheel 70-80ptx-cu12 "$dist_b" "CUDA 12 wheel"
# Its wheels lie three times on disk (the stack, the build's wheelhouse, its copy in dist/) and
# torch with its nvidia-* libraries twice (build venv, check venv): ~26 GB. Identical files of
# 1 MB or more become hard links of one (-t: pip wrote them at different times): ~12 GB. Every
# writer here replaces files (pip, the role's fetch), none writes into one in place.
t=$(date +%s)
saved=$(hardlink -t -s 1M "$WHEELS12" "$CACHE/cuda-build/70-80ptx-cu12" | sed -n 's/^Saved: *//p')
echo "duplicates hard-linked: ${saved:-nothing} saved, $(( $(date +%s) - t )) s"
echo "CUDA build test passed in $(( $(date +%s) - t0 )) s"
