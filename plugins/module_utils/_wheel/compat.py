# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Will this DeepSpeed wheel run on that node? Pure decisions for role wheel_distribute.

Everything here takes plain data (the wheel manifest, see docs/manifest.md, and the
facts a node reported) and returns plain data, so it is unit-tested on recorded
inputs and imported unchanged by the modules that run on the nodes (python 3.9+).

Every problem is one sentence that names the node, what the wheel needs and what
the node has, so that a refusal can be acted on without reading a log.
"""
from __future__ import annotations

import json

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest
from ansible_collections.multinode.training.plugins.module_utils._build.cpu_isa import cpuinfo_flags
from ansible_collections.multinode.training.plugins.module_utils._wheel.driver import driver_problems, smi_problems
from ansible_collections.multinode.training.plugins.module_utils._wheel.gpu import gpu_problems
from ansible_collections.multinode.training.plugins.module_utils._wheel.tags import wheel_tag_problems


# --------------------------------------------------------------------------- torch, CPU, venv

def same_torch_version(have, want):
    """The node's torch (from its dist-info) is the one the wheel needs (torch.__version__ at
    build time). PyPI's Linux torch is a CUDA build whose dist-info says '2.13.0' while
    torch.__version__ says '2.13.0+cu130': an unlabelled version matches a +cuXY one (the
    CUDA release is compared separately); it never matches +cpu."""
    if have == want:
        return True
    (h_pub, _s, h_label), (w_pub, _s2, w_label) = (str(have).partition("+"), str(want).partition("+"))
    return h_pub == w_pub and not h_label and w_label.startswith("cu")


EXISTING_VALID = ("valid: the prefix of an environment on every node whose bin/python has the torch the wheel "
                  "was built against, or wheel_distribute_venv_existing: false (the collection's own venv)")


def torch_problems(manifest, venv, node):
    """The torch already in the node's venv must be the one the wheel was built against; an existing
    environment (venv["existing"]) must have one: its torch is the job's, never installed or replaced."""
    torch = venv.get("torch")
    want = manifest.get("torch") or {}
    if not torch:
        if venv.get("existing") and venv.get("state") == "directory" and not venv.get("error"):
            return ["%s: wheel_distribute_venv=%s (an existing environment): its python has no torch; %s "
                    "(torch %s)" % (node, venv.get("path"), EXISTING_VALID, want.get("version"))]
        return []
    problems = []
    where = "%s has torch %s" % (venv.get("path"), torch)
    if not same_torch_version(torch, want.get("version")):
        if venv.get("existing"):
            problems.append(
                "%s: wheel needs torch %s, the existing environment %s (its torch is never replaced: build "
                "the wheel against it, deepspeed_build_torch_requirement \"\" with deepspeed_build_python "
                "an interpreter with this torch)" % (node, want.get("version"), where))
        else:
            problems.append(
                "%s: wheel needs torch %s, node's venv %s (wheel_distribute does not replace the torch of "
                "an existing environment: remove it or set wheel_distribute_venv to a new path)" % (
                    node, want.get("version"), where))
    if manifest.get("accelerator") == "cuda" and venv.get("torch_cuda") != want.get("cuda"):
        problems.append("%s: wheel needs torch built for CUDA %s, node's venv %s built for CUDA %s" % (
            node, want.get("cuda"), where, venv.get("torch_cuda")))
    return problems


def cpu_problems(manifest, cpuinfo_text, node, cpuinfo_path="/proc/cpuinfo"):
    """The CPU extensions the build assumed (-march=native) must all be on the node."""
    required = sorted((manifest.get("cpu") or {}).get("flags") or [])
    if not required:
        return []
    have = cpuinfo_flags(cpuinfo_text or "")
    if not have:
        return ["%s: wheel's ops assume CPU flags %s, node's %s lists no CPU flags" % (
            node, " ".join(required), cpuinfo_path)]
    missing = sorted(set(required) - have)
    if not missing:
        return []
    return ["%s: wheel's ops were built with -march=%s and need CPU flags %s, node's CPU (%s) lacks %s" % (
        node, (manifest.get("cpu") or {}).get("march", "native"), " ".join(required), cpuinfo_path,
        " ".join(missing))]


def venv_problems(venv, node):
    """The venv path must be absent, a directory or a symlink to one, under a directory; an existing
    environment must be a directory whose python answers."""
    state = venv.get("state")
    path = venv.get("path")
    if venv.get("existing"):
        if state != "directory":
            return ["%s: wheel_distribute_venv=%s (an existing environment): %s; %s" % (
                node, path, "missing" if state == "absent" else "not a directory (%s)" % (
                    venv.get("detail") or state), EXISTING_VALID)]
        if venv.get("error"):
            return ["%s: wheel_distribute_venv=%s (an existing environment): its python cannot say what it "
                    "holds (%s); %s" % (node, path, venv["error"], EXISTING_VALID)]
        return []
    if state == "file":
        return ["%s: wheel_distribute_venv %s is a file, not a directory: move it away or choose "
                "another path" % (node, path)]
    if state == "other":
        return ["%s: wheel_distribute_venv %s exists but is neither a directory nor a symlink to one "
                "(%s)" % (node, path, venv.get("detail", "unknown type"))]
    if state == "absent" and venv.get("blocked_by"):
        return ["%s: wheel_distribute_venv %s cannot be created: %s is a file, not a directory" % (
            node, path, venv["blocked_by"])]
    return []


def ensurepip_problems(python, venv, node):
    """The venv the role makes needs the interpreter's ensurepip (python -m venv installs pip with it); an
    existing environment is used as it is. A probe that did not look (ensurepip absent) is no problem."""
    if venv.get("existing") or python.get("ensurepip") is not False:
        return []
    package = "python%s-venv" % ".".join(str(python.get("version") or "3").split(".")[:2])
    return ["%s: wheel_distribute_python=%s: cannot make a venv: %s/ensurepip/__main__.py is missing, which "
            "Debian and Ubuntu ship in package %s (python -m venv fails without it); valid: apt install %s on "
            "the node, or wheel_distribute_venv_existing with an environment of your own" % (
                node, json.dumps(python.get("executable")), python.get("stdlib") or "the stdlib", package, package)]


def node_problems(manifest, facts, node):
    """Every reason this node cannot take this wheel (empty list: compatible).

    facts: {"python": {...interpreter...}, "venv": {...}, "gpus": [...], "driver": "580.65.06" or None,
            "cpuinfo": "<text>", "cpuinfo_path": "/proc/cpuinfo", "nvidia_smi_error": None or nvidia-smi's failure}
    """
    problems = []
    venv = facts.get("venv") or {}
    problems.extend(venv_problems(venv, node))
    python = facts.get("python") or {}
    if venv.get("existing") and problems:
        pass  # an existing environment's python is <venv>/bin/python: the problem above says why it cannot run
    elif python.get("error"):
        tag = (manifest.get("python") or {}).get("tag")
        problems.append("%s: wheel_distribute_python=%s: cannot run on this node (%s); valid: an interpreter "
                        "path on every node, python %s for wheel %s" % (
                            node, json.dumps(python.get("executable")), " ".join(str(python["error"]).split()),
                            tag, manifest.get("wheel")))
    else:
        problems.extend(wheel_tag_problems(manifest["wheel"], python, node))
        problems.extend(ensurepip_problems(python, venv, node))
    problems.extend(torch_problems(manifest, venv, node))
    problems.extend(gpu_problems(manifest, facts.get("gpus") or [], node))
    problems.extend(smi_problems(facts.get("nvidia_smi_error"), node))
    problems.extend(driver_problems(manifest, facts.get("driver"), facts.get("gpus") or [], node))
    problems.extend(cpu_problems(manifest, facts.get("cpuinfo"), node,
                                 facts.get("cpuinfo_path") or "/proc/cpuinfo"))
    return problems


# --------------------------------------------------------------------------- manifest

REQUIRED_KEYS = _manifest.REQUIRED_KEYS


def manifest_problems(manifest, where):
    """Structural problems of a manifest (where: its path, for the message): _manifest's, plus its arch list."""
    problems = _manifest.problems(manifest, where)
    if not problems and manifest.get("accelerator") == "cuda":
        try:
            cuda_arch.arch_entries((manifest.get("cuda") or {}).get("arch_list"), "cuda.arch_list")
        except ValueError as exc:
            problems.append("manifest %s: %s" % (where, exc))
    return problems
