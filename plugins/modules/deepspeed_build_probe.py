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

import json
import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible_collections.multinode.training.plugins.module_utils._build import plan as _build_plan
from ansible_collections.multinode.training.plugins.module_utils._build import deepspeed as _deepspeed_build
from ansible_collections.multinode.training.plugins.module_utils._build import torch_info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", default="pypi", choices=["pypi", "git", "local"]),
            version=dict(type="str", required=True),
            local_path=dict(type="str", default=""),
            source_tree=dict(type="str", default=""),
            source_spec=dict(type="str", default=""),
            source_sha256=dict(type="str"),
            source_commit=dict(type="str"),
            unpack=dict(type="bool", default=False),
            torch=dict(type="dict", default={}),
            workdir=dict(type="path", required=True),
            python=dict(type="str", default="python3"),
            torch_requirement=dict(type="str", required=True),
            pip_args=dict(type="list", elements="str", default=[]),
            accelerator=dict(type="str", default="auto", choices=["auto", "cuda", "cpu"]),
            cuda_arch_list=dict(type="str", default="auto"),
            ops=dict(type="list", elements="str", default=[]),
            jobs=dict(type="int", default=0),
            env=dict(type="dict", default={}),
            install_prerequisites=dict(type="bool", default=True),
            wheelhouse=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    workdir = p["workdir"]
    venv_python = os.path.join(workdir, "venv", "bin", "python")
    # The facts the play uses, from this round trip: it gathers none itself.
    facts = DistributionFactCollector().collect(module=module)
    facts.update(env=dict(os.environ), nodename=platform.node())
    result = dict(changed=False, complete=False, key=None, up_to_date=False, reason="", manifest=None,
                  manifest_sha256=None, wheelhouse_key=None, wheelhouse_current=False, plan=None,
                  git=os.path.exists("/usr/bin/git"), ansible_facts=facts)

    # The torch to build against: this run's first probe resolved it, or pip's dry run (_build.torch_info).
    if (p["torch"] or {}).get("version"):
        # Resolved by this run's first probe: pip's dry run would answer the same.
        torch = dict(resolved=True, version=p["torch"]["version"], cuda=p["torch"].get("cuda"))
    else:
        torch = torch_info.resolve(module, dict(requirement=p["torch_requirement"], python=p["python"],
                                                venv_python=venv_python, pip_args=p["pip_args"]),
                                   installed_first=_deepspeed_build.installed_torch)
    python_bin = p["python"] if os.path.isabs(p["python"]) else module.get_bin_path(p["python"])
    result["pip_python"] = venv_python if os.access(venv_python, os.X_OK) else python_bin
    rc, out, err = module.run_command([python_bin, "-c", _deepspeed_build.PYTHON_PROBE])
    if rc != 0:
        module.fail_json(msg="deepspeed_build_python=%s: cannot run: %s" % (json.dumps(p["python"]), (err or out).strip()))
    python = json.loads(out)
    result["python"] = python
    result["torch"] = {"version": torch["version"], "cuda": torch["cuda"]} if torch["resolved"] else {}
    result["torch_reason"] = torch.get("reason", "")

    if p["source_tree"]:
        source = {"ready": True, "tree": p["source_tree"], "archive": "", "sha256": p["source_sha256"],
                  "spec": p["source_spec"], "commit": p["source_commit"], "reason": ""}
    else:
        if p["source"] == "local" and not os.path.exists(p["local_path"]):
            module.fail_json(msg="%s: deepspeed_build_local_path=%s: missing on the build host; valid: a DeepSpeed "
                                 "source tarball or directory there" % (facts["nodename"], json.dumps(p["local_path"])))
        try:
            source = _deepspeed_build.find_source(p["source"], os.path.join(workdir, "src"), p["version"],
                                                  p["local_path"], unpack=p["unpack"])
        except _deepspeed_build.ArchiveError as exc:
            module.fail_json(msg=str(exc))
        result["changed"] = source.pop("unpacked")
    if source["ready"]:
        source["digest"] = _deepspeed_build.source_digest(source["tree"])
        source["version"] = _deepspeed_build.read_version(source["tree"])
    result["source"] = source
    result["packages"] = _deepspeed_build.missing_packages(python, p["source"], p["ops"])

    plan_params = _build_plan.defaults()
    plan_params.update(accelerator=p["accelerator"], cuda_arch_list=p["cuda_arch_list"], ops=p["ops"],
                       torch=result["torch"], torch_requirement=p["torch_requirement"], jobs=p["jobs"],
                       env=p["env"], install_prerequisites=p["install_prerequisites"],
                       deepspeed_version=source.get("version"))
    torch_known = bool(result["torch"]) or p["accelerator"] != "auto"
    if source["ready"] and torch_known:
        plan_params["source_dir"] = source["tree"]
    full = (source["ready"] and bool(result["torch"]) and bool(module.get_bin_path("gcc"))
            and bool(module.get_bin_path("g++")))
    plan_params["phase"] = "full" if full else "inputs"
    result["plan"] = _build_plan.plan(module, plan_params)
    if not full:
        result["reason"] = ("source: %s" % source["reason"] if not source["ready"]
                            else "torch: %s" % result["torch_reason"] if not result["torch"]
                            else "no C compiler yet")
        module.exit_json(**result)

    key = _deepspeed_build.build_key(source["digest"], result["torch"], result["plan"], python, p["env"])
    result.update(complete=True, key=key)
    out_dir = os.path.join(workdir, "out")
    found = _deepspeed_build.existing_wheel(out_dir, key)
    result.update(up_to_date=found["up_to_date"], reason=found["reason"], manifest=found["manifest"],
                  manifest_sha256=found["manifest_sha256"])
    if found["manifest"] and p["wheelhouse"]:
        result["wheelhouse_key"] = _deepspeed_build.wheelhouse_key(
            os.path.basename(found["manifest_path"]), key, p["torch_requirement"], p["pip_args"])
        result["wheelhouse_current"] = (_deepspeed_build.read_stamp(os.path.join(out_dir, "wheelhouse", ".stamp"))
                                        == result["wheelhouse_key"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
