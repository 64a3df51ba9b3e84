# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a DeepSpeed wheel is built on this host: accelerator, arch list, ops, CPU target, compiler.

The logic of module deepspeed_build's plan step, shared with its probe step (which plans once
per build and decides from it whether the wheel for these inputs exists already).
"""
from __future__ import annotations

import os

from ansible_collections.multinode.training.plugins.module_utils._build import cpu_isa
from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import ops as _deepspeed_ops
from ansible_collections.multinode.training.plugins.module_utils._build import nvcc as _nvcc
from ansible_collections.multinode.training.plugins.module_utils._build import toolchain as _toolchain
from ansible_collections.multinode.training.plugins.module_utils._build import torch_info

# cuda: FusedAdam is what DeepSpeed loads for optimizer Adam/AdamW on GPUs without offload (the usual
# config); cpu_adam for ZeRO-Offload; utils for ZeRO's flatten/unflatten.
DEFAULT_OPS = {"cuda": ["cpu_adam", "fused_adam", "utils"], "cpu": ["cpu_adam", "deepspeed_shm_comm"]}


def probe_gpus(module, host, needed):
    """The build host's GPUs; where they decide the arch list (``needed``: a cuda build with arch list auto),
    an nvidia-smi that is there but fails refuses the build, quoting it, instead of reading as no GPU."""
    gpus, _commands, error = cuda_arch.query_gpus(module.run_command, module.get_bin_path("nvidia-smi"))
    if error and needed:
        module.fail_json(msg="%s: nvidia-smi cannot read this host's GPUs for deepspeed_build_cuda_arch_list=auto: "
                         "%s; valid: a host where nvidia-smi runs (after a driver upgrade: reboot, or reload the "
                         "nvidia kernel modules), or an explicit deepspeed_build_cuda_arch_list" % (host, error))
    return gpus


def nodes_gpus(module, nodes, needed):
    """The GPUs of the nodes the wheel is for (``nodes``: step gpus' answers by node, build_deepspeed.yml's group
    train), for arch list auto with the build host's. A node whose nvidia-smi failed refuses it (``needed``):
    its GPUs would otherwise be left out of the wheel without a word."""
    failed = cuda_arch.smi_failures(nodes)
    if failed and needed:
        module.fail_json(msg="deepspeed_build_cuda_arch_list=auto: nvidia-smi cannot read the GPUs of %s; valid: fix "
                             "nvidia-smi there, or an explicit deepspeed_build_cuda_arch_list" % "; ".join(failed))
    return [gpu for _name, node in sorted((nodes or {}).items()) if node for gpu in node.get("gpus") or []]


def probe_cpu(module, cc):
    cc_path = module.get_bin_path(cc)
    if not cc_path:
        module.fail_json(msg="compiler %r not found on this host: the toolchain role installs it" % cc)
    _rc, macros, _err = module.run_command([cc_path, "-march=native", "-dM", "-E", "-x", "c", "/dev/null"])
    _rc, helptext, _err = module.run_command([cc_path, "-march=native", "-Q", "--help=target"])
    _rc, version, _err = module.run_command([cc_path, "-dumpfullversion", "-dumpversion"])
    flags = cpu_isa.flags_from_macros(macros)
    try:
        with open("/proc/cpuinfo") as handle:
            have = cpu_isa.cpuinfo_flags(handle.read())
    except OSError:
        have = set(flags)
    # Keep what the CPU itself reports: a flag the kernel masks is not one code may rely on.
    kept = sorted(set(flags) & have) if have else flags
    return {"march": cpu_isa.march_from_help(helptext), "simd": cpu_isa.simd_width(kept), "flags": kept,
            "compiler_only_flags": sorted(set(flags) - set(kept))}, version.strip()


def resolve_ops(module, source_dir, accelerator, requested, arch_list="", nvcc=None):
    p = module.params
    try:
        available = _deepspeed_ops.available_ops(source_dir, accelerator)
        selected = _deepspeed_ops.select_ops(requested or DEFAULT_OPS[accelerator], available, accelerator)
    except _deepspeed_ops.OpsError as exc:
        module.fail_json(msg=str(exc))
    cuda_home = (nvcc or {}).get("cuda_home") or ""
    problems = _deepspeed_ops.incompatible_ops(
        selected, accelerator, [a for a in arch_list.split(";") if a],
        env=dict(os.environ, **p["env"]),
        libaio=p["install_prerequisites"] or os.path.isfile("/usr/include/libaio.h"),
        cufile=bool(cuda_home) and any(os.path.exists(os.path.join(cuda_home, d, "libcufile.so"))
                                       for d in ("lib64", "lib", "targets/x86_64-linux/lib")))
    if problems:
        module.fail_json(msg="%s: %s" % (os.uname()[1], "; ".join(problems)))
    return dict(ops=selected, available_ops=[op["name"] for op in available])


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


ARGUMENT_SPEC = dict(
    phase=dict(type="str", default="full", choices=["inputs", "full"]),
    accelerator=dict(type="str", default="auto", choices=["auto", "cuda", "cpu"]),
    cuda_arch_list=dict(type="str", default="auto"),
    ops=dict(type="list", elements="str", default=[]),
    source_dir=dict(type="path"),
    torch=dict(type="dict", default={}),
    torch_requirement=dict(type="str", default="torch"),
    deepspeed_version=dict(type="str"),
    nvcc=dict(type="str", default=""),
    cc=dict(type="str", default="gcc"),
    cxx=dict(type="str", default="g++"),
    jobs=dict(type="int", default=0),
    site_packages=dict(type="path"),
    env=dict(type="dict", default={}),
    install_prerequisites=dict(type="bool", default=True),
    nodes=dict(type="dict", default={}),
)


def defaults():
    """The parameters with ARGUMENT_SPEC's defaults (for callers other than the plan step, such as the probe)."""
    return dict((k, v.get("default")) for k, v in ARGUMENT_SPEC.items())


def cuda_arch_list(module, host, accelerator, explicit_arch, gpus, nvcc):
    """TORCH_CUDA_ARCH_LIST for a cuda build: the explicit list or the GPUs' archs, each one nvcc can build; '' for cpu."""
    if accelerator != "cuda":
        return ""
    try:
        arch = explicit_arch if explicit_arch is not None else cuda_arch.auto_arch_list(gpus)
    except cuda_arch.ArchListError as exc:
        module.fail_json(msg=str(exc), gpus=gpus)
    unsupported = cuda_arch.unsupported_archs(arch, nvcc)
    if unsupported:
        module.fail_json(msg="%s: %s" % (host, unsupported), nvcc=nvcc)
    return ";".join(arch)


def build_env(module, p, host, accelerator, arch_list, nvcc, jobs):
    """The build's environment: accelerator, jobs, compilers; for cuda the arch list, CUDA_HOME and CPATH."""
    cxx = module.get_bin_path(p["cxx"])
    if not cxx:
        module.fail_json(msg="C++ compiler %r not found on %s: the toolchain role installs it" % (p["cxx"], host))
    env = {"DS_ACCELERATOR": accelerator, "MAX_JOBS": str(jobs), "DS_ENABLE_NINJA": "1",
           "CC": module.get_bin_path(p["cc"]), "CXX": cxx}
    if arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = arch_list
        env["DS_NVCC_THREADS"] = str(min(jobs, 8))
        env["CUDA_HOME"] = nvcc["cuda_home"]
        if p["site_packages"]:
            extra, missing, searched = _nvcc.cuda_include_dirs(nvcc["cuda_home"], p["site_packages"])
            if missing:
                module.fail_json(msg="%s: the CUDA headers %s are neither in the toolkit of nvcc %s nor in the "
                                     "build venv's nvidia packages (searched %s): install the toolkit's dev "
                                     "packages (libcublas-dev, libcusparse-dev, libcusolver-dev, libcurand-dev) "
                                     "or a CUDA torch whose nvidia-* wheels carry them"
                                     % (host, ", ".join(missing), nvcc["path"], ", ".join(searched)))
            if extra:
                env["CPATH"] = os.pathsep.join(extra + [d for d in os.environ.get("CPATH", "").split(os.pathsep) if d])
    return env


def plan(module, p):
    """The build plan as a result dict; refusals go through module.fail_json, naming the variable.

    `module` is an AnsibleModule (run_command, get_bin_path, fail_json); p the parameters of ARGUMENT_SPEC.
    phase inputs returns early (accelerator None without torch); full needs the C compiler.
    """
    host = os.uname()[1]
    if p["jobs"] < 0:
        module.fail_json(msg="deepspeed_build_jobs=%d: must be 0 (all CPUs) or a positive count" % p["jobs"])

    # The arch list syntax is checked even for cpu builds: garbage is refused, never ignored.
    explicit_arch = None
    if p["cuda_arch_list"] != "auto":
        try:
            explicit_arch = cuda_arch.parse_arch_list(p["cuda_arch_list"])
        except cuda_arch.ArchListError as exc:
            module.fail_json(msg=str(exc))

    nvcc = _nvcc.probe_nvcc(module, _nvcc.find_nvcc(module, p["nvcc"], p["env"]))
    if p["phase"] == "inputs" and not p["torch"]:
        if p["accelerator"] == "cuda" and not nvcc:
            try:
                torch_info.resolve_accelerator("cuda", None, {"cuda": "unknown"}, host, p["torch_requirement"])
            except torch_info.TorchError as exc:
                module.fail_json(msg=str(exc))
        return dict(changed=False, nvcc=nvcc, accelerator=None, cc=p["cc"], cxx=p["cxx"])
    try:
        accelerator = torch_info.resolve_accelerator(
            p["accelerator"], nvcc and nvcc["release"], p["torch"] or {}, host, p["torch_requirement"],
            dict(os.environ, **(p["env"] or {})))
    except torch_info.TorchError as exc:
        module.fail_json(msg=str(exc), nvcc=nvcc, torch=p["torch"])

    node_gpus = nodes_gpus(module, p["nodes"], accelerator == "cuda" and explicit_arch is None)
    gpus = probe_gpus(module, host, accelerator == "cuda" and explicit_arch is None and not node_gpus)
    arch_list = cuda_arch_list(module, host, accelerator, explicit_arch, gpus + node_gpus, nvcc)

    if p["phase"] == "inputs":
        result = dict(changed=False, nvcc=nvcc, accelerator=accelerator, arch_list=arch_list, gpus=gpus,
                      node_gpus=node_gpus, cc=p["cc"], cxx=p["cxx"])
        if p["source_dir"]:
            result.update(resolve_ops(module, p["source_dir"], accelerator, p["ops"], arch_list, nvcc))
        return result
    cpu, gcc_version = probe_cpu(module, p["cc"])
    jobs = p["jobs"] or usable_cpus()
    env = build_env(module, p, host, accelerator, arch_list, nvcc, jobs)

    result = dict(changed=False, accelerator=accelerator, arch_list=arch_list, gpus=gpus, node_gpus=node_gpus, nvcc=nvcc,
                  cpu=cpu, jobs=jobs, env=env, cc=p["cc"], cxx=p["cxx"],
                  compiler={"gcc": gcc_version,
                            "cxx_standard": _toolchain.cxx_standard(p["deepspeed_version"],
                                                                    (p["torch"] or {}).get("version"))})
    if p["source_dir"]:
        ops = resolve_ops(module, p["source_dir"], accelerator, p["ops"], arch_list, nvcc)
        env.update(_deepspeed_ops.build_env(ops["ops"]))
        result.update(ops)
    return result


def summary(planned, torch, accelerator, arch_list):
    """One line, said before any work: what the build makes and why (``planned``: the probe's plan;
    ``accelerator``, ``arch_list``: the variables as given). Empty while the plan has no accelerator yet."""
    chosen = (planned or {}).get("accelerator")
    if not chosen:
        return ""
    ops = [op["name"] if isinstance(op, dict) else op for op in planned.get("ops") or []]
    made = "a %s wheel%s against torch %s" % (chosen, " (ops %s)" % ", ".join(ops) if ops else "", torch.get("version"))
    nvcc = (planned.get("nvcc") or {}).get("release")
    if chosen == "cpu":
        why = ("deepspeed_build_accelerator=cpu" if accelerator == "cpu" else
               "auto: no nvcc on the build host" if not nvcc else "auto: torch %s is a CPU build" % torch.get("version"))
        return "%s: %s" % (made, why)
    gpus = sorted({"%s (%s)" % (g.get("name"), g.get("compute_cap"))
                   for g in (planned.get("gpus") or []) + (planned.get("node_gpus") or [])})
    return "%s (CUDA %s) with nvcc %s, GPU code for %s: %s; %s" % (
        made, torch.get("cuda"), nvcc, planned.get("arch_list"),
        "deepspeed_build_accelerator=cuda" if accelerator == "cuda" else
        "auto: nvcc and a CUDA build of torch are both there",
        "the arch list as given" if arch_list != "auto" else "auto: the GPUs of %s, %s" % (
            "the nodes of group train and the build host" if planned.get("node_gpus") else "the build host",
            ", ".join(gpus)))


def run_module(module):
    """The plan step of module deepspeed_build: the plan of ``module.params`` as the result."""
    module.exit_json(**plan(module, module.params))
