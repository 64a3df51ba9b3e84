#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: toolchain_gcc_plan
short_description: Choose the gcc that can build DeepSpeed's ops and that nvcc accepts
version_added: 0.1.0
description:
  - Reads the gcc versions the package archive offers (C(apt-cache pkgnames gcc-) and C(g++-)), the C++ standard
    DeepSpeed compiles its ops with, and the highest gcc the installed nvcc accepts
    (C(include/crt/host_config.h)).
  - With O(requested=auto) returns the newest gcc that satisfies both; with an explicit version,
    returns it or fails with a message that names the versions that would work.
  - Read-only; never reports a change.
author: multinode.training maintainers (@multinode)
options:
  requested:
    description: C(auto) or a gcc major version such as C(12).
    type: str
    default: auto
  cxx_standard:
    description: C(auto) derives it from O(deepspeed_version) and O(torch_version).
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
    description: Path to nvcc; empty searches PATH, C($CUDA_HOME/bin), C(/usr/local/cuda/bin); C(none) ignores nvcc (cpu builds).
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
      - Also report what the role would change (RV(missing), RV(selected), RV(compiler_versions)), so that a
        re-run with nothing to do needs no apt call; and, when the host has no package lists yet, return
        RV(index_missing) instead of planning (the role refreshes them and asks again).
    type: bool
    default: false
  extra_packages:
    description: Further packages the role installs (with O(probe)).
    type: list
    elements: str
    default: []
  set_default:
    description: Whether the role makes the chosen gcc the default through update-alternatives (with O(probe)).
    type: bool
    default: true
  priority:
    description: The update-alternatives priority the role registers (with O(probe)).
    type: int
    default: 60
extends_documentation_fragment:
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: Newest gcc that fits DeepSpeed 0.19 and the installed CUDA
  multinode.training.toolchain_gcc_plan:
    requested: auto
    deepspeed_version: 0.19.8
    torch_version: 2.13.0
  register: gcc_plan
"""

RETURN = r"""
version:
  description: The gcc major to install.
  returned: success
  type: int
  sample: 12
available:
  description: gcc majors the archive offers (with a matching g++).
  returned: always
  type: list
  elements: int
cxx_standard:
  description: The C++ standard the ops compile with.
  returned: always
  type: str
  sample: c++20
min_gcc:
  description: Lowest gcc major for that standard.
  returned: always
  type: int
nvcc:
  description: nvcc path, CUDA release and highest accepted gcc major; null without nvcc.
  returned: always
  type: dict
index_missing:
  description: With O(probe), the host had no package lists; nothing else was decided.
  returned: always
  type: bool
missing:
  description: With O(probe), the packages of RV(packages) not installed.
  returned: when probe
  type: list
  elements: str
packages:
  description: With O(probe), gcc-N, g++-N and O(extra_packages).
  returned: when probe
  type: list
  elements: str
selected:
  description: With O(probe), gcc-N is the selected gcc alternative at O(priority) with g++-N as its slave.
  returned: when probe
  type: bool
compiler_versions:
  description: With O(probe), C(-dumpversion) of gcc and g++ (or gcc-N, g++-N without O(set_default)); null when missing.
  returned: when probe
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._build.gcc_plan import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
