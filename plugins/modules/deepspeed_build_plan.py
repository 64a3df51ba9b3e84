#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_build_plan
short_description: Decide and validate how a DeepSpeed wheel is built on this host
version_added: 0.1.0
description:
  - Probes the build host (nvcc, GPUs through nvidia-smi, the C compiler and the CPU
    instruction set it targets with C(-march=native)) and resolves the build request, that is
    the accelerator, the C(TORCH_CUDA_ARCH_LIST), the ops and their C(DS_BUILD_*)
    variables, and the job count.
  - Fails with a message naming the variable, the bad value and the valid values when
    the request cannot be built here, so that a role can refuse before any work.
  - Read-only; never reports a change.
author: multinode.training maintainers (@multinode)
options:
  phase:
    description:
      - C(inputs) checks only what needs no compiler and no source (the arch list syntax, nvcc for
        cuda, and torch when O(torch) is known), so it can run before anything is installed.
      - C(full) resolves everything; run it once the compiler and the source are there.
    type: str
    choices: [inputs, full]
    default: full
  accelerator:
    description: C(auto) picks C(cuda) when nvcc and a CUDA build of torch are both present, else C(cpu).
    type: str
    choices: [auto, cuda, cpu]
    default: auto
  cuda_arch_list:
    description:
      - C(auto) takes the union of the compute capabilities of this host's GPUs and adds C(+PTX)
        on the highest; otherwise an explicit list such as C(7.5;8.0;9.0+PTX).
      - Ignored for cpu builds.
    type: str
    default: auto
  ops:
    description:
      - Op names (C(cpu_adam), C(utils), C(fused_adam), ...; the C(DS_BUILD_*) suffix works too,
        for example C(shm_comm)). Validated against the builders in O(source_dir).
      - Empty means the default for the accelerator, C(cpu_adam) and C(utils) for cuda (the classic
        recipe), C(cpu_adam) and C(deepspeed_shm_comm) for cpu (what a CPU training job loads).
    type: list
    elements: str
    default: []
  source_dir:
    description: Unpacked DeepSpeed source tree. Without it, ops are not resolved (in either phase).
    type: path
  torch:
    description: The torch the build uses, as C({version, cuda}); C(cuda) null for a CPU build.
    type: dict
    default: {}
  torch_requirement:
    description: The requirement the torch came from, quoted in messages.
    type: str
    default: torch
  deepspeed_version:
    description: DeepSpeed version, for the C++ standard and messages.
    type: str
  nvcc:
    description: Path to nvcc. Empty searches PATH, C($CUDA_HOME/bin) and C(/usr/local/cuda/bin).
    type: str
    default: ''
  cc:
    description: The C compiler the build uses (its C(-march=native) decides the CPU requirements); exported as C(CC).
    type: str
    default: gcc
  cxx:
    description:
      - The C++ compiler, exported as C(CXX). torch's extension builder otherwise calls C(c++), which only the
        distribution's g++ package provides, not a versioned g++-N.
    type: str
    default: g++
  jobs:
    description: Parallel compile jobs inside each op (C(MAX_JOBS)); 0 means the CPUs this process may use.
    type: int
    default: 0
  site_packages:
    description:
      - site-packages of the build venv once the CUDA torch is installed there. For cuda builds, headers
        the toolkit lacks (cuBLAS, cuSPARSE, cuSOLVER, cuRAND) are looked up in its C(nvidia/*/include)
        folders and added to C(CPATH) in RV(env); a header found nowhere fails naming it.
    type: path
  env:
    description: The user's extra build environment (C(CUTLASS_PATH) makes C(evoformer_attn) buildable).
    type: dict
    default: {}
  install_prerequisites:
    description: Whether the role installs libaio-dev for C(async_io)/C(gds) (else its header must be there).
    type: bool
    default: true
extends_documentation_fragment:
  - multinode.training.attributes.read_only
notes:
  - Ops are compiled one extension after the other with ninja using O(jobs) parallel compiles each,
    not with C(build_ext -j), whose parallel extensions race in one build folder (DeepSpeed PR 7899).
"""

EXAMPLES = r"""
- name: Plan a CUDA build for the GPUs of this host
  multinode.training.deepspeed_build_plan:
    accelerator: cuda
    cuda_arch_list: auto
    ops: [cpu_adam, utils]
    source_dir: /var/tmp/ds/src/deepspeed-0.19.8
    torch: {version: 2.13.0+cu128, cuda: "12.8"}
  register: plan

- name: Plan a CPU build with the default ops
  multinode.training.deepspeed_build_plan:
    accelerator: cpu
    source_dir: /var/tmp/ds/src/deepspeed-0.19.8
    torch: {version: 2.13.0+cpu, cuda: null}
"""

RETURN = r"""
accelerator:
  description: The accelerator the build targets.
  returned: always
  type: str
  sample: cpu
arch_list:
  description: TORCH_CUDA_ARCH_LIST for the build; empty for cpu builds.
  returned: always
  type: str
  sample: 8.0;9.0+PTX
gpus:
  description: GPUs seen by nvidia-smi (name, compute_cap).
  returned: always
  type: list
  elements: dict
ops:
  description: The ops to build, each with name, builder class, DS_BUILD_ variable and extension module.
  returned: when source_dir is given
  type: list
  elements: dict
  sample: [{name: cpu_adam, builder: CPUAdamBuilder, build_var: DS_BUILD_CPU_ADAM, module: deepspeed.ops.adam.cpu_adam_op}]
available_ops:
  description: Every op the source can prebuild for the accelerator.
  returned: when source_dir is given
  type: list
  elements: str
env:
  description:
    - Environment for C(setup.py bdist_wheel) (DS_ACCELERATOR, DS_BUILD_*, TORCH_CUDA_ARCH_LIST, MAX_JOBS).
    - For cuda builds also C(CUDA_HOME), the toolkit nvcc really belongs to (torch guesses it from the
      folder of the first nvcc on PATH, which is wrong for a wrapper script), and C(CPATH) when
      O(site_packages) supplies headers.
  returned: always
  type: dict
nvcc:
  description: nvcc path and release, and the highest gcc major it accepts (null when there is no nvcc).
  returned: always
  type: dict
  sample: {path: /usr/local/cuda/bin/nvcc, release: "13.0", max_gcc: 15, cuda_home: /usr/local/cuda-13.0,
           archs: ["7.5", "8.0", "9.0", "10.0", "12.0"]}
cpu:
  description: CPU target of the C(-march=native) build, flags in /proc/cpuinfo names.
  returned: always
  type: dict
  sample: {march: znver3, simd: AVX512, flags: [avx, avx2, avx512f, fma]}
compiler:
  description: The compiler and the C++ standard the ops compile with.
  returned: always
  type: dict
  sample: {gcc: 12.2.0, cxx_standard: c++20}
jobs:
  description: MAX_JOBS used.
  returned: always
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.multinode.training.plugins.module_utils import _cpu_isa, _cuda_arch, _deepspeed_ops
from ansible_collections.multinode.training.plugins.module_utils import _nvcc, _toolchain, _torch_info

DEFAULT_OPS = {"cuda": ["cpu_adam", "utils"], "cpu": ["cpu_adam", "deepspeed_shm_comm"]}


def probe_gpus(module):
    gpus, _commands = _cuda_arch.query_gpus(module.run_command, module.get_bin_path("nvidia-smi"))
    return gpus


def probe_cpu(module, cc):
    cc_path = module.get_bin_path(cc)
    if not cc_path:
        module.fail_json(msg="compiler %r not found on this host: the toolchain role installs it" % cc)
    _rc, macros, _err = module.run_command([cc_path, "-march=native", "-dM", "-E", "-x", "c", "/dev/null"])
    _rc, helptext, _err = module.run_command([cc_path, "-march=native", "-Q", "--help=target"])
    _rc, version, _err = module.run_command([cc_path, "-dumpfullversion", "-dumpversion"])
    flags = _cpu_isa.flags_from_macros(macros)
    try:
        with open("/proc/cpuinfo") as handle:
            have = _cpu_isa.cpuinfo_flags(handle.read())
    except OSError:
        have = set(flags)
    # Keep what the CPU itself reports: a flag the kernel masks is not one code may rely on.
    kept = sorted(set(flags) & have) if have else flags
    return {"march": _cpu_isa.march_from_help(helptext), "simd": _cpu_isa.simd_width(kept), "flags": kept,
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


def main():
    module = AnsibleModule(
        argument_spec=dict(
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
        ),
        supports_check_mode=True,
    )
    p = module.params
    host = os.uname()[1]
    if p["jobs"] < 0:
        module.fail_json(msg="deepspeed_build_jobs=%d: must be 0 (all CPUs) or a positive count" % p["jobs"])

    # The arch list syntax is checked even for cpu builds: garbage is refused, never ignored.
    if p["cuda_arch_list"] != "auto":
        try:
            explicit_arch = _cuda_arch.parse_arch_list(p["cuda_arch_list"])
        except _cuda_arch.ArchListError as exc:
            module.fail_json(msg=str(exc))

    nvcc = _nvcc.probe_nvcc(module, _nvcc.find_nvcc(module, p["nvcc"]))
    if p["phase"] == "inputs" and not p["torch"]:
        if p["accelerator"] == "cuda" and not nvcc:
            try:
                _torch_info.resolve_accelerator("cuda", None, {"cuda": "unknown"}, host, p["torch_requirement"])
            except _torch_info.TorchError as exc:
                module.fail_json(msg=str(exc))
        module.exit_json(changed=False, nvcc=nvcc, accelerator=None)
    try:
        accelerator = _torch_info.resolve_accelerator(
            p["accelerator"], nvcc and nvcc["release"], p["torch"] or {}, host, p["torch_requirement"])
    except _torch_info.TorchError as exc:
        module.fail_json(msg=str(exc), nvcc=nvcc, torch=p["torch"])

    gpus = probe_gpus(module)
    arch_list = ""
    if accelerator == "cuda":
        try:
            arch = explicit_arch if p["cuda_arch_list"] != "auto" else _cuda_arch.auto_arch_list(gpus)
        except _cuda_arch.ArchListError as exc:
            module.fail_json(msg=str(exc), gpus=gpus)
        unsupported = _cuda_arch.unsupported_archs(arch, nvcc)
        if unsupported:
            module.fail_json(msg="%s: %s" % (host, unsupported), nvcc=nvcc)
        arch_list = ";".join(arch)

    if p["phase"] == "inputs":
        result = dict(changed=False, nvcc=nvcc, accelerator=accelerator, arch_list=arch_list, gpus=gpus)
        if p["source_dir"]:
            result.update(resolve_ops(module, p["source_dir"], accelerator, p["ops"], arch_list, nvcc))
        module.exit_json(**result)
    cpu, gcc_version = probe_cpu(module, p["cc"])
    jobs = p["jobs"] or usable_cpus()
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

    result = dict(changed=False, accelerator=accelerator, arch_list=arch_list, gpus=gpus, nvcc=nvcc,
                  cpu=cpu, jobs=jobs, env=env,
                  compiler={"gcc": gcc_version,
                            "cxx_standard": _toolchain.cxx_standard(p["deepspeed_version"],
                                                                    (p["torch"] or {}).get("version"))})
    if p["source_dir"]:
        ops = resolve_ops(module, p["source_dir"], accelerator, p["ops"], arch_list, nvcc)
        env.update(_deepspeed_ops.build_env(ops["ops"]))
        result.update(ops)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
