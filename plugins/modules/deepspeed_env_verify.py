#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify an installed DeepSpeed environment against its wheel manifest."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_env_verify
short_description: Verify that a venv holds the manifest's torch, DeepSpeed and prebuilt ops, with no JIT build
version_added: "0.1.0"
description:
  - Runs the venv's python once. It imports torch and DeepSpeed, then for every op of the wheel manifest
    creates its op builder through the accelerator named by the manifest (C(DS_ACCELERATOR)) and calls
    C(load()), exactly as DeepSpeed does at training time.
  - An op passes when DeepSpeed lists it in C(installed_ops), C(load()) returns the prebuilt module the
    manifest names (C(ops[].module), file ending in C(ops[].file)) and C(TORCH_EXTENSIONS_DIR), pointed at
    a fresh empty directory, is still empty afterwards (no JIT compilation happened).
  - Also compares torch, DeepSpeed and the accelerator with the manifest, and returns a summary of the
    environment for the cross-node consistency report.
author:
  - multinode.training maintainers (@multinode)
options:
  venv:
    description: The virtual environment to verify (its C(bin/python) is run).
    type: path
    required: true
  manifest:
    description: The wheel manifest, as parsed JSON.
    type: dict
    required: true
  node:
    description: Name used in the messages; defaults to the host name the module sees.
    type: str
  fail_on_problems:
    description: Fail the task, listing every problem, when verification finds any.
    type: bool
    default: true
  report_as:
    description: Venv path recorded in the returned C(env) (the stable path when I(venv) is a release directory).
    type: path
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: Verify the installed environment
  multinode.training.deepspeed_env_verify:
    venv: /opt/multinode-training/venv
    manifest: "{{ manifest }}"
    node: "{{ inventory_hostname }}"
  register: verified
"""

RETURN = r"""
env:
  description: Summary of the environment (the C(wheel_distribute_env) fact).
  returned: always
  type: dict
  sample:
    venv: /opt/multinode-training/venv
    python: /opt/multinode-training/venv/bin/python
    python_version: "3.11.2"
    torch: "2.13.0+cpu"
    torch_cuda: null
    deepspeed: "0.19.8"
    accelerator: cpu
    ops: [cpu_adam, deepspeed_shm_comm]
    wheel: deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl
    wheel_sha256: 2a57a75daed249747966226fbe1ef79749e3e26ef1c80d2c8cc1b847047602a5
problems:
  description: One message per problem, naming the node and the op or package.
  returned: always
  type: list
  elements: str
probe:
  description: Raw result of the probe (per-op builder, installed flag, module, file, error; JIT files).
  returned: always
  type: dict
cmd:
  description: The command run (the probe script elided).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._wheel.verify import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
