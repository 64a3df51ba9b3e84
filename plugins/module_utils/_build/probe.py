# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module deepspeed_build's probe step, one round trip: the build host's python, torch, source, plan and key,
and whether the wheel (and its wheelhouse) for that key is already built.

plugins/modules/deepspeed_build.py documents it and runs ``run_module`` as its probe step (module_utils/_stepped.py).
The decisions are _build/deepspeed.py (source, key, existing wheel), _build/torch_info.py and _build/plan.py.
"""
from __future__ import annotations

import json
import os
import platform

from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible_collections.multinode.training.plugins.module_utils._build import plan as _build_plan
from ansible_collections.multinode.training.plugins.module_utils._build import deepspeed as _deepspeed_build
from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import nvcc as _nvcc
from ansible_collections.multinode.training.plugins.module_utils._build import torch_info
from ansible_collections.multinode.training.plugins.module_utils._build import torch_pick
from ansible_collections.multinode.training.plugins.module_utils._wheel import node_probe

ARGUMENT_SPEC = dict(
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
    gcc=dict(type="str", default=""),
    nodes=dict(type="dict", default={}),
)


GPUS_SPEC = dict(nvidia_smi=dict(type="str", default=""))


def run_gpus(module):
    """The gpus step: this node's GPUs and driver as the fact multinode_training_gpus, for the build's probe."""
    module.exit_json(changed=False, ansible_facts={"multinode_training_gpus": read_gpus(module)})


def read_gpus(module):
    """This host's GPUs and NVIDIA driver from nvidia-smi: {driver, gpus, error} (the `gpus` step's answer)."""
    smi = module.params.get("nvidia_smi") or module.get_bin_path("nvidia-smi")
    gpus, _commands, error = cuda_arch.query_gpus(module.run_command, smi)
    driver = None
    if gpus and not error:
        driver, _commands, error = node_probe.query_driver(module.run_command, smi)
    return {"driver": driver, "gpus": gpus, "error": error}


def choose_torch(module, result, nodes, nvcc):
    """The torch requirement and the pip arguments of its resolution, install and download: `auto` picked for
    the GPU nodes' drivers (_build/torch_pick.py; ``nodes``: the `gpus` step's answers and this host's), the
    PyTorch index added for a `+cuXYZ` build; result['torch_choice'] says which and why."""
    p = module.params
    requirement, reason = p["torch_requirement"], ""
    if requirement == "auto":
        try:
            choice = torch_pick.pick(nodes, nvcc and nvcc["release"], dict(os.environ, **(p["env"] or {})))
        except torch_info.TorchError as exc:
            module.fail_json(msg=str(exc))
        requirement, reason = choice["requirement"], choice["reason"]
    extra = torch_pick.index_args(requirement, p["pip_args"])
    result["torch_choice"] = {"requirement": requirement, "pip_args": p["pip_args"] + extra, "index_args": extra,
                              "reason": reason}
    return result["torch_choice"]


def probe_python(module, venv_python, result):
    """The torch to build against and the build python's facts, into result; returns the python facts."""
    p = module.params
    # The GPUs the wheel is for (the nodes' as read there, this host's) and this host's nvcc.
    nodes = dict(p["nodes"] or {})
    nodes["%s (the build host)" % platform.node()] = read_gpus(module)
    nvcc = None if p["accelerator"] == "cpu" else _nvcc.probe_nvcc(module, _nvcc.find_nvcc(module, "", p["env"]))
    # The torch to build against: this run's first probe resolved it, or pip's dry run (_build.torch_info).
    choice = choose_torch(module, result, nodes, nvcc)
    if (p["torch"] or {}).get("version"):
        # Resolved by this run's first probe: pip's dry run would answer the same.
        torch = dict(resolved=True, version=p["torch"]["version"], cuda=p["torch"].get("cuda"))
    else:
        torch = torch_info.resolve(module, dict(requirement=choice["requirement"], python=p["python"],
                                                venv_python=venv_python, pip_args=choice["pip_args"],
                                                why=choice["reason"]),
                                   installed_first=_deepspeed_build.installed_torch)
    refusal = torch_info.no_nvcc_for_gpus(p["accelerator"], nvcc and nvcc["release"], torch, nodes,
                                          platform.node())
    if refusal:
        module.fail_json(msg=refusal)
    python_bin = p["python"] if os.path.isabs(p["python"]) else module.get_bin_path(p["python"])
    result["pip_python"] = venv_python if os.access(venv_python, os.X_OK) else python_bin
    rc, out, err = module.run_command([python_bin, "-c", _deepspeed_build.PYTHON_PROBE])
    if rc != 0:
        module.fail_json(msg="deepspeed_build_python=%s: cannot run: %s" % (json.dumps(p["python"]), (err or out).strip()))
    python = json.loads(out)
    result["python"] = python
    result["torch"] = {"version": torch["version"], "cuda": torch["cuda"]} if torch["resolved"] else {}
    result["torch_reason"] = torch.get("reason", "")
    return python


def probe_source(module, nodename, result):
    """The DeepSpeed source: given by an earlier step, or found (and unpacked) under workdir/src."""
    p = module.params
    if p["source_tree"]:
        source = {"ready": True, "tree": p["source_tree"], "archive": "", "sha256": p["source_sha256"],
                  "spec": p["source_spec"], "commit": p["source_commit"], "reason": ""}
    else:
        if p["source"] == "local" and not os.path.exists(p["local_path"]):
            module.fail_json(msg="%s: deepspeed_build_local_path=%s: missing on the build host; valid: a DeepSpeed "
                                 "source tarball or directory there" % (nodename, json.dumps(p["local_path"])))
        try:
            source = _deepspeed_build.find_source(p["source"], os.path.join(p["workdir"], "src"), p["version"],
                                                  p["local_path"], unpack=p["unpack"])
        except _deepspeed_build.ArchiveError as exc:
            module.fail_json(msg=str(exc))
        result["changed"] = source.pop("unpacked")
    if source["ready"]:
        source["digest"] = _deepspeed_build.source_digest(source["tree"])
        source["version"] = _deepspeed_build.read_version(source["tree"])
    result["source"] = source
    return source


def compilers(gcc):
    """deepspeed_build_gcc -> the plan's cc and cxx: gcc-N/g++-N for a major N, gcc/g++ for ''."""
    gcc = str(gcc or "").strip()
    return dict(cc="gcc-%s" % gcc, cxx="g++-%s" % gcc) if gcc else dict(cc="gcc", cxx="g++")


def probe_plan(module, source, result):
    """The build plan, full when source, torch and a C/C++ compiler are there; returns whether it is full."""
    p = module.params
    plan_params = _build_plan.defaults()
    plan_params.update(accelerator=p["accelerator"], cuda_arch_list=p["cuda_arch_list"], ops=p["ops"],
                       torch=result["torch"], torch_requirement=result["torch_choice"]["requirement"], jobs=p["jobs"],
                       env=p["env"], install_prerequisites=p["install_prerequisites"], nodes=p["nodes"],
                       deepspeed_version=source.get("version"), **compilers(p["gcc"]))
    torch_known = bool(result["torch"]) or p["accelerator"] != "auto"
    if source["ready"] and torch_known:
        plan_params["source_dir"] = source["tree"]
    no_compiler = [c for c in (plan_params["cc"], plan_params["cxx"]) if not module.get_bin_path(c)]
    full = source["ready"] and bool(result["torch"]) and not no_compiler
    plan_params["phase"] = "full" if full else "inputs"
    result["plan"] = _build_plan.plan(module, plan_params)
    result["summary"] = _build_plan.summary(result["plan"], result["torch"], p["accelerator"], p["cuda_arch_list"])
    if not full:
        result["reason"] = ("source: %s" % source["reason"] if not source["ready"]
                            else "torch: %s" % result["torch_reason"] if not result["torch"]
                            else "no %s on PATH (deepspeed_build_gcc=%s); install it (the toolchain role, as "
                            "build_deepspeed.yml does) or set deepspeed_build_gcc to the major of an installed "
                            "gcc-N" % (" or ".join(no_compiler), p["gcc"] or "''"))
    return full


def probe_built(module, source, python, result):
    """The build key, and the wheel (and wheelhouse) already built for it under workdir/out."""
    p = module.params
    key = _deepspeed_build.build_key(source["digest"], result["torch"], result["plan"], python, p["env"])
    result.update(complete=True, key=key)
    out_dir = os.path.join(p["workdir"], "out")
    found = _deepspeed_build.existing_wheel(out_dir, key)
    result.update(up_to_date=found["up_to_date"], reason=found["reason"], manifest=found["manifest"],
                  manifest_sha256=found["manifest_sha256"])
    if found["manifest"] and p["wheelhouse"]:
        result["wheelhouse_key"] = _deepspeed_build.wheelhouse_key(
            os.path.basename(found["manifest_path"]), key, result["torch_choice"]["requirement"],
            result["torch_choice"]["pip_args"])
        result["wheelhouse_current"] = (_deepspeed_build.read_stamp(os.path.join(out_dir, "wheelhouse", ".stamp"))
                                        == result["wheelhouse_key"])


def run_module(module):
    venv_python = os.path.join(module.params["workdir"], "venv", "bin", "python")
    # The facts the play uses, from this round trip: it gathers none itself.
    facts = DistributionFactCollector().collect(module=module)
    facts.update(env=dict(os.environ), nodename=platform.node())
    result = dict(changed=False, complete=False, key=None, up_to_date=False, reason="", manifest=None,
                  manifest_sha256=None, wheelhouse_key=None, wheelhouse_current=False, plan=None,
                  git=os.path.exists("/usr/bin/git"), ansible_facts=facts)
    python = probe_python(module, venv_python, result)
    source = probe_source(module, facts["nodename"], result)
    result["packages"] = _deepspeed_build.missing_packages(python, module.params["source"], module.params["ops"])
    if probe_plan(module, source, result):
        probe_built(module, source, python, result)
    module.exit_json(**result)
