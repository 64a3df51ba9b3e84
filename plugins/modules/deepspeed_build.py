#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_build
short_description: Internal only - the steps of roles deepspeed_build and toolchain - choose gcc, probe, plan, stage, manifest, fetch
version_added: 0.1.0
description:
  - The steps role P(multinode.training.deepspeed_build#role) takes on the build host and the controller, and the gcc
    choice of role P(multinode.training.toolchain#role); each task gives exactly one step, as the option of that name,
    with the step's own options.
  - In the roles' order - O(gpus) (on the training nodes - their driver and GPUs, for a torch requirement C(auto)),
    O(gcc_plan) (which gcc to install), O(probe) (everything decided before a build, and whether
    the wheel is built already), O(plan) (accelerator, arch list, ops, compiler), O(stage) (a clean copy of the source
    beside the build venv's torch), O(manifest) (check the built ops, write the manifest, publish), O(dist_check) and
    O(dist_commit) (on the controller - what dist/ lacks, then the fetched files moved in).
  - Each step returns its own values; RETURN names the step that returns each one.
  - Internal only - a play calls the role, not this module; the steps and their options change with the role's tasks.
author: multinode.training maintainers (@multinode)
options:
  gcc_plan:
    description:
      - Choose the gcc that can build DeepSpeed's ops and that nvcc accepts.
      - Reads the gcc versions the package archive offers (C(apt-cache pkgnames gcc-) and C(g++-)), the C++ standard DeepSpeed
        compiles its ops with, and the highest gcc the installed nvcc accepts (C(include/crt/host_config.h)).
      - With O(gcc_plan.requested=auto) returns the newest gcc that satisfies both; with an explicit version, returns it
        or fails with a message that names the versions that would work.
      - Read-only; never reports a change.
    type: dict
    suboptions:
      requested:
        description: C(auto) or a gcc major version such as C(12).
        type: str
        default: auto
      cxx_standard:
        description: C(auto) derives it from O(gcc_plan.deepspeed_version) and O(gcc_plan.torch_version).
        type: str
        choices: [auto, c++14, c++17, c++20]
        default: auto
      deepspeed_version:
        description: The DeepSpeed version to be built (a git ref such as C(master) counts as the newest).
        type: str
      torch_version:
        description: The torch version the build uses (its cpp_extension decides C(-std)).
        type: str
      nvcc:
        description: Path to nvcc; empty searches PATH, C($CUDA_HOME/bin), C(/usr/local/cuda/bin); C(none) ignores nvcc
          (cpu builds).
        type: str
        default: ''
      available:
        description: gcc majors on offer; omitted reads C(apt-cache pkgnames g) (gcc-N and g++-N).
        type: list
        elements: int
      require_available:
        description: Fail when an explicit version is not on offer. Off before a repository (the Ubuntu PPA) is added.
        type: bool
        default: true
      probe:
        description:
          - Also report what the role would change (RV(missing), RV(selected), RV(compiler_versions)), so that a re-run
            with nothing to do needs no apt call; and, when the host has no package lists yet, return RV(index_missing)
            instead of planning (the role refreshes them and asks again).
        type: bool
        default: false
      extra_packages:
        description: Further packages the role installs (with O(gcc_plan.probe)).
        type: list
        elements: str
        default: []
      set_default:
        description:
          - Whether the role makes the chosen gcc the default through update-alternatives.
          - With V(false) the default gcc stays; O(gcc_plan.requested=auto) then returns the default gcc when it fits,
            else the newest installed C(gcc-N)/C(g++-N) pair that fits (no archive read), else the newest fitting one
            on offer; an explicit version installed already is accepted without the archive.
        type: bool
        default: true
      priority:
        description: The update-alternatives priority the role registers (with O(gcc_plan.probe)).
        type: int
        default: 60
  probe:
    description:
      - Everything role deepspeed_build decides before it builds, in one round trip.
      - Probes the interpreter the build venv is made from, the torch the build would use (the venv's, read from its dist-info,
        else pip's dry run), the cached source (its tree, sha256, digest and version), plans the build (the logic of step
        O(plan) - accelerator, arch list, ops, CPU target, compiler), computes the build key and says whether the wheel
        for that key is in the work folder, whole, and whether its wheelhouse is current.
      - Refuses, naming the variable, the bad value and the valid ones, what the plan refuses (arch list, ops, accelerator
        against nvcc and torch). Without a C compiler (before the toolchain role ran) it checks what needs none and returns
        RV(complete=false).
      - With O(probe.unpack), a cached sdist or local tarball that is not unpacked yet is unpacked into the source cache
        (a temporary folder renamed when complete); that is its only change. A local path that does not exist is refused,
        naming the variable.
      - Returns the facts the play uses (distribution, as C(setup)'s distribution subset; C(env); C(nodename)) so that the
        play gathers none.
      - Check mode - Pass O(probe.unpack=false) in check mode; then it only reads.
    type: dict
    suboptions:
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
        description: What the source was fetched from (with O(probe.source_tree)).
        type: str
        default: ''
      source_sha256:
        description: sha256 of the archive the tree came from (with O(probe.source_tree)).
        type: str
      source_commit:
        description: git commit of the tree (with O(probe.source_tree)).
        type: str
      unpack:
        description: Unpack a cached sdist or a local tarball that is not unpacked yet (else the source is not ready).
        type: bool
        default: false
      torch:
        description:
          - C({version, cuda}) of the torch an earlier probe of this run resolved; skips pip's dry run. Empty to resolve
            it here.
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
        description:
          - The torch requirement the ops compile against; C(auto) picks the build of torch 2.13.0 whose CUDA every GPU
            node's driver runs (O(probe.nodes) and this host), whose kernels cover their GPUs and that this host's nvcc
            compiles against (RV(torch_choice)). A C(+cuXYZ) build is resolved with the PyTorch index of that CUDA
            added, unless O(probe.pip_args) names an index, a find-links folder or C(--no-index) of its own.
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
      gcc:
        description: The gcc major the build compiles with (C(gcc-N), C(g++-N)); empty for the default C(gcc), C(g++).
        type: str
        default: ''
      nodes:
        description:
          - For O(probe.torch_requirement=auto) and O(probe.cuda_arch_list=auto) - the GPU nodes the wheel is for, by
            name, each as step O(gpus) answered there (C(driver), C(gpus), C(error)).
        type: dict
        default: {}
  gpus:
    description:
      - This node's NVIDIA GPUs and driver, read from nvidia-smi, as the fact C(multinode_training_gpus)
        with C(driver), C(gpus) and C(error), for O(probe.nodes). No nvidia-smi - no GPUs, no error. Read-only.
    type: dict
    suboptions:
      nvidia_smi:
        description: The nvidia-smi to run; empty finds it on PATH.
        type: str
        default: ''
  plan:
    description:
      - Decide and validate how a DeepSpeed wheel is built on this host.
      - Probes the build host (nvcc, GPUs through nvidia-smi, the C compiler and the CPU instruction set it targets with
        C(-march=native)) and resolves the build request, that is the accelerator, the C(TORCH_CUDA_ARCH_LIST), the ops
        and their C(DS_BUILD_*) variables, and the job count.
      - Fails with a message naming the variable, the bad value and the valid values when the request cannot be built here,
        so that a role can refuse before any work.
      - Read-only; never reports a change.
      - Ops are compiled one extension after the other with ninja using O(plan.jobs) parallel compiles each, not with C(build_ext
        -j), whose parallel extensions race in one build folder (DeepSpeed PR 7899).
    type: dict
    suboptions:
      phase:
        description:
          - C(inputs) checks only what needs no compiler and no source (the arch list syntax, nvcc for cuda, and torch when
            O(plan.torch) is known), so it can run before anything is installed.
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
          - C(auto) takes the union of the compute capabilities of this host's GPUs and those of O(plan.nodes) and adds
            C(+PTX) on the highest; otherwise an explicit list such as C(7.5;8.0;9.0+PTX).
          - Ignored for cpu builds.
        type: str
        default: auto
      ops:
        description:
          - Op names (C(cpu_adam), C(utils), C(fused_adam), ...; the C(DS_BUILD_*) suffix works too, for example C(shm_comm)).
            Validated against the builders in O(plan.source_dir).
          - Empty means the default for the accelerator, C(cpu_adam) and C(utils) for cuda (the classic recipe), C(cpu_adam)
            and C(deepspeed_shm_comm) for cpu (what a CPU training job loads).
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
          - The C++ compiler, exported as C(CXX). torch's extension builder otherwise calls C(c++), which only the distribution's
            g++ package provides, not a versioned g++-N.
        type: str
        default: g++
      jobs:
        description: Parallel compile jobs inside each op (C(MAX_JOBS)); 0 means the CPUs this process may use.
        type: int
        default: 0
      nodes:
        description:
          - The nodes the wheel is for, by name, each as step O(gpus) answered there (C(driver), C(gpus), C(error)).
            Their GPUs join this host's for O(plan.cuda_arch_list=auto); a node whose nvidia-smi failed refuses it.
        type: dict
        default: {}
      site_packages:
        description:
          - site-packages of the build venv once the CUDA torch is installed there. For cuda builds, headers the toolkit
            lacks (cuBLAS, cuSPARSE, cuSOLVER, cuRAND) are looked up in its C(nvidia/*/include) folders and added to C(CPATH)
            in RV(env); a header found nowhere fails naming it.
        type: path
      env:
        description: The user's extra build environment (C(CUTLASS_PATH) makes C(evoformer_attn) buildable).
        type: dict
        default: {}
      install_prerequisites:
        description: Whether the role installs libaio-dev for C(async_io)/C(gds) (else its header must be there).
        type: bool
        default: true
  stage:
    description:
      - Stage one DeepSpeed build and read the torch it compiles against, in one round trip.
      - Run by role deepspeed_build after torch is installed into the build venv, right before C(setup.py bdist_wheel).
      - Makes a clean staging folder C(<workdir>/staging) (C(src) a copy of the source tree, symlinks kept; C(dist) empty),
        writes the build helper C(<workdir>/run_logged.py) (it keeps the compiler output in a log file and prints its errors
        on failure) and reads the build venv's torch as C(import torch) would say it (C(torch.__version__), e.g. C(2.13.0+cu130),
        and C(torch.version.cuda)) from C(torch/version.py), without importing torch.
      - Fails naming the venv when it holds no torch.
      - Check mode - Reads the torch; stages nothing.
    type: dict
    suboptions:
      workdir:
        description: The role's work folder (C(venv/), C(staging/)).
        type: path
        required: true
      source_tree:
        description: The unpacked DeepSpeed source to build.
        type: path
        required: true
      venv:
        description:
          - The build venv, when not C(<workdir>/venv). Its torch is its own, or that of the environment its C(.pth) files
            add (a build against the torch already installed for a python).
        type: path
  manifest:
    description:
      - Check that a freshly built DeepSpeed wheel holds every requested op, and write its manifest.
      - Opens the wheel, looks for the compiled extension of each requested op and fails naming every missing op with the
        reason found in the build log (DeepSpeed's C(setup.py) skips an op it cannot build with only a warning; the op would
        then be JIT-compiled on every node at run time).
      - For cuda builds, reads the GPU code inside each op's extension (the ELF C(.nv_fatbin) section, without any NVIDIA
        tool), records it per op as C(cuda.sass) and C(cuda.ptx), and fails naming the op and the arch when an arch of C(info.cuda.arch_list)
        is missing from its binary.
      - Writes C(<wheel>.manifest.json) beside the wheel (see docs/manifest.md), atomically, after the checks pass. The
        manifest records the wheel's sha256, python tag and platform, and everything in O(manifest.info).
      - With O(manifest.publish_to), then moves the wheel, its build log (as C(<wheel>.build.log)) and the manifest, in
        that order, into that folder, after removing the older wheels, manifests and build logs there (manifests first),
        so that a manifest there always names a whole wheel beside it. O(manifest.remove) (the staging folder) is deleted
        after.
    type: dict
    suboptions:
      wheel:
        description: Path of the wheel on this host, or of the folder holding it (exactly one C(deepspeed-*.whl)).
        type: path
        required: true
      ops:
        description: The requested ops as returned by step O(plan) (name, builder, build_var,
          module).
        type: list
        elements: dict
        required: true
      build_log:
        description: The build's log file, searched for the reason an op is missing.
        type: path
      info:
        description: Fields merged into the manifest (deepspeed, accelerator, torch, cuda, cpu, compiler, build...).
        type: dict
        default: {}
      wheelhouse_inputs:
        description:
          - C({torch_requirement, pip_args}) of the wheelhouse collected beside the wheel; with them the module returns
            RV(wheelhouse_key), the stamp that wheelhouse must carry (module_utils/_build/deepspeed.py).
        type: dict
      publish_to:
        description: Folder the checked wheel, its build log and its manifest move into (the role's C(out/)).
        type: path
      remove:
        description: Folder deleted once the wheel is published (the build's staging folder).
        type: path
  dist_check:
    description:
      - What the controller's dist/ lacks of the build host's wheel, manifest and wheelhouse.
      - Run on the controller (C(delegate_to) localhost) by role deepspeed_build with what the build host's probe reported.
        Compares, in one call, the wheel's sha256, the manifest file's sha256 and the wheelhouse stamp with the copies in
        O(dist_check.dist_dir); the role fetches only what differs.
      - Read-only; never reports a change.
    type: dict
    suboptions:
      dist_dir:
        description: The controller folder that receives the wheel, its manifest and C(wheelhouse/).
        type: path
        required: true
      manifest:
        description: The build host's manifest.
        type: dict
        required: true
      manifest_sha256:
        description: sha256 of the build host's manifest file.
        type: str
        required: true
      wheelhouse_stamp:
        description: The build host's wheelhouse stamp; omit when no wheelhouse is kept.
        type: str
  dist_commit:
    description:
      - Move fetched files from dist/.incoming into dist/, in order, and remove .incoming.
      - Run on the controller (C(delegate_to) localhost) by role deepspeed_build after it fetched the wheel and its manifest
        into C(<dist_dir>/.incoming). Renames each of O(dist_commit.names) into O(dist_commit.dist_dir) in the order given
        (the wheel before its manifest, so that a manifest in dist/ always has its whole wheel beside it), then removes
        C(.incoming).
      - Fails naming the file when one of O(dist_commit.names) was not fetched.
      - Check mode - Reports the change; moves nothing.
    type: dict
    suboptions:
      dist_dir:
        description: The controller folder that receives the wheel and its manifest.
        type: path
        required: true
      names:
        description: File names in C(<dist_dir>/.incoming), in the order they are moved.
        type: list
        elements: str
        required: true
extends_documentation_fragment:
  - multinode.training.attributes
attributes:
  check_mode:
    support: partial
    details:
      - O(gcc_plan), O(plan) and O(dist_check) only read; O(probe) only reads with O(probe.unpack=false).
      - O(stage) reads the torch and stages nothing; O(manifest) checks the wheel and writes nothing; O(dist_commit)
        reports the move and moves nothing.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - O(gcc_plan), O(plan) and O(dist_check) never report a change; O(probe) reports one only when it unpacked an archive.
      - O(stage) starts every build from a fresh copy; O(dist_commit) moves what one fetch brought and fails on a second
        run (the roles run both only when there is something to do).
"""

EXAMPLES = r"""
- name: Newest gcc that fits DeepSpeed 0.19 and the installed CUDA
  multinode.training.deepspeed_build:
    gcc_plan:
      requested: auto
      deepspeed_version: 0.19.8
      torch_version: 2.13.0
  register: gcc_plan

- name: Is the wheel for these inputs built already?
  multinode.training.deepspeed_build:
    probe:
      version: "0.19.8"
      workdir: /var/tmp/multinode-training/deepspeed-build
      torch_requirement: torch==2.13.0
  register: probe

- name: Plan a CUDA build for the GPUs of this host
  multinode.training.deepspeed_build:
    plan:
      accelerator: cuda
      cuda_arch_list: auto
      ops: [cpu_adam, utils]
      source_dir: /var/tmp/ds/src/deepspeed-0.19.8
      torch: {version: 2.13.0+cu128, cuda: "12.8"}
  register: plan

- name: Plan a CPU build with the default ops
  multinode.training.deepspeed_build:
    plan:
      accelerator: cpu
      source_dir: /var/tmp/ds/src/deepspeed-0.19.8
      torch: {version: 2.13.0+cpu, cuda: null}

- name: Stage the build
  multinode.training.deepspeed_build:
    stage:
      workdir: /var/tmp/multinode-training/deepspeed-build
      source_tree: /var/tmp/multinode-training/deepspeed-build/src/tree-0123456789abcdef
  register: staged

- name: Check the ops and write the manifest
  multinode.training.deepspeed_build:
    manifest:
      wheel: /var/tmp/build/staging/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl
      ops: "{{ plan.ops }}"
      build_log: /var/tmp/build/staging/build.log
      info:
        accelerator: cpu
        deepspeed: {version: 0.19.8}

- name: What does dist/ lack?
  multinode.training.deepspeed_build:
    dist_check:
      dist_dir: "{{ playbook_dir }}/dist"
      manifest: "{{ probe.manifest }}"
      manifest_sha256: "{{ probe.manifest_sha256 }}"
  delegate_to: localhost
  register: dist

- name: Move into dist/, wheel first
  multinode.training.deepspeed_build:
    dist_commit:
      dist_dir: "{{ playbook_dir }}/dist"
      names: [deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl, deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.manifest.json]
  delegate_to: localhost
"""

RETURN = r"""
version:
  description: The gcc major to install.
  returned: with O(gcc_plan), success
  type: int
  sample: 12
available:
  description: gcc majors the archive offers (with a matching g++); null when it was not read (a fitting gcc kept).
  returned: with O(gcc_plan)
  type: list
  elements: int
cxx_standard:
  description: The C++ standard the ops compile with.
  returned: with O(gcc_plan)
  type: str
  sample: c++20
min_gcc:
  description: Lowest gcc major for that standard.
  returned: with O(gcc_plan)
  type: int
nvcc:
  description:
    - O(gcc_plan) - nvcc path, CUDA release and highest accepted gcc major; null without nvcc.
    - O(plan) - nvcc path and release, and the highest gcc major it accepts (null when there is no nvcc).
  returned: with O(gcc_plan) or O(plan)
  type: dict
installed:
  description: The C(gcc-N)/C(g++-N) pairs in C(/usr/bin) (majors), read with O(gcc_plan.set_default=false); null otherwise.
  returned: with O(gcc_plan)
  type: list
  elements: int
  sample: [12]
default_gcc:
  description: The default gcc's major (null without a gcc), read with O(gcc_plan.set_default=false); null otherwise.
  returned: with O(gcc_plan)
  type: int
  sample: 12
index_missing:
  description: With O(gcc_plan.probe), the host had no package lists; nothing else was decided.
  returned: with O(gcc_plan)
  type: bool
missing:
  description: With O(gcc_plan.probe), the packages of RV(packages) not installed.
  returned: with O(gcc_plan), when probe
  type: list
  elements: str
packages:
  description:
    - O(gcc_plan) - With O(gcc_plan.probe), gcc-N, g++-N and O(gcc_plan.extra_packages).
    - O(probe) - Distribution packages the build needs and the interpreter lacks.
  returned: with O(gcc_plan), when probe or O(probe)
  type: list
  elements: str
selected:
  description: With O(gcc_plan.probe), gcc-N is the selected gcc alternative at O(gcc_plan.priority) with g++-N as its slave.
  returned: with O(gcc_plan), when probe
  type: bool
compiler_versions:
  description: With O(gcc_plan.probe), C(-dumpversion) of gcc and g++ (or gcc-N, g++-N without O(gcc_plan.set_default));
    null when missing.
  returned: with O(gcc_plan), when probe
  type: dict
python:
  description: The build interpreter (version, tag, platform, pip, venv, headers).
  returned: with O(probe)
  type: dict
torch_choice:
  description:
    - The torch requirement the build uses, the pip arguments of its resolution, install and download (with the
      PyTorch index that a C(+cuXYZ) build adds), and for C(auto) why it was picked.
  returned: with O(probe)
  type: dict
  contains:
    requirement:
      description: The requirement, e.g. C(torch==2.13.0+cu126).
      type: str
    pip_args:
      description: O(probe.pip_args) and RV(torch_choice.index_args).
      type: list
      elements: str
    index_args:
      description: What a C(+cuXYZ) build adds, e.g. C(--extra-index-url https://download.pytorch.org/whl/cu126).
      type: list
      elements: str
    reason:
      description: For C(auto) - the driver, GPUs and nvcc that decided, and the builds left out with why.
      type: str
summary:
  description: What the build makes and why, one line (accelerator, ops, torch, nvcc, GPU code); empty while the
    plan has no accelerator yet.
  returned: with O(probe)
  type: str
torch:
  description:
    - O(probe) - C({version, cuda}) of the torch the build uses; empty when no pip could tell yet.
    - O(stage) - C({version, cuda}) of the venv's torch (C(torch.__version__), C(torch.version.cuda)).
  returned: with O(probe) or O(stage)
  type: dict
source:
  description: C({ready, tree, archive, sha256, spec, commit, digest, version, reason}) of the source.
  returned: with O(probe)
  type: dict
plan:
  description: The build plan (as step O(plan) returns it); null when the source is not there yet.
  returned: with O(probe)
  type: dict
complete:
  description: Whether the plan is complete (compiler present, source there, torch known) and RV(key) computed.
  returned: with O(probe)
  type: bool
key:
  description: The build key (sha256 of every input that changes the wheel), or null when not complete.
  returned: with O(probe)
  type: str
up_to_date:
  description: The work folder holds a manifest with this key and its whole wheel.
  returned: with O(probe)
  type: bool
reason:
  description: Why RV(up_to_date) is false.
  returned: with O(probe)
  type: str
manifest:
  description:
    - O(probe) - The work folder's newest manifest (whatever its key), or null.
    - O(manifest) - The manifest written (docs/manifest.md).
  returned: with O(probe) or O(manifest)
  type: dict
manifest_sha256:
  description:
    - O(probe) - sha256 of that manifest file.
    - O(manifest) - sha256 of the manifest file's text.
  returned: with O(probe) or O(manifest)
  type: str
wheelhouse_key:
  description:
    - O(probe) - The key the wheelhouse stamp must hold for this wheel.
    - O(manifest) - The wheelhouse stamp for this wheel.
  returned: with O(probe) or O(manifest), when O(manifest.wheelhouse_inputs) is given
  type: str
wheelhouse_current:
  description: The wheelhouse stamp holds RV(wheelhouse_key).
  returned: with O(probe)
  type: bool
git:
  description: Whether /usr/bin/git exists.
  returned: with O(probe)
  type: bool
pip_python:
  description: The interpreter whose pip downloads the sdist (the build venv's when it exists).
  returned: with O(probe)
  type: str
ansible_facts:
  description: The distribution facts (as C(setup) gathers them), C(env) and C(nodename).
  returned: with O(probe)
  type: dict
accelerator:
  description: The accelerator the build targets.
  returned: with O(plan)
  type: str
  sample: cpu
arch_list:
  description: TORCH_CUDA_ARCH_LIST for the build; empty for cpu builds.
  returned: with O(plan)
  type: str
  sample: 8.0;9.0+PTX
gpus:
  description: This host's GPUs seen by nvidia-smi (index, name, compute_cap).
  returned: with O(plan)
  type: list
  elements: dict
node_gpus:
  description: The GPUs of O(plan.nodes) (index, name, compute_cap), which join RV(gpus) for O(plan.cuda_arch_list=auto).
  returned: with O(plan)
  type: list
  elements: dict
ops:
  description: The ops to build, each with name, builder class, DS_BUILD_ variable and extension module.
  returned: with O(plan), when source_dir is given
  type: list
  elements: dict
  sample:
    - name: cpu_adam
      builder: CPUAdamBuilder
      build_var: DS_BUILD_CPU_ADAM
      module: deepspeed.ops.adam.cpu_adam_op
available_ops:
  description: Every op the source can prebuild for the accelerator.
  returned: with O(plan), when source_dir is given
  type: list
  elements: str
env:
  description:
    - Environment for C(setup.py bdist_wheel) (DS_ACCELERATOR, DS_BUILD_*, TORCH_CUDA_ARCH_LIST, MAX_JOBS).
    - For cuda builds also C(CUDA_HOME), the toolkit nvcc really belongs to (torch guesses it from the folder of the first
      nvcc on PATH, which is wrong for a wrapper script), and C(CPATH) when O(plan.site_packages) supplies headers.
  returned: with O(plan)
  type: dict
cpu:
  description: CPU target of the C(-march=native) build, flags in /proc/cpuinfo names.
  returned: with O(plan)
  type: dict
  sample:
    march: znver3
    simd: AVX512
    flags: [avx, avx2, avx512f, fma]
compiler:
  description: The compiler and the C++ standard the ops compile with.
  returned: with O(plan)
  type: dict
  sample:
    gcc: 12.2.0
    cxx_standard: c++20
cc:
  description: The C compiler the plan is for (O(plan.cc)), also in the plan that O(probe) returns.
  returned: with O(plan)
  type: str
  sample: gcc-12
cxx:
  description: The C++ compiler the plan is for (O(plan.cxx)), also in the plan that O(probe) returns.
  returned: with O(plan)
  type: str
  sample: g++-12
jobs:
  description: MAX_JOBS used.
  returned: with O(plan)
  type: int
staging:
  description: The staging folder (C(src/), C(dist/)).
  returned: with O(stage)
  type: str
helper:
  description: Path of the build helper.
  returned: with O(stage)
  type: str
manifest_path:
  description: Where the manifest is (in O(manifest.publish_to) when given).
  returned: with O(manifest)
  type: str
  sample: /var/tmp/build/staging/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.manifest.json
published:
  description: C({wheel, manifest_path, build_log, removed}) with O(manifest.publish_to); C(removed) are the older files'
    names.
  returned: with O(manifest), when O(manifest.publish_to) is given
  type: dict
fetch:
  description: C({wheel, manifest, wheelhouse}), true for what must be fetched (the wheel and its manifest as a pair).
  returned: with O(dist_check)
  type: dict
current:
  description: Nothing to fetch.
  returned: with O(dist_check)
  type: bool
moved:
  description: The names moved, in order.
  returned: with O(dist_commit)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils import _stepped
from ansible_collections.multinode.training.plugins.module_utils._build import gcc_plan, plan, probe, stage, wheel_manifest

STEPS = {
    "gcc_plan": (gcc_plan.ARGUMENT_SPEC, gcc_plan.run_module, {}),
    "probe": (probe.ARGUMENT_SPEC, probe.run_module, {}),
    "gpus": (probe.GPUS_SPEC, probe.run_gpus, {}),
    "plan": (plan.ARGUMENT_SPEC, plan.run_module, {}),
    "stage": (stage.STAGE_SPEC, stage.run_stage, {}),
    "manifest": (wheel_manifest.ARGUMENT_SPEC, wheel_manifest.run_module, {}),
    "dist_check": (stage.DIST_CHECK_SPEC, stage.run_dist_check, {}),
    "dist_commit": (stage.DIST_COMMIT_SPEC, stage.run_dist_commit, {}),
}


def main():
    _stepped.run(AnsibleModule(**_stepped.module_args(STEPS)), STEPS)


if __name__ == "__main__":
    main()
