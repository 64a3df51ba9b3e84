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

import json
import os
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._wheel import dist as _wheel_dist
from ansible_collections.multinode.training.plugins.module_utils._build.cpu_isa import missing_flags
from ansible_collections.multinode.training.plugins.module_utils._wheel.compat import (
    INTERPRETER_SCRIPT,
    gpu_notes,
    installed,
    node_problems,
    venv_facts,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            manifest=dict(type="dict", required=True),
            venv=dict(type="path", required=True),
            python=dict(type="path", default="/usr/bin/python3"),
            cpuinfo_path=dict(type="path", default="/proc/cpuinfo"),
            node=dict(type="str"),
            node_dir=dict(type="path"),
            expected_files=dict(type="dict"),
            lock_sha256=dict(type="str", default=""),
            lock_packages=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    manifest = params["manifest"]
    node = params["node"] or socket.gethostname()
    commands = []

    cmd = [params["python"], "-c", INTERPRETER_SCRIPT]
    commands.append([params["python"], "-c", "<interpreter probe>"])
    try:
        rc, out, err = module.run_command(cmd, handle_exceptions=False)
    except OSError as exc:  # interpreter missing or not executable
        rc, out, err = 127, "", exc.strerror or "cannot be run"
    if rc == 0:
        try:
            python = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            python = {"executable": params["python"], "error": "unreadable output %r" % out[-200:]}
    else:
        python = {"executable": params["python"], "error": (err or out).strip()[-300:] or "exit status %d" % rc}

    gpus, smi_commands = cuda_arch.query_gpus(module.run_command, module.get_bin_path("nvidia-smi", required=False))
    commands.extend(smi_commands)
    gpus = [dict(gpu, index=i) for i, gpu in enumerate(gpus)]

    try:
        with open(params["cpuinfo_path"], encoding="utf-8", errors="replace") as handle:
            cpuinfo = handle.read()
    except OSError as exc:
        module.fail_json(msg="%s: cannot read CPU flags from %s: %s" % (node, params["cpuinfo_path"], exc))

    venv = venv_facts(params["venv"])
    facts = {"python": python, "venv": venv, "gpus": gpus, "cpuinfo": cpuinfo,
             "cpuinfo_path": params["cpuinfo_path"]}
    problems = node_problems(manifest, facts, node)
    notes = gpu_notes(manifest, gpus, node)
    for note in notes:
        module.warn(note)
    current, why = False, ["not asked (no expected_files)"]
    if params["expected_files"] is not None and not problems:
        record = os.path.join(params["node_dir"], _wheel_dist.RECORD_NAME)
        try:
            with open(record) as handle:
                record_text = handle.read()
        except (IOError, OSError):
            record_text = None
        why = _wheel_dist.current_problems(manifest, venv, params["lock_sha256"], params["node_dir"],
                                           params["expected_files"], record_text, params["lock_packages"])
        current = not why
    module.exit_json(
        changed=False,
        current=current,
        current_problems=why,
        env=_wheel_dist.env_from_marker(venv["marker"]) if current else {},
        compatible=not problems,
        problems=problems,
        python=python,
        venv=venv,
        installed=installed(manifest, venv, params["lock_sha256"], params["lock_packages"]),
        gpus=gpus,
        notes=notes,
        cpu_flags_missing=missing_flags((manifest.get("cpu") or {}).get("flags") or [], cpuinfo),
        commands=commands,
    )


if __name__ == "__main__":
    main()
