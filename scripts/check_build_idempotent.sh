#!/usr/bin/env bash
# The real build on this machine (the embedded default: localhost, CPU ops), then
# the same command again, which must change nothing and compile nothing. Leaves
# dist/deepspeed-*.whl and its manifest for the scenarios that distribute it. The
# machine's default compilers and their update-alternatives entry, read before and
# after both runs, must be as they were (toolchain_set_default is false by
# default).
set -euo pipefail
cd "$(dirname "$0")/.."
# Ansible's default output: the checks below read its task banners (ansible.cfg's
# multinode.training.phases prints one line per phase).
export ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default
log=$(mktemp -d)/build
compilers() {  # what `gcc`, `g++` and their alternative are on this machine
  for cc in gcc g++; do echo "$cc: $($cc --version 2>&1 | head -n 1)"; done
  update-alternatives --query gcc 2>&1 || true
}
before=$(compilers)
for run in 1 2; do
  start=$(date +%s)
  ansible-playbook build_deepspeed.yml >"$log.$run" 2>&1 || { tail -60 "$log.$run"; exit 1; }
  echo "build_deepspeed.yml run $run: $(( $(date +%s) - start )) s, $(grep -E '^localhost ' "$log.$run" | tr -s ' ')"
done
recap=$(grep -E '^localhost ' "$log.2")
if ! grep -q 'changed=0 ' <<<"$recap" || grep -q 'Build the wheel' "$log.2"; then
  echo "second build_deepspeed.yml run was not idempotent:" >&2
  grep -E '^changed:|TASK \[' "$log.2" | grep -B1 '^changed' >&2 || true
  exit 1
fi
if [ "$(compilers)" != "$before" ]; then
  echo "build_deepspeed.yml changed this machine's default compilers:" >&2
  diff <(echo "$before") <(compilers) >&2 || true
  exit 1
fi
echo "default compilers as before: $(gcc --version | head -n 1)"
ls dist/deepspeed-*.whl dist/deepspeed-*.whl.manifest.json
