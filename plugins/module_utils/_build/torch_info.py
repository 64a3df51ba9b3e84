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


def _major(release):
    return parse_version(release)[:1]


# DeepSpeed 0.19.8's op_builder/builder.py, cuda_minor_mismatch_ok, read in its PyPI sdist: the CUDA
# releases within one major whose toolkit may build against a torch of another of them. Any other
# pair of differing major.minor - a major not listed (13), a release not listed (12.7) - makes
# assert_no_cuda_mismatch raise CUDAMismatchException at the first op, unless DS_SKIP_CUDA_CHECK=1.
CUDA_MINOR_MISMATCH_OK = {
    10: ("10.0", "10.1", "10.2"),
    11: ("11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8"),
    12: ("12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"),
}


def cuda_pair_ok(nvcc_release, torch_cuda, env=None):
    """Whether DeepSpeed's op builder compiles with this nvcc against this torch (its own rule)."""
    sys_cuda = ".".join(str(nvcc_release).split(".")[:2])
    torch_cuda = ".".join(str(torch_cuda).split(".")[:2])
    if sys_cuda == torch_cuda or str((env or {}).get("DS_SKIP_CUDA_CHECK", "0")) == "1":
        return True
    major = _major(sys_cuda)[0]
    ok = CUDA_MINOR_MISMATCH_OK.get(major, ())
    return sys_cuda in ok and torch_cuda in ok


def cuda_mismatch(requested, host, nvcc_release, torch):
    """The refusal of a build whose nvcc and torch DeepSpeed's op builder will not compile across, so that
    the build fails here instead of at its first op."""
    nvcc_major = _major(nvcc_release)[0]
    return ("deepspeed_build_accelerator=%s on %s: nvcc %s and the CUDA %s of torch %s do not match, and "
            "DeepSpeed compiles no op across them (within one major only the releases of its "
            "cuda_minor_mismatch_ok); valid: a torch built for CUDA %d (deepspeed_build_torch_requirement=auto "
            "picks one that nvcc and the nodes' drivers fit, or torch==<version>+cu%d<minor>: its PyTorch index is "
            "added for torch alone), a CUDA %s toolkit first on PATH or in CUDA_HOME, or "
            "deepspeed_build_accelerator=cpu"
            % (requested, host, nvcc_release, torch.get("cuda"), torch.get("version"), nvcc_major, nvcc_major,
               ".".join(str(torch.get("cuda")).split(".")[:2])))


def no_nvcc_for_gpus(requested, nvcc_release, torch, nodes, host):
    """The refusal of an `auto` build that would make a wheel without CUDA ops for GPUs: GPUs on the build host
    or the nodes (``nodes``: {name: {gpus}}), a CUDA build of torch, and no nvcc on the build host. train.yml
    refuses such a wheel on a node with GPUs; better said here, before any work. None when it does not apply."""
    with_gpus = ["%s (%d x %s)" % (name, len(n["gpus"]), n["gpus"][0].get("name"))
                 for name, n in sorted(nodes.items()) if n.get("gpus")]
    if requested != "auto" or nvcc_release or not with_gpus or not torch.get("resolved") or not torch.get("cuda"):
        return None
    return ("deepspeed_build_accelerator=auto on %s: GPUs on %s and torch %s is a CUDA %s build, but there is no "
            "nvcc on %s (looked in PATH, $CUDA_HOME/bin and /usr/local/cuda/bin), so the wheel would hold no CUDA op "
            "and train.yml refuses it on nodes with GPUs; valid: a CUDA %s toolkit on the build host (nvcc on PATH, "
            "in $CUDA_HOME or /usr/local/cuda), or deepspeed_build_accelerator=cpu for a wheel "
            "without CUDA ops" % (host, ", ".join(with_gpus), torch.get("version"), torch.get("cuda"), host,
                                  str(torch.get("cuda")).split(".", maxsplit=1)[0]))


def resolve_accelerator(requested, nvcc_release, torch, host, requirement, env=None):
    """'cpu' or 'cuda' for this build, or TorchError naming host, variable and fix. env: the build's
    environment (deepspeed_build_env: DS_SKIP_CUDA_CHECK)."""
    torch_cuda = torch.get("cuda")
    if requested == "cpu":
        return "cpu"
    if requested == "auto":
        if nvcc_release and torch_cuda and not cuda_pair_ok(nvcc_release, torch_cuda, env):
            raise TorchError(cuda_mismatch(requested, host, nvcc_release, torch))
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
    if nvcc_release and torch_cuda and torch_cuda != "unknown" and not cuda_pair_ok(nvcc_release, torch_cuda, env):
        if not problems:
            raise TorchError(cuda_mismatch(requested, host, nvcc_release, torch))
        problems.append("nvcc %s and torch's CUDA %s do not match: DeepSpeed refuses to compile such ops; install "
                        "a matching toolkit or torch" % (nvcc_release, torch_cuda))
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


def _shown(p):
    """The requirement as a message shows it: `auto` with what it picked and why."""
    if p.get("why"):
        return "auto (it picked %s: %s)" % (p["requirement"], p["why"])
    return repr(p["requirement"])


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
            module.fail_json(msg="deepspeed_build_torch_requirement=%s: pip finds no such torch: %s"
                             % (_shown(p), last))
        tried.append("%s: %s" % (python, last))
    return dict(resolved=False,
                reason="no pip could resolve it yet (%s)" % ("; ".join(tried) or "no interpreter found"))
