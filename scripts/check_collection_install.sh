#!/usr/bin/env bash
# The collection as users install it: build the tarball, install it into an
# empty collections path outside this clone, and check that its playbooks resolve
# as multinode.training.<name> and that ansible-doc renders its modules.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV_BIN:-$PWD/.venv/bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN/ansible-galaxy" collection build --output-path "$tmp" . >/dev/null
"$BIN/ansible-galaxy" collection install --force -p "$tmp/collections" "$tmp"/multinode-training-*.tar.gz >/dev/null
cd "$tmp"   # away from this clone's ansible.cfg and its .collections link
export ANSIBLE_COLLECTIONS_PATH=$tmp/collections
for playbook in build_deepspeed train; do
  "$BIN/ansible-playbook" "multinode.training.$playbook" --syntax-check >/dev/null
  echo "installed collection: multinode.training.$playbook resolves"
done
modules=$(cd "$tmp/collections/ansible_collections/multinode/training/plugins/modules" && ls *.py | sed 's/\.py$//')
for m in $modules; do
  "$BIN/ansible-doc" -t module "multinode.training.$m" >/dev/null
done
# ansible-doc -l is public API: every module there is one a user would call on its own. A role's
# single-use step becomes an option of its step module (deepspeed_build, wheel_distribute,
# train_node, data_sync), so a new module here is a decision: add it to this list with that in mind.
public="data_sync deepspeed_build deepspeed_env_verify nccl_fabric nccl_log_check node_facts slurm_job torchrun
train_job_report train_node validate wheel_distribute"
listed=$("$BIN/ansible-doc" -t module -l multinode.training | awk '{sub(/^multinode\.training\./, "", $1); print $1}')
if [ "$(echo $listed)" != "$(echo $public)" ]; then
  echo "ansible-doc -l lists: $(echo $listed); public modules: $(echo $public)" >&2
  exit 1
fi
echo "installed collection: ansible-doc renders and lists $(echo "$modules" | wc -l) modules: $(echo $modules)"
