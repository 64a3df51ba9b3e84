#!/usr/bin/env bash
# Build benchmark, one machine, one run:
#   1. bare: the seed's command (shared/seeds/001) on a fresh copy of the sdist, in a venv that
#      already has torch and DeepSpeed's build requirements (the recipe assumes them):
#        DS_ACCELERATOR=cpu DS_BUILD_CPU_ADAM=1 DS_BUILD_UTILS=1 python setup.py build_ext -j8 bdist_wheel
#   2. cold: ansible-playbook build_deepspeed.yml with an empty work folder (it makes the venv,
#      installs torch, fetches the sdist, checks, builds, writes the manifest, fetches to dist/);
#      same op set as the bare command (cpu_adam; `utils` has no cpu builder).
#   3. warm: the same command again (must find the wheel by its build key).
# Prints the three times and the ratios. Asserts nothing about time.
# Usage: benchmarks/build.sh   (from the repository root, after `make venv`)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${DEEPSPEED_VERSION:-0.19.8}
TORCH=${TORCH_REQUIREMENT:-torch==2.13.0}
work=$(mktemp -d /var/tmp/bench-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PATH=$PWD/.venv/bin:$PATH
calc() { python3 -c "print($1)"; }
now() { python3 -c 'import time; print(time.time())'; }

echo "== preparing the bare command's environment (not timed)"
python3 -m venv "$work/bare-venv"
"$work/bare-venv/bin/pip" install -q --disable-pip-version-check "$TORCH" setuptools wheel ninja \
  einops hjson msgpack numpy packaging psutil py-cpuinfo pydantic tqdm 2>&1 | grep -v '^WARNING: Location' || true
"$work/bare-venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
  "deepspeed==$VERSION" -d "$work/sdist" 2>&1 | grep -v '^WARNING: Location' || true
tar -xzf "$work/sdist/deepspeed-$VERSION.tar.gz" -C "$work"

echo "== 1. bare: setup.py build_ext -j8 bdist_wheel"
start=$(now)
(cd "$work/deepspeed-$VERSION" && DS_ACCELERATOR=cpu DS_BUILD_CPU_ADAM=1 DS_BUILD_UTILS=1 \
  "$work/bare-venv/bin/python" setup.py build_ext -j8 bdist_wheel >"$work/bare.log" 2>&1)
bare=$(calc "$(now) - $start")
ls "$work/deepspeed-$VERSION"/dist/*.whl >/dev/null

run_playbook() {
  ansible-playbook build_deepspeed.yml \
    -e "_deepspeed_build_workdir=$work/ansible" -e "_deepspeed_build_dist_dir=$work/dist" \
    -e '{"deepspeed_build_ops": ["cpu_adam"], "deepspeed_build_wheelhouse": false}' >"$work/$1.log" 2>&1
}
echo "== 2. cold: ansible-playbook build_deepspeed.yml (empty work folder)"
start=$(now); run_playbook cold; cold=$(calc "$(now) - $start")
echo "== 3. warm: the same command again"
start=$(now); run_playbook warm; warm=$(calc "$(now) - $start")
grep -q 'changed=0 ' "$work/warm.log" || echo "WARNING: the warm run changed something" >&2

printf '\n%-58s %8.1f s\n' "bare seed command (torch preinstalled, not counted)" "$bare"
printf '%-58s %8.1f s   (%.2fx bare)\n' "build_deepspeed.yml cold (venv + torch + sdist + build)" "$cold" "$(calc "$cold / $bare")"
printf '%-58s %8.1f s   (%.3fx bare, %.1fx faster than cold)\n' "build_deepspeed.yml warm re-run" "$warm" \
  "$(calc "$warm / $bare")" "$(calc "$cold / $warm")"
echo "build inside the cold run: $(grep -o '"duration_s": [0-9.]*' "$work"/dist/*.manifest.json) (from its manifest)"
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
