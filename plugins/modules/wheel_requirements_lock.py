#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resolve a job's requirements against the pinned torch/DeepSpeed set, download them, write a lock."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_requirements_lock
short_description: Resolve job requirements once against the pinned torch and DeepSpeed, with sha256 lock
version_added: "0.2.0"
description:
  - Runs on the controller (or the build host), once. Parses the requirements (list and file; a syntax
    error is refused naming file and line), then asks pip to resolve them together with the DeepSpeed
    wheel and torch, constrained to the exact versions of the wheelhouse (C(pip install --dry-run
    --report), nothing is installed).
  - A requirement that would change torch, DeepSpeed or one of their dependencies is refused naming the
    package and pip's conflict; a package or version the index lacks is refused naming it.
  - The wheels the requirements add are downloaded (C(pip download --no-deps)) into I(dest) and checked
    against the sha256 in pip's report; the lock file lists every package of the environment with its
    sha256, for an offline C(pip install --no-index --require-hashes) on the nodes.
  - A lock whose recorded input digest matches (same requirements, pins, python, pip arguments and wheel)
    and whose wheels are present with their sha256 is reused without running pip; nothing is downloaded.
author:
  - multinode.training maintainers (@multinode)
options:
  requirements:
    description: Requirement strings (PEP 508).
    type: list
    elements: str
    default: []
  requirements_file:
    description: Controller path of a requirements file (one requirement per line, comments allowed); empty for none.
    type: path
  wheelhouse:
    description: Directory of the pinned wheels (torch and the DeepSpeed dependencies).
    type: path
    required: true
  deepspeed_wheel:
    description: The DeepSpeed wheel (pinned too).
    type: path
    required: true
  wheel_sha256:
    description: sha256 of the DeepSpeed wheel (from its manifest).
    type: str
    required: true
  python_version:
    description: Python version of the nodes (C(3.11)); wheels are resolved for it.
    type: str
    required: true
  dest:
    description: Directory that receives the wheels the requirements add.
    type: path
    required: true
  lock:
    description: Path of the lock file to write.
    type: path
    required: true
  pip_args:
    description: Extra arguments for pip (index options).
    type: list
    elements: str
    default: []
  python:
    description: Python interpreter (with pip) that resolves and downloads; default the one running this module.
    type: path
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: partial
    details: Resolves and reports; writes neither wheels nor the lock.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
    details: The same inputs reuse the lock and the downloaded wheels (changed=false, no pip run).
"""

EXAMPLES = r"""
- name: Resolve accelerate against the pinned torch
  multinode.training.wheel_requirements_lock:
    requirements: [accelerate, tabulate==0.9.0]
    wheelhouse: /srv/dist/wheelhouse
    deepspeed_wheel: /srv/dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl
    wheel_sha256: "{{ manifest.wheel_sha256 }}"
    python_version: "3.11"
    dest: /srv/dist/requirements
    lock: /srv/dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.requirements.lock
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
lock:
  description: Path of the lock file.
  returned: always
  type: str
lock_sha256:
  description: sha256 of the lock file (names the node release).
  returned: always
  type: str
entries:
  description: Every package of the environment, with C(name), C(version), C(filename), C(sha256), C(pinned).
  returned: always
  type: list
  elements: dict
added:
  description: Controller paths of the wheels the requirements add (not in the wheelhouse).
  returned: always
  type: list
  elements: str
downloaded:
  description: File names downloaded in this run (empty on a re-run).
  returned: always
  type: list
  elements: str
requirements:
  description: The parsed requirements with their source and line.
  returned: always
  type: list
  elements: dict
cmd:
  description: The pip resolution command (absent when the lock was reused).
  returned: when pip ran
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._wheel.lock import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
