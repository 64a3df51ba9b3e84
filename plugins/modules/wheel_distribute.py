#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_distribute
short_description: Internal only - the steps of role wheel_distribute - what to send, requirements lock, one archive, node check, release seed, report
version_added: 0.1.0
description:
  - The steps role P(multinode.training.wheel_distribute#role) takes besides the install itself; each task gives
    exactly one step, as the option of that name, with the step's own options.
  - On the controller - O(source) (the wheel, manifest and wheelhouse every node gets, read and checked) and O(lock)
    (the job requirements resolved against the pinned torch and DeepSpeed, with a sha256 lock). On each node -
    O(compat) (the node against the wheel's manifest, before anything is installed), then O(seed) (a new release venv
    starts with the active release's unchanged packages). On the controller for each node that lacks files - O(pack)
    (those files as one archive). On the controller again - O(report) (the environments
    M(multinode.training.deepspeed_env_verify) returned, compared across nodes).
  - Each step returns its own values; RETURN names the step that returns each one.
  - Internal only - a play calls the role, not this module; the steps and their options change with the role's tasks.
author: multinode.training maintainers (@multinode)
options:
  source:
    description:
      - What role wheel_distribute sends to every node, read and checked on the controller in one call.
      - Chooses the manifest (explicit, beside an explicit wheel, or the newest in O(source.dist_dir)), reads and validates
        it (module_utils C(_build.manifest)), checks that the wheel exists, is the one named and has the manifest's sha256,
        and lists the wheelhouse's C(*.whl) with sha256 and size. Without O(source.index_url), the wheelhouse must hold
        the manifest's torch.
      - Fails with one message naming the file and what is wrong; the role prefixes the node.
      - Read-only; never reports a change. Run on the controller (C(delegate_to) localhost, C(run_once)).
    type: dict
    suboptions:
      dist_dir:
        description: Where the build left the wheel and its manifest.
        type: path
        required: true
      manifest:
        description: An explicit manifest; empty chooses as described above.
        type: str
        default: ''
      wheel:
        description: An explicit wheel; empty is the manifest's wheel beside it.
        type: str
        default: ''
      wheelhouse:
        description: Folder of wheels copied to every node; empty for none.
        type: str
        default: ''
      index_url:
        description: The index nodes may use; empty means offline (the wheelhouse must hold torch).
        type: str
        default: ''
      requirements_lock:
        description: The job requirements' lock on the controller (step O(lock)), sent to C(dist/).
        type: str
        default: ''
      requirement_wheels:
        description: The wheels that lock adds, sent to C(wheelhouse/).
        type: list
        elements: str
        default: []
      checksum_cache:
        description:
          - Controller file that remembers each file's sha256 with its size and modification time, so that an unchanged
            wheelhouse is not read again on every run. Empty disables it.
        type: path
        default: ~/.cache/multinode-training/wheel-sha256.json
      node:
        description: Prefix of the failure message.
        type: str
        default: ''
      existing:
        description:
          - The nodes install into their own environment, which brings torch (role variable
            C(wheel_distribute_venv_existing)); the wheelhouse's C(torch-*.whl) are not sent and none is required.
        type: bool
        default: false
  lock:
    description:
      - Resolve job requirements once against the pinned torch and DeepSpeed, with sha256 lock.
      - Runs on the controller (or the build host), once. Parses the requirements (list and file; a syntax error is refused
        naming file and line), then asks pip to resolve them together with the DeepSpeed wheel and torch, constrained to
        the exact versions of the wheelhouse (C(pip install --dry-run --report), nothing is installed).
      - A requirement that would change torch, DeepSpeed or one of their dependencies is refused naming the package and
        pip's conflict; a package or version the index lacks is refused naming it.
      - With O(lock.nodes), wheels are resolved for the nodes' platform - their one machine arch and their lowest glibc,
        as every tag such a node runs (C(--platform manylinux_2_<glibc>_<arch>) down to the oldest, the legacy
        C(manylinux2014)/C(2010)/C(1) names, C(linux_<arch>)); nodes of several archs, or without glibc, are refused
        naming them.
      - A requirement (or a dependency) pip finds no wheel of, but an sdist, is built once on the controller with
        C(pip wheel --no-deps) of the newest version the requirement allows, by a python of the nodes' version (O(lock.python)
        or C(python<X.Y>) on PATH), with the pinned torch (C(PIP_CONSTRAINT), which reaches pip's build isolation); an sdist
        that imports torch without declaring it (flash-attn, apex) is built again without build isolation in a venv of the
        wheelhouse's torch and build tools, made once. The controller must be of the nodes' arch with a glibc no newer than
        theirs. The built wheel's tags must run on every node; it goes to O(lock.build_dir) and is resolved again from
        there, so that it is downloaded into O(lock.dest) and locked with its sha256 like every other wheel. A requirement
        that cannot be built is refused naming it and why (no compiler, no nvcc, no torch to build against, the
        build's own error lines).
      - The wheels the requirements add are downloaded (C(pip download --no-deps)) into O(lock.dest) and checked against
        the sha256 in pip's report; the lock file lists every package of the environment with its sha256, for an offline
        C(pip install --no-index --require-hashes) on the nodes.
      - A lock whose recorded input digest matches (same requirements, pins, python, platform, pip arguments and wheel) and
        whose wheels are present with their sha256 is reused without running pip; nothing is downloaded or built.
      - Check mode - Resolves and reports; writes neither wheels nor the lock, and builds nothing (RV(would_build)).
    type: dict
    suboptions:
      requirements:
        description:
          - Requirement strings (PEP 508).
          - An item C(-r <path>) (pip's syntax; also C(--requirement <path>)) includes that requirements file on the
            controller, read as O(lock.requirements_file) is; a relative path is from the module's working directory.
        type: list
        elements: str
        default: []
      requirements_file:
        description: Controller path of a requirements file (one requirement per line, comments allowed); empty for none.
        type: path
      wheelhouse:
        description: Directory of the pinned wheels (torch and the DeepSpeed dependencies).
        type: path
        required: true
      deepspeed_wheel:
        description: The DeepSpeed wheel (pinned too).
        type: path
        required: true
      wheel_sha256:
        description: sha256 of the DeepSpeed wheel (from its manifest).
        type: str
        required: true
      python_version:
        description: Python version of the nodes (C(3.11)); wheels are resolved for it.
        type: str
        required: true
      dest:
        description: Directory that receives the wheels the requirements add.
        type: path
        required: true
      lock:
        description: Path of the lock file to write.
        type: path
        required: true
      pip_args:
        description: Extra arguments for pip (index options).
        type: list
        elements: str
        default: []
      python:
        description:
          - Python interpreter (with pip) that resolves and downloads; default the one running this module.
          - It also builds an sdist when it is the nodes' python version (else C(python<X.Y>) on PATH does).
        type: path
      nodes:
        description:
          - Each node's C(machine) and C(glibc) (fact C(multinode_training_platform) of M(multinode.training.node_facts)).
            Empty - no platform is given to pip (the controller's own).
        type: dict
        default: {}
      build_dir:
        description:
          - Controller folder of the wheels built from sdists, one subfolder per build key (the pins, the python, the
            platform), and of the venv with the pinned torch that builds without isolation.
        type: path
        default: ~/.cache/multinode-training/sdist-build
  pack:
    description:
      - The files a node lacks (O(pack.send), names from the O(source) step's RV(files)) as one uncompressed tar on the
        controller, for one transfer and one unpack per node (M(ansible.builtin.unarchive)) instead of a round trip per
        file.
      - The archive is named after its set (names and sha256), so nodes that lack the same files share it; it is written
        once under a lock while concurrent calls for the same set wait and reuse it. Entries are C(dist/<name>) and
        C(wheelhouse/<name>), owned by root, mode 0644.
      - Nothing is hashed here; the role checks the copy on the node against the sha256 of O(source).
      - Run on the controller (C(delegate_to) localhost) for each node; the role removes O(pack.dir) afterwards.
    type: dict
    suboptions:
      files:
        description: RV(files) of step O(source).
        type: dict
        required: true
      send:
        description: The keys of O(pack.files) the node lacks.
        type: list
        elements: str
        required: true
      dir:
        description: Controller directory for the archive (created if missing).
        type: path
        required: true
  compat:
    description:
      - Check a node against a DeepSpeed wheel manifest before anything is installed.
      - Probes the node without changing it, then compares it with the wheel manifest (see C(docs/manifest.md)) written
        by role C(deepspeed_build).
      - 'Probes: the python tag, ABI, platform and glibc of the interpreter that will create the venv, and whether it has
        C(ensurepip) (Debian and Ubuntu ship it in C(python3.X-venv)); what is at the venv
        path (absent, directory, file) with the torch version (and the CUDA version torch was built for) already installed
        there, read from its C(dist-info) without importing it; each GPU''s compute capability from C(nvidia-smi --query-gpu=name,compute_cap
        --format=csv,noheader) when C(nvidia-smi) is on the PATH; the CPU flags of C(/proc/cpuinfo).'
      - 'Checks: wheel tags vs interpreter; torch (and CUDA for cuda builds) vs the manifest; every GPU covered by the GPU
        code that the build read from each op''s binary (C(ops[].cuda) in the manifest; the CUDA arch list for older manifests):
        SASS of the same major and a lower or equal minor, or PTX of a lower or equal arch, accepted with a warning that
        the driver JIT-compiles it on first use; every CPU flag the build assumed present; a usable venv path; an
        interpreter that can make the venv (C(ensurepip)), unless the environment is the node''s own.'
      - On a node without GPUs the GPU check is skipped with a warning; a wheel of another accelerator (cpu) on a node
        with GPUs is refused; so is a node whose NVIDIA driver (C(nvidia-smi --query-gpu=driver_version)) is older than
        NVIDIA's minimum for the CUDA major release of the wheel's torch (module_utils C(_wheel.driver), with its source).
      - Each problem names the node, what the wheel needs and what the node has. The module never fails on an incompatible
        node; it returns the problems so that a play can report all nodes at once.
      - Runs C(python -c) on the given interpreter and C(nvidia-smi) when present; nothing else.
    type: dict
    suboptions:
      manifest:
        description: The wheel manifest, as parsed JSON.
        type: dict
        required: true
      venv:
        description: Path of the virtual environment the wheel will be installed into.
        type: path
        required: true
      python:
        description: Interpreter that creates the venv; its tags decide which wheels fit.
        type: path
        default: /usr/bin/python3
      cpuinfo_path:
        description: File read for the CPU flags. Only tests point it elsewhere.
        type: path
        default: /proc/cpuinfo
      node:
        description: Name used in the messages; defaults to the host name the module sees.
        type: str
      node_dir:
        description:
          - The node folder the role copies into (C(dist/), C(wheelhouse/)) and records the verified copy in.
          - With O(compat.expected_files), the module also says whether the node is current (RV(current)).
        type: path
      expected_files:
        description: The files the node must hold, C(dist/<name>) or C(wheelhouse/<name>) mapped to C(sha256) and C(size)
          (step O(source)).
        type: dict
      lock_sha256:
        description: sha256 of the job requirements lock the venv must have been installed with (empty for none).
        type: str
        default: ''
      lock_packages:
        description:
          - The job requirements' lock as C(name==version), every package of the environment. The venv must hold exactly
            these (its seed packages pip and setuptools excepted), or it is neither RV(installed) nor RV(current). Omitted
            without job requirements.
        type: list
        elements: str
      existing:
        description:
          - O(compat.venv) is an existing environment (a venv, a conda env, an NGC container's prefix) that the wheel is
            installed into in place, not a release venv to make.
          - Its own C(bin/python) is probed instead of O(compat.python) (tags), and asked through C(importlib.metadata)
            for its torch, its packages and where its DeepSpeed is; it must hold the wheel's torch. Its marker is
            O(compat.marker).
        type: bool
        default: false
      marker:
        description: With O(compat.existing), the node path of the marker of its verified install (required then).
        type: path
      overlay:
        description:
          - With O(compat.existing), the path of the environment's overlay (filter
            P(multinode.training.env_overlay#filter)) - the venv of the environment's python that holds the wheel; the
            environment is probed through it once it exists, and RV(overlay) says what the install writes for it.
        type: path
      unpacked:
        description:
          - Each wheel's installed size in bytes (relative path as in O(compat.expected_files), the C(unpacked) that
            O(source) returns). With it, a node that is not current is refused when a filesystem lacks room for what
            lands there - the copies it lacks (in O(compat.node_dir)) and what the install unpacks (a new release
            beside O(compat.venv), less what the seed links over; in place in an existing environment, less what
            it holds) - naming the paths, the free and the needed space.
        type: dict
  seed:
    description:
      - A new release venv (just made by C(python -m venv)) gets, as hard links, the packages that the active release
        and the new lock pin to the same wheel (name, version and sha256), so that pip then installs only what changed
        (a requirement added or changed installs that package, not torch again).
      - Carried over only when the active release recorded its lock (C(.multinode-training.requirements.lock) in it), both
        venvs were made by the same interpreter (C(pyvenv.cfg)), and every file the package's dist-info RECORD lists is
        there with RECORD's hash; console scripts get the new release's interpreter (and their RECORD line the new hash).
        A file two packages share is linked once. Anything else is left to pip.
      - The active release is only read; pip and Python never change an installed file in place, so shared files stay
        the same in both. Run on the node, as root, before pip installs the lock.
    type: dict
    suboptions:
      venv:
        description: The venv path (the role's symlink to the active release).
        type: path
        required: true
      release:
        description: The new release venv.
        type: path
        required: true
      lock:
        description: The lock the new release is installed from (on the node).
        type: path
        required: true
  report:
    description:
      - Consistency report of python, torch, DeepSpeed and ops across nodes.
      - Takes the per-node environment summaries returned by M(multinode.training.deepspeed_env_verify) and compares python
        version, torch (and its CUDA), DeepSpeed version, the loaded ops and the wheel sha256 across nodes.
      - The value most nodes share is the reference; every node with another value is named.
      - Pure computation; run it once, on the controller (C(run_once), C(delegate_to=localhost)).
    type: dict
    suboptions:
      envs:
        description: Mapping of node name to its environment summary.
        type: dict
        required: true
      expected:
        description: Nodes that should have reported; a node listed here but absent from O(report.envs) is named as missing.
        type: list
        elements: str
        default: []
      fail_on_difference:
        description: Fail, naming the differing nodes, when the environments are not identical.
        type: bool
        default: true
extends_documentation_fragment:
  - multinode.training.attributes
attributes:
  check_mode:
    support: partial
    details:
      - O(source), O(compat) and O(report) only read.
      - O(lock) resolves and reports; it writes neither wheels nor the lock.
      - O(pack) writes its archive in check mode too (a controller file the role removes).
      - O(seed) in check mode names what it would carry over and writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - O(source), O(compat), O(pack) and O(report) never report a change.
      - O(seed) fills a new release once; run again, every file is there and nothing is carried (changed=false).
      - O(lock) reuses the lock and the downloaded wheels for the same inputs (changed=false, no pip run, nothing built).
"""

EXAMPLES = r"""
- name: What goes to the nodes
  multinode.training.wheel_distribute:
    source:
      dist_dir: "{{ playbook_dir }}/dist"
      wheelhouse: "{{ playbook_dir }}/dist/wheelhouse"
  delegate_to: localhost
  run_once: true
  register: source

- name: Resolve accelerate against the pinned torch
  multinode.training.wheel_distribute:
    lock:
      requirements: [accelerate, tabulate==0.9.0]
      wheelhouse: /srv/dist/wheelhouse
      deepspeed_wheel: /srv/dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl
      wheel_sha256: "{{ manifest.wheel_sha256 }}"
      python_version: "3.11"
      dest: /srv/dist/requirements
      lock: /srv/dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.requirements.lock
  delegate_to: localhost
  run_once: true

- name: Check the node against the manifest
  multinode.training.wheel_distribute:
    compat:
      manifest: "{{ lookup('ansible.builtin.file', 'dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.manifest.json') | from_json }}"
      venv: /opt/multinode-training/venv
      node: "{{ inventory_hostname }}"
  register: compat

- name: Refuse an incompatible node
  ansible.builtin.fail:
    msg: "{{ compat.problems | join('; ') }}"
  when: not compat.compatible

- name: Environments identical on every node
  multinode.training.wheel_distribute:
    report:
      envs: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'wheel_distribute_env'))) }}"
      expected: "{{ ansible_play_hosts_all }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
manifest:
  description: The manifest.
  returned: with O(source), success
  type: dict
manifest_path:
  description: Its path on the controller.
  returned: with O(source), success
  type: str
wheel_path:
  description: The wheel's path on the controller.
  returned: with O(source), success
  type: str
files:
  description:
    - Every file each node gets, C(dist/<name>) or C(wheelhouse/<name>) mapped to its C(sha256), C(size), C(src) and,
      for a wheel, C(unpacked) (its installed size).
  returned: with O(source), success
  type: dict
record:
  description: RV(files) without the controller paths, as a node records them after a verified copy.
  returned: with O(source), success
  type: dict
unpacked:
  description: Each wheel of RV(files) mapped to its installed size in bytes (the sum of its zip members' sizes).
  returned: with O(source), success
  type: dict
overlay:
  description:
    - With O(compat.existing) and O(compat.overlay) - C(path), C(pth) (the .pth file in its site-packages) and C(pth_text)
      (the line that adds the environment's site directories after the overlay's own); null otherwise.
  returned: with O(compat)
  type: dict
lock:
  description: Path of the lock file.
  returned: with O(lock)
  type: str
lock_sha256:
  description: sha256 of the lock file (names the node release).
  returned: with O(lock)
  type: str
entries:
  description: Every package of the environment, with C(name), C(version), C(filename), C(sha256), C(pinned).
  returned: with O(lock)
  type: list
  elements: dict
added:
  description: Controller paths of the wheels the requirements add (not in the wheelhouse).
  returned: with O(lock)
  type: list
  elements: str
downloaded:
  description: File names downloaded in this run (empty on a re-run).
  returned: with O(lock)
  type: list
  elements: str
built:
  description: File names of the wheels built from sdists in this run (empty on a re-run).
  returned: with O(lock)
  type: list
  elements: str
would_build:
  description: In check mode, the C(name==version) that would be built from an sdist (the resolution stops there).
  returned: with O(lock), in check mode, when an sdist would be built
  type: list
  elements: str
platform:
  description: The C(--platform) tags the requirements were resolved for (empty without O(lock.nodes)).
  returned: with O(lock)
  type: list
  elements: str
requirements:
  description: The parsed requirements with their source and line.
  returned: with O(lock)
  type: list
  elements: dict
cmd:
  description: The pip resolution command (absent when the lock was reused).
  returned: with O(lock), when pip ran
  type: list
  elements: str
archive:
  description: Controller path of the tar holding the files of O(pack.send).
  returned: with O(pack), success
  type: str
made:
  description: Whether this call wrote the archive (false - another node's call had made it).
  returned: with O(pack), success
  type: bool
bytes:
  description: Size of the archive.
  returned: with O(pack), success
  type: int
count:
  description: Number of files in the archive.
  returned: with O(pack), success
  type: int
compatible:
  description: True when no problem was found.
  returned: with O(compat)
  type: bool
  sample: false
problems:
  description: One message per problem, each naming the node, what the wheel needs and what the node has.
  returned: with O(compat)
  type: list
  elements: str
  sample:
    - 'node3: wheel needs torch 2.13.0+cpu, node''s venv /opt/multinode-training/venv has torch 2.12.0 (...)'
python:
  description: The interpreter's version, implementation, python tag, ABI tag, platform tag, glibc, executable, stdlib
    directory and whether C(ensurepip) is there.
  returned: with O(compat)
  type: dict
  sample:
    version: 3.11.2
    tag: cp311
    abi: cp311
    platform: linux_x86_64
    glibc: '2.36'
    stdlib: /usr/lib/python3.11
    ensurepip: true
venv:
  description: What is at the venv path.
  returned: with O(compat)
  type: dict
  contains:
    path:
      description: The path probed.
      type: str
    state:
      description: C(absent), C(directory), C(file) or C(other).
      type: str
    symlink:
      description: Whether the path is a symlink (the role's release layout).
      type: bool
    target:
      description: Where the symlink resolves to, or null.
      type: str
    marker:
      description: Content of C(.multinode-training.json) left by a previous install, or null.
      type: dict
    torch:
      description: Version of torch installed there (from its dist-info METADATA), or null.
      type: str
    torch_cuda:
      description: CUDA version that torch was built with, null for a CPU build or no torch.
      type: str
    packages:
      description: Every distribution in the venv's site-packages, as sorted C(name==version) (dist-info METADATA).
      type: list
      elements: str
installed:
  description:
    - True when the venv already holds this wheel (same sha256), verified by a previous run, installed with O(compat.lock_sha256)
      and holding exactly O(compat.lock_packages).
  returned: with O(compat)
  type: bool
gpus:
  description: GPUs reported by nvidia-smi, empty without nvidia-smi.
  returned: with O(compat)
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA H100 80GB HBM3
      compute_cap: '9.0'
notes:
  description: Warnings for an accepted node (PTX-only coverage, GPU check skipped); also issued as warnings.
  returned: with O(compat)
  type: list
  elements: str
current:
  description:
    - The node needs nothing (with O(compat.expected_files)) - its venv is this wheel's verified release (marker), the op
      binaries installed match the wheel's RECORD, and the copies in O(compat.node_dir) are the recorded ones.
  returned: with O(compat)
  type: bool
current_problems:
  description: Why the node is not current.
  returned: with O(compat)
  type: list
  elements: str
env:
  description: For a current node, the environment its verified install recorded (python, torch, DeepSpeed, ops, wheel sha256).
  returned: with O(compat)
  type: dict
cpu_flags_missing:
  description: CPU flags from the manifest that the node's cpuinfo lacks.
  returned: with O(compat)
  type: list
  elements: str
commands:
  description: The commands the module ran, as argument lists.
  returned: with O(compat)
  type: list
  elements: list
carried:
  description: The packages O(seed) carried over from the active release, as C(name==version).
  returned: with O(seed)
  type: list
  elements: str
  sample: [torch==2.13.0+cpu, numpy==2.3.4]
skipped:
  description: Packages both locks pin alike that O(seed) left to pip, each with why.
  returned: with O(seed)
  type: list
  elements: str
reason:
  description: Why O(seed) carried nothing over (no recorded lock, another interpreter, ...), or null.
  returned: with O(seed)
  type: str
source:
  description: The active release O(seed) carried packages from.
  returned: with O(seed), when it could seed
  type: str
consistent:
  description: True when every field is identical on every node and no expected node is missing.
  returned: with O(report)
  type: bool
differences:
  description: One message per deviating group of nodes, naming them, the field, their value and the reference.
  returned: with O(report)
  type: list
  elements: str
  sample:
    - node3 has torch 2.12.0, 2 node(s) have 2.13.0+cpu
lines:
  description: The report, one line per field.
  returned: with O(report)
  type: list
  elements: str
fields:
  description: Per field, each value with the nodes that have it.
  returned: with O(report)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils import _stepped
from ansible_collections.multinode.training.plugins.module_utils._wheel import dist, lock, node_probe, pack, seed, verify

STEPS = {
    "source": (dist.ARGUMENT_SPEC, dist.run_module, {}),
    "lock": (lock.ARGUMENT_SPEC, lock.run_module, {}),
    "pack": (pack.ARGUMENT_SPEC, pack.run_module, {}),
    "compat": (node_probe.ARGUMENT_SPEC, node_probe.run_module, {}),
    "seed": (seed.ARGUMENT_SPEC, seed.run_module, {}),
    "report": (verify.REPORT_SPEC, verify.run_report_module, {}),
}


def main():
    _stepped.run(AnsibleModule(**_stepped.module_args(STEPS)), STEPS)


if __name__ == "__main__":
    main()
