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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.multinode.training.plugins.module_utils._build import plan as _build_plan


def main():
    module = AnsibleModule(argument_spec=_build_plan.ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**_build_plan.plan(module, module.params))


if __name__ == "__main__":
    main()
