#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_build_probe
short_description: Everything role deepspeed_build decides before it builds, in one round trip
version_added: 0.2.0
description:
  - Probes the interpreter the build venv is made from, the torch the build would use (the venv's, read
    from its dist-info, else pip's dry run), the cached source (its tree, sha256, digest and version), plans
    the build (the logic of module M(multinode.training.deepspeed_build_plan) - accelerator, arch list, ops,
    CPU target, compiler), computes the build key and says whether the wheel for that key is in the work
    folder, whole, and whether its wheelhouse is current.
  - Refuses, naming the variable, the bad value and the valid ones, what the plan refuses (arch list,
    ops, accelerator against nvcc and torch). Without a C compiler (before the toolchain role ran) it
    checks what needs none and returns RV(complete=false).
  - With O(unpack), a cached sdist or local tarball that is not unpacked yet is unpacked into the source
    cache (a temporary folder renamed when complete); that is its only change. A local path that does not
    exist is refused, naming the variable.
  - Returns the facts the play uses (distribution, as C(setup)'s distribution subset; C(env); C(nodename))
    so that the play gathers none.
author: multinode.training maintainers (@multinode)
options:
  source:
    description: C(pypi), C(git) or C(local).
    type: str
    choices: [pypi, git, local]
    default: pypi
  version:
    description: DeepSpeed version (the sdist for C(pypi)).
    type: str
    required: true
  local_path:
    description: Tarball or directory for C(local).
    type: str
    default: ''
  source_tree:
    description: The unpacked tree, when the role has just fetched the source (skips the cache lookup).
    type: str
    default: ''
  source_spec:
    description: What the source was fetched from (with O(source_tree)).
    type: str
    default: ''
  source_sha256:
    description: sha256 of the archive the tree came from (with O(source_tree)).
    type: str
  source_commit:
    description: git commit of the tree (with O(source_tree)).
    type: str
  unpack:
    description: Unpack a cached sdist or a local tarball that is not unpacked yet (else the source is not ready).
    type: bool
    default: false
  torch:
    description:
      - C({version, cuda}) of the torch an earlier probe of this run resolved; skips pip's dry run. Empty
        to resolve it here.
    type: dict
    default: {}
  workdir:
    description: The role's work folder (venv, source cache, out/).
    type: path
    required: true
  python:
    description: Interpreter the build venv is made from.
    type: str
    default: python3
  torch_requirement:
    description: The torch requirement the ops compile against.
    type: str
    required: true
  pip_args:
    description: Extra pip arguments.
    type: list
    elements: str
    default: []
  accelerator:
    description: C(auto), C(cuda) or C(cpu).
    type: str
    choices: [auto, cuda, cpu]
    default: auto
  cuda_arch_list:
    description: C(auto) or an explicit C(TORCH_CUDA_ARCH_LIST).
    type: str
    default: auto
  ops:
    description: Ops to prebuild (empty is the accelerator's default).
    type: list
    elements: str
    default: []
  jobs:
    description: C(MAX_JOBS), 0 for every usable CPU.
    type: int
    default: 0
  env:
    description: The user's extra build environment (part of the build key).
    type: dict
    default: {}
  install_prerequisites:
    description: Whether the role installs missing distribution packages (libaio-dev for aio ops).
    type: bool
    default: true
  wheelhouse:
    description: Whether the role keeps a wheelhouse beside the wheel (then RV(wheelhouse_current) is computed).
    type: bool
    default: true
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: Pass O(unpack=false) in check mode; then it only reads.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
    details: Reports a change only when it unpacked an archive.
"""

EXAMPLES = r"""
- name: Is the wheel for these inputs built already?
  multinode.training.deepspeed_build_probe:
    version: "0.19.8"
    workdir: /var/tmp/multinode-training/deepspeed-build
    torch_requirement: torch==2.13.0
  register: probe
"""

RETURN = r"""
python:
  description: The build interpreter (version, tag, platform, pip, venv, headers).
  returned: always
  type: dict
torch:
  description: C({version, cuda}) of the torch the build uses; empty when no pip could tell yet.
  returned: always
  type: dict
source:
  description: C({ready, tree, archive, sha256, spec, commit, digest, version, reason}) of the source.
  returned: always
  type: dict
plan:
  description: The build plan (as module deepspeed_build_plan returns it); null when the source is not there yet.
  returned: always
  type: dict
complete:
  description: Whether the plan is complete (compiler present, source there, torch known) and RV(key) computed.
  returned: always
  type: bool
key:
  description: The build key (sha256 of every input that changes the wheel), or null when not complete.
  returned: always
  type: str
up_to_date:
  description: The work folder holds a manifest with this key and its whole wheel.
  returned: always
  type: bool
reason:
  description: Why RV(up_to_date) is false.
  returned: always
  type: str
manifest:
  description: The work folder's newest manifest (whatever its key), or null.
  returned: always
  type: dict
manifest_sha256:
  description: sha256 of that manifest file.
  returned: always
  type: str
wheelhouse_key:
  description: The key the wheelhouse stamp must hold for this wheel.
  returned: always
  type: str
wheelhouse_current:
  description: The wheelhouse stamp holds RV(wheelhouse_key).
  returned: always
  type: bool
packages:
  description: Distribution packages the build needs and the interpreter lacks.
  returned: always
  type: list
  elements: str
git:
  description: Whether /usr/bin/git exists.
  returned: always
  type: bool
pip_python:
  description: The interpreter whose pip downloads the sdist (the build venv's when it exists).
  returned: always
  type: str
ansible_facts:
  description: The distribution facts (as C(setup) gathers them), C(env) and C(nodename).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._build.probe import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
