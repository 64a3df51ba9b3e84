#!/usr/bin/env bash
# The GPU check in one call, for a borrowed GPU machine: CPython 3.12 with torch (a CUDA build),
# nvcc, accelerate, ninja, pyyaml and jinja2 installed, no package index (scripts/gpu_image.txt).
# Run from the repository root with .gpu/ (make gpu-bundle) carried:
#
#   OUT=/some/dir bash scripts/gpu_check.sh
#
# One line per check (PASS / FAIL / STOP, seconds, what was seen); the summary goes to $OUT
# (at most 8 files: summary.json, checks.txt, build.log, job.log, report.html, manifest.json,
# samples.jsonl). Steps:
#   bundle   the bundle installs offline into a venv over this python (its torch stays the one
#            used); on another Python than 3.12, its completeness is checked instead
#   byo      build_deepspeed.yml against the torch already installed (no torch downloaded, offline:
#            deepspeed_build_torch_requirement="" and the bundle's source and wheels)
#   gpu      nvidia-smi lists a GPU (without one the script stops here, with one line, rc 0)
#   cuda     the same build with the CUDA accelerator for this GPU's arch, ops fused_adam and cpu_adam
#   coverage the wheel's manifest holds SASS for this GPU's compute capability
#   install  the wheel installed into that environment, offline
#   job      train.yml on localhost with NCCL: FusedAdam stepping on the GPU with ZeRO-2 and an empty
#            TORCH_EXTENSIONS_DIR (no JIT build), the fabric check's NCCL probe, the NCCL fabric
#            detection, the report with the sampler's GPU columns, and (samples) the NCCL flight recorder's
#            status and blocks with GPU durations (TORCH_NCCL_ENABLE_TIMING=1) in the ranks' samples
#   contract scripts/check_torch_contract.py with the environment's torch (every machine, GPU or not)
# Without a GPU (CI, make test) the first two steps run on the CPU: the bring-your-own-torch build
# with DS_ACCELERATOR=cpu against a venv that has the host wheelhouse's torch preinstalled.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUNDLE=${GPU_BUNDLE:-$ROOT/.gpu}
OUT=${OUT:-$ROOT/.cache/gpu-check/out}
WORK=${GPU_CHECK_WORK:-$ROOT/.cache/gpu-check}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
: >"$OUT/checks.txt"
START=$(date +%s)
failed=0

line() {  # status name seconds text
  printf '%-5s %-9s %5ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$OUT/checks.txt"
}
step() {  # name command...: runs it, its output to $WORK/<name>.log; PASS/FAIL line from its last line
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@" >"$WORK/$name.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    line PASS "$name" $(($(date +%s) - t0)) "$(tail -n 1 "$WORK/$name.log")"
  else
    failed=1
    line FAIL "$name" $(($(date +%s) - t0)) "rc $rc: $(grep -E 'FAILED!|fatal:|Error|error:' "$WORK/$name.log" | tail -n 1 | cut -c1-300)"
  fi
  return "$rc"
}
summary() {
  "$PY" - "$OUT" "$START" <<'PY'
import json, os, re, sys, time
out, start = sys.argv[1], int(sys.argv[2])
checks = []
for text in open(os.path.join(out, "checks.txt")):
    m = re.match(r"(\S+)\s+(\S+)\s+(\d+)s  (.*)", text.rstrip("\n"))
    if m:
        checks.append({"status": m.group(1), "check": m.group(2), "seconds": int(m.group(3)), "seen": m.group(4)})
versions = {}
try:
    import torch
    versions.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                    gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
except Exception as exc:  # a summary names what it could not read
    versions["torch"] = "not importable: %s" % exc
versions["python"] = sys.version.split()[0]
json.dump({"checks": checks, "versions": versions, "seconds": int(time.time()) - start}, open(
    os.path.join(out, "summary.json"), "w"), indent=1)
PY
}

PY=$PYTHON
pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# ---- bundle: the controller's ansible, offline
if [ "$pyver" = 3.12 ]; then
  VENV=$WORK/venv
  step bundle bash -c '
    set -e
    [ -x "$1/bin/python" ] || "$2" -m venv --system-site-packages "$1"
    "$1/bin/python" -m pip install --quiet --no-index --find-links "$3/wheels" -r "$3/requirements.txt"
    mkdir -p "$4/collections" && tar xzf "$3/collections.tar.gz" -C "$4/collections"
    echo "installed $(ls "$3/wheels" | wc -l) wheels offline into $1 (over $2, torch $("$1/bin/python" -c "import torch; print(torch.__version__)"))"
  ' _ "$VENV" "$PYTHON" "$BUNDLE" "$WORK" || { summary; exit 1; }
  ENV_PYTHON=$PYTHON
  WHEELS=$BUNDLE/wheels
else
  # Not the GPU machine's Python: prove the bundle complete for it, run the rest with this clone's
  # .venv (make venv) and a venv that has torch preinstalled from the host wheelhouse, offline.
  VENV=$ROOT/.venv
  WHEELS=$ROOT/.cache/wheelhouse
  step bundle "$VENV/bin/python" scripts/gpu_bundle.py check "$BUNDLE" || { summary; exit 1; }
  step byo-env bash -c '
    set -e
    [ -x "$1/bin/python" ] || "$2" -m venv "$1"
    "$1/bin/python" -m pip install --quiet --no-compile --no-index --find-links "$3" torch
    echo "a venv with torch $("$1/bin/python" -c "import torch; print(torch.__version__)") preinstalled: $1"
  ' _ "$WORK/env" "$PYTHON" "$WHEELS" || { summary; exit 1; }
  ENV_PYTHON=$WORK/env/bin/python
  mkdir -p "$WORK/collections"
fi
PY=$VENV/bin/python
# The node side's contract with the torch the job uses (scripts/check_torch_contract.py): the recorders' names and
# keywords, the sampler reading them, the fakes against them.
step contract "$ENV_PYTHON" scripts/check_torch_contract.py || failed=1
export PATH=$VENV/bin:$PATH
export ANSIBLE_CONFIG=$ROOT/ansible.cfg
# Ansible's default output: a failed step's line greps its `fatal:`/`FAILED!` lines.
export ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default
export ANSIBLE_COLLECTIONS_PATH=$ROOT/.collections:$WORK/collections
SDIST=$(ls "$BUNDLE"/deepspeed-*.tar.gz 2>/dev/null | head -n 1)

build() {  # dist dir, accelerator, ops (JSON list), arch list
  ansible-playbook build_deepspeed.yml \
    -e deepspeed_build_torch_requirement= -e "deepspeed_build_python=$ENV_PYTHON" \
    -e deepspeed_build_source=local -e "deepspeed_build_local_path=$SDIST" \
    -e "{\"deepspeed_build_pip_args\": [\"--no-index\", \"--find-links\", \"$WHEELS\"]}" \
    -e deepspeed_build_accelerator="$2" -e "{\"deepspeed_build_ops\": $3}" \
    -e "deepspeed_build_cuda_arch_list=$4" -e deepspeed_build_wheelhouse=false \
    -e "_deepspeed_build_dist_dir=$1" -e "_deepspeed_build_workdir=$WORK/build" &&
  "$PY" - "$1" "$ENV_PYTHON" "$WORK/build" <<'PY'
import glob, json, os, subprocess, sys
dist, env_python, work = sys.argv[1:4]
[manifest] = sorted(glob.glob(os.path.join(dist, "*.manifest.json")))[-1:]
data = json.load(open(manifest))
torch = subprocess.run([env_python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                       text=True, check=True).stdout.strip()
own = glob.glob(os.path.join(work, "**", "site-packages", "torch"), recursive=True)
assert not own, "the build downloaded a torch of its own: %s" % own
assert data["torch"]["version"] == torch, "built against torch %s, the environment has %s" % (
    data["torch"]["version"], torch)
print("%s: ops %s against the installed torch %s, no torch downloaded" % (
    data["wheel"], ", ".join(op["name"] for op in data["ops"]), torch))
PY
}

# ---- byo: the build against the installed torch, on the CPU (the GPU machine's CPU too).
# cpu_adagrad: one source file (cpu_adam has two): what is checked is the build against the
# installed torch, not the op; make wheel builds cpu_adam.
if [ "$pyver" != 3.12 ]; then
  step byo build "$WORK/dist-cpu" cpu '["cpu_adagrad"]' auto || { summary; exit 1; }
fi

# ---- gpu: the first step that needs one
t0=$(date +%s)
cc=$(nvidia-smi --query-gpu=compute_cap,name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$cc" ]; then
  line STOP gpu $(($(date +%s) - t0)) "no GPU here (nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'lists none' || echo 'not found')): the CUDA build, FusedAdam job and NCCL checks need one"
  summary
  exit "$failed"
fi
arch=${cc%%,*}
line PASS gpu $(($(date +%s) - t0)) "$cc"

step cuda build "$WORK/dist-cuda" cuda '["fused_adam", "cpu_adam"]' "$arch" || { summary; exit 1; }
cp "$(ls "$WORK"/dist-cuda/*.manifest.json | tail -n 1)" "$OUT/manifest.json"
tail -n 200 "$WORK/cuda.log" >"$OUT/build.log"

step coverage "$PY" - "$OUT/manifest.json" "$arch" <<'PY'
import json, sys
manifest, arch = json.load(open(sys.argv[1])), sys.argv[2]
ops = dict((op["name"], op) for op in manifest.get("ops", []))
assert "fused_adam" in ops, "fused_adam not in the wheel: %s" % sorted(ops)
missing = [name for name, op in ops.items() if op.get("cuda") and arch not in op["cuda"].get("sass", [])]
assert not missing, "no SASS for %s in %s" % (arch, missing)
print("SASS for %s in every CUDA op (%s); ops %s" % (
    arch, ", ".join(n for n, op in ops.items() if op.get("cuda")), ", ".join(sorted(ops))))
PY

step install "$ENV_PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" --force-reinstall --no-deps \
  "$(ls "$WORK"/dist-cuda/deepspeed-*.whl | tail -n 1)" || { summary; exit 1; }

JOB=gpu-check-$(date +%s)
EXT=$WORK/torch-extensions
rm -rf "$EXT" && mkdir -p "$EXT"
step job ansible-playbook train.yml --skip-tags prepare \
  -e "train_job_id=$JOB" -e "train_python=$ENV_PYTHON" -e train_allow_root=true -e train_user=root \
  -e train_nproc_per_node=1 -e train_fabric_check=warn \
  -e '{"train_args": ["--steps", "50", "--zero-stage", "2", "--optimizer", "fused_adam"]}' \
  -e "{\"train_env\": {\"TORCH_EXTENSIONS_DIR\": \"$EXT\", \"TORCH_NCCL_ENABLE_TIMING\": \"1\"}}"
grep -h 'smoke:' "$WORK/job.log" | tail -n 60 >"$OUT/job.log"
[ -f "runs/$JOB/report.html" ] && cp "runs/$JOB/report.html" "$OUT/report.html"
find "runs/$JOB" -name '*.jsonl' -path '*samples*' 2>/dev/null | head -n 1 | xargs -r -I{} cp {} "$OUT/samples.jsonl"

t0=$(date +%s)
if grep -q 'optimizer=FusedAdam zero_stage=2 jit_build=none' "$WORK/job.log" && [ -z "$(ls -A "$EXT")" ]; then
  line PASS fusedadam $(($(date +%s) - t0)) "FusedAdam stepped with ZeRO-2, $EXT still empty"
else
  failed=1
  line FAIL fusedadam $(($(date +%s) - t0)) "no 'optimizer=FusedAdam ... jit_build=none' line, or $EXT not empty: $(ls -A "$EXT" | head -c 200)"
fi
step samples "$PY" - "$OUT/samples.jsonl" <<'PY'
import json, sys
rows = [json.loads(text) for text in open(sys.argv[1]) if text.strip()]
gpus = [row["gpus"] for row in rows if row.get("gpus")]
assert gpus, "none of %d samples holds the GPUs' columns (nvidia-smi %s)" % (len(rows), "index,util,mem")
# NCCL's flight recorder: the status of its process groups (keys without /cpu: the NCCL recorder's), collectives
# completed, and with TORCH_NCCL_ENABLE_TIMING=1 each block's mean GPU duration
off = [row["fr_off"] for row in rows if row.get("fr_off")]
assert not off, "the sampler says hang detection is off: %s" % off[-1]
nccl = [row["fr"] for row in rows if any("/" not in pg and done > 0 for pg, (_e, done) in (row.get("fr") or {}).items())]
assert nccl, "none of %d samples holds the NCCL recorder's status (fr): %s" % (len(rows), [r.get("fr") for r in rows][-3:])
blocks = [b for row in rows for b in row.get("frb") or []]
timed = [b for b in blocks if b[6] is not None]
assert timed, "no block of collectives with GPU durations (TORCH_NCCL_ENABLE_TIMING=1): %d blocks %s" % (len(blocks), blocks[-2:])
print("%d of %d samples with the GPU columns; last: %s; NCCL recorder: %s, %d of %d blocks with GPU time (last %.3f ms)"
      % (len(gpus), len(rows), gpus[-1], nccl[-1], len(timed), len(blocks), timed[-1][6]))
PY
summary
exit "$failed"
