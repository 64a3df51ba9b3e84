#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather what decides whether a DeepSpeed wheel can run on this node, and judge it."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_compat_facts
short_description: Check a node against a DeepSpeed wheel manifest before anything is installed
version_added: "0.1.0"
description:
  - Probes the node without changing it, then compares it with the wheel manifest
    (see C(docs/manifest.md)) written by role C(deepspeed_build).
  - "Probes: the python tag, ABI, platform and glibc of the interpreter that will create the venv;
    what is at the venv path (absent, directory, file) with the torch version (and the CUDA version
    torch was built for) already installed there, read from its C(dist-info) without importing it;
    each GPU's compute capability from C(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader)
    when C(nvidia-smi) is on the PATH; the CPU flags of C(/proc/cpuinfo)."
  - "Checks: wheel tags vs interpreter; torch (and CUDA for cuda builds) vs the manifest; every GPU
    covered by the GPU code that the build read from each op's binary (C(ops[].cuda) in the manifest;
    the CUDA arch list for older manifests): SASS of the same major and a lower or equal minor, or
    PTX of a lower or equal arch, accepted with a warning that the driver JIT-compiles it on first use;
    every CPU flag the build assumed present; a usable venv path."
  - On a node without GPUs the GPU check is skipped with a warning.
  - Each problem names the node, what the wheel needs and what the node has. The module never fails
    on an incompatible node; it returns the problems so that a play can report all nodes at once.
author:
  - multinode.training maintainers (@multinode)
options:
  manifest:
    description: The wheel manifest, as parsed JSON.
    type: dict
    required: true
  venv:
    description: Path of the virtual environment the wheel will be installed into.
    type: path
    required: true
  python:
    description: Interpreter that creates the venv; its tags decide which wheels fit.
    type: path
    default: /usr/bin/python3
  cpuinfo_path:
    description: File read for the CPU flags. Only tests point it elsewhere.
    type: path
    default: /proc/cpuinfo
  node:
    description: Name used in the messages; defaults to the host name the module sees.
    type: str
  node_dir:
    description:
      - The node folder the role copies into (C(dist/), C(wheelhouse/)) and records the verified copy in.
      - With O(expected_files), the module also says whether the node is current (RV(current)).
    type: path
  expected_files:
    description: The files the node must hold, C(dist/<name>) or C(wheelhouse/<name>) mapped to C(sha256) and C(size) (module wheel_dist_source).
    type: dict
  lock_sha256:
    description: sha256 of the job requirements lock the venv must have been installed with (empty for none).
    type: str
    default: ''
  lock_packages:
    description:
      - The job requirements' lock as C(name==version), every package of the environment. The venv must hold
        exactly these (its seed packages pip and setuptools excepted), or it is neither RV(installed)
        nor RV(current). Omitted without job requirements.
    type: list
    elements: str
extends_documentation_fragment:
  - multinode.training.attributes.read_only
notes:
  - Runs C(python -c) on the given interpreter and C(nvidia-smi) when present; nothing else.
"""

EXAMPLES = r"""
- name: Check the node against the manifest
  multinode.training.wheel_compat_facts:
    manifest: "{{ lookup('ansible.builtin.file', 'dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.manifest.json') | from_json }}"
    venv: /opt/multinode-training/venv
    node: "{{ inventory_hostname }}"
  register: compat

- name: Refuse an incompatible node
  ansible.builtin.fail:
    msg: "{{ compat.problems | join('; ') }}"
  when: not compat.compatible
"""

RETURN = r"""
compatible:
  description: True when no problem was found.
  returned: always
  type: bool
  sample: false
problems:
  description: One message per problem, each naming the node, what the wheel needs and what the node has.
  returned: always
  type: list
  elements: str
  sample:
    - "node3: wheel needs torch 2.13.0+cpu, node's venv /opt/multinode-training/venv has torch 2.12.0 (...)"
python:
  description: The interpreter's version, implementation, python tag, ABI tag, platform tag, glibc, executable.
  returned: always
  type: dict
  sample: {"version": "3.11.2", "tag": "cp311", "abi": "cp311", "platform": "linux_x86_64", "glibc": "2.36"}
venv:
  description: What is at the venv path.
  returned: always
  type: dict
  contains:
    path:
      description: The path probed.
      type: str
    state:
      description: C(absent), C(directory), C(file) or C(other).
      type: str
    symlink:
      description: Whether the path is a symlink (the role's release layout).
      type: bool
    target:
      description: Where the symlink resolves to, or null.
      type: str
    marker:
      description: Content of C(.multinode-training.json) left by a previous install, or null.
      type: dict
    torch:
      description: Version of torch installed there (from its dist-info METADATA), or null.
      type: str
    torch_cuda:
      description: CUDA version that torch was built with, null for a CPU build or no torch.
      type: str
    packages:
      description: Every distribution in the venv's site-packages, as sorted C(name==version) (dist-info METADATA).
      type: list
      elements: str
installed:
  description:
    - True when the venv already holds this wheel (same sha256), verified by a previous run, installed with
      O(lock_sha256) and holding exactly O(lock_packages).
  returned: always
  type: bool
gpus:
  description: GPUs reported by nvidia-smi, empty without nvidia-smi.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}]
notes:
  description: Warnings for an accepted node (PTX-only coverage, GPU check skipped); also issued as warnings.
  returned: always
  type: list
  elements: str
current:
  description:
    - The node needs nothing (with O(expected_files)) - its venv is this wheel's verified release (marker),
      the op binaries installed match the wheel's RECORD, and the copies in O(node_dir) are the recorded ones.
  returned: always
  type: bool
current_problems:
  description: Why the node is not current.
  returned: always
  type: list
  elements: str
env:
  description: For a current node, the environment its verified install recorded (python, torch, DeepSpeed, ops, wheel sha256).
  returned: always
  type: dict
cpu_flags_missing:
  description: CPU flags from the manifest that the node's cpuinfo lacks.
  returned: always
  type: list
  elements: str
commands:
  description: The commands the module ran, as argument lists.
  returned: always
  type: list
  elements: list
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._wheel.node_probe import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
