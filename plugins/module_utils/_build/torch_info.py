# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is the torch a build would use a CUDA build, and of which CUDA?

Known before anything is installed: from `pip install --dry-run --report` of the
torch requirement (local version label `+cu128` / `+cpu`, or the nvidia-* runtime
wheels a default Linux torch depends on), or from a torch already in the venv. An
empty requirement means the torch already installed for the build's python.
"""
from __future__ import annotations

import json
import os
import re
import socket

from ansible_collections.multinode.training.plugins.module_utils._build.toolchain import parse_version


class TorchError(ValueError):
    """The torch/accelerator/nvcc combination cannot build; the message says why."""


def cuda_from_version(version):
    """'2.13.0+cu128' -> '12.8'; '2.13.0+cpu' -> None; no label -> '' (unknown from the version)."""
    match = re.search(r"\+(cu|cpu|rocm)(\d*)", version or "")
    if not match:
        return ""
    kind, digits = match.groups()
    if kind != "cu" or len(digits) < 3:
        return None
    return "%d.%d" % (int(digits[:-1]), int(digits[-1]))


def cuda_from_requires(requires_dist):
    """CUDA release from torch's nvidia-* runtime requirement, or None when there is none."""
    for req in requires_dist or []:
        match = re.match(r"nvidia-cuda-runtime(?:-cu(\d+))?\s*[=~<>!]=*\s*(\d+)\.(\d+)", req)
        if match:
            return "%s.%s" % (match.group(2), match.group(3))
        match = re.match(r"nvidia-cuda-runtime-cu(\d+)", req)
        if match:
            return "%s.0" % match.group(1)
        # torch >= 2.10 on PyPI: cuda-toolkit[cublas,cudart,...]==13.0.3
        match = re.match(r"cuda-toolkit\s*(?:\[[^\]]*\])?\s*==\s*(\d+)\.(\d+)", req)
        if match:
            return "%s.%s" % (match.group(1), match.group(2))
    return None


def from_pip_report(report_text):
    """{'version', 'cuda'} for torch from a `pip install --dry-run --report` JSON document."""
    report = json.loads(report_text)
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        if meta.get("name", "").lower() == "torch":
            version = meta.get("version")
            cuda = cuda_from_version(version)
            if cuda == "":
                cuda = cuda_from_requires(meta.get("requires_dist"))
            return {"version": version, "cuda": cuda, "source": "resolved"}
    raise TorchError("the pip report resolves no torch: does deepspeed_build_torch_requirement name torch?")


def resolve_accelerator(requested, nvcc_release, torch, host, requirement):
    """'cpu' or 'cuda' for this build, or TorchError naming host, variable and fix."""
    torch_cuda = torch.get("cuda")
    if requested == "cpu":
        return "cpu"
    if requested == "auto":
        return "cuda" if (nvcc_release and torch_cuda) else "cpu"
    problems = []
    if not nvcc_release:
        problems.append("no nvcc on %s (looked in PATH, $CUDA_HOME/bin and /usr/local/cuda/bin): install the "
                        "CUDA toolkit" % host)
    if not torch_cuda and not requirement:
        problems.append("torch %s installed for deepspeed_build_python is a CPU build: use an environment "
                        "with a CUDA build of torch" % torch.get("version"))
    elif not torch_cuda:
        problems.append("torch %s from deepspeed_build_torch_requirement=%r is a CPU build: use a CUDA build "
                        "(e.g. deepspeed_build_pip_args: ['--index-url', 'https://download.pytorch.org/whl/cu128'])"
                        % (torch.get("version"), requirement))
    if nvcc_release and torch_cuda and parse_version(nvcc_release)[:1] != parse_version(torch_cuda)[:1]:
        problems.append("nvcc %s and torch's CUDA %s differ in major version: DeepSpeed refuses to compile "
                        "such ops; install a matching toolkit or torch" % (nvcc_release, torch_cuda))
    if problems:
        raise TorchError("deepspeed_build_accelerator=cuda cannot build on %s: %s. Valid choices here: %s."
                         % (host, "; ".join(problems), "'cpu' or 'auto'"))
    return "cuda"


# --------------------------------------------------------------------------- resolution on the build host

_INSTALLED = ("import json, importlib.util\n"
              "if importlib.util.find_spec('torch') is None: print('null')\n"
              "else:\n"
              "    import torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda}))\n")


def _base_python(module, p):
    """The interpreter the build venv is made from (deepspeed_build_python), or fail_json naming it."""
    base = module.get_bin_path(p["python"]) if not os.path.isabs(p["python"]) else p["python"]
    if not base or not os.access(base, os.X_OK):
        module.fail_json(msg="deepspeed_build_python=%s: %s on %s; valid: python3 or the absolute path of an "
                             "interpreter on the build host" % (json.dumps(p["python"]), "not found on PATH"
                                                                if not base else "missing or not executable",
                                                                socket.gethostname()))
    return base


def _environment_torch(module, p):
    """An empty requirement: the torch already installed for deepspeed_build_python (an NGC container's
    python, a conda env), which the build venv sees through --system-site-packages; nothing downloaded."""
    base = _base_python(module, p)
    rc, out, err = module.run_command([base, "-c", _INSTALLED])
    if rc != 0 or out.strip() in ("", "null"):
        module.fail_json(msg="deepspeed_build_torch_requirement=\"\": builds against the torch of "
                             "deepspeed_build_python=%s, which has none on %s%s; valid: the python of an "
                             "environment with torch installed, or a requirement such as torch==2.13.0"
                             % (json.dumps(p["python"]), socket.gethostname(),
                                " (%s)" % (err or out).strip().splitlines()[-1] if rc != 0 and (err or out).strip()
                                else ""))
    return dict(resolved=True, source="environment", **json.loads(out))


def resolve(module, p, installed_first=None):
    """{resolved, version, cuda, source} or {resolved: False, reason}; refusals through module.fail_json.

    p: requirement, python, venv_python, pip_args. installed_first(venv_python) may answer for a torch
    already in the venv without importing it (deepspeed_build (probe) reads its dist-info).
    """
    if not p["requirement"]:
        return _environment_torch(module, p)
    tried = []
    interpreters = []
    if p["venv_python"] and os.access(p["venv_python"], os.X_OK):
        found = installed_first(p["venv_python"]) if installed_first else None
        if found is None:
            rc, out, err = module.run_command([p["venv_python"], "-c", _INSTALLED])
            if rc == 0 and out.strip() not in ("", "null"):
                found = json.loads(out)
        if found:
            return dict(resolved=True, source="installed", **found)
        interpreters.append(p["venv_python"])
    interpreters.append(_base_python(module, p))
    for python in interpreters:
        argv = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-deps",
                "--disable-pip-version-check", "--report", "-", p["requirement"]] + p["pip_args"]
        rc, out, err = module.run_command(argv)
        if rc != 0 and "externally-managed-environment" in err:
            # A dry run installs nothing, so PEP 668's guard does not apply to it.
            rc, out, err = module.run_command(argv + ["--break-system-packages"])
        if rc == 0 and out.strip().startswith("{"):
            try:
                found = from_pip_report(out)
            except (ValueError, TorchError) as exc:
                module.fail_json(msg=str(exc))
            return dict(resolved=True, **found)
        last = (err.strip().splitlines() or ["rc=%d" % rc])[-1]
        if "No matching distribution" in err or "Could not find a version" in err:
            module.fail_json(msg="deepspeed_build_torch_requirement=%r: pip finds no such torch: %s"
                             % (p["requirement"], last))
        tried.append("%s: %s" % (python, last))
    return dict(resolved=False,
                reason="no pip could resolve it yet (%s)" % ("; ".join(tried) or "no interpreter found"))
