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
    description: gcc majors on offer; omitted reads C(apt-cache pkgnames gcc-) and C(g++-).
    type: list
    elements: int
  require_available:
    description: Fail when an explicit version is not on offer. Off before a repository (the Ubuntu PPA) is added.
    type: bool
    default: true
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
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.multinode.training.plugins.module_utils import _toolchain
from ansible_collections.multinode.training.plugins.module_utils._nvcc import find_nvcc, probe_nvcc


def main():
    module = AnsibleModule(
        argument_spec=dict(
            requested=dict(type="str", default="auto"),
            cxx_standard=dict(type="str", default="auto", choices=["auto", "c++14", "c++17", "c++20"]),
            deepspeed_version=dict(type="str"),
            torch_version=dict(type="str"),
            nvcc=dict(type="str", default=""),
            available=dict(type="list", elements="int"),
            require_available=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    standard = p["cxx_standard"]
    if standard == "auto":
        standard = _toolchain.cxx_standard(p["deepspeed_version"], p["torch_version"])
    nvcc = None if p["nvcc"] == "none" else probe_nvcc(module, find_nvcc(module, p["nvcc"]))
    available = p["available"]
    if available is None:
        apt_cache = module.get_bin_path("apt-cache", required=True)
        names = ""
        for prefix in ("gcc-", "g++-"):
            rc, out, err = module.run_command([apt_cache, "pkgnames", prefix])
            if rc != 0:
                module.fail_json(msg="apt-cache pkgnames %s failed: %s" % (prefix, err.strip()))
            names += out
        available = _toolchain.parse_available(names)
    result = dict(changed=False, available=available, cxx_standard=standard,
                  min_gcc=_toolchain.MIN_GCC_FOR_STANDARD[standard], nvcc=nvcc)
    try:
        result["version"] = _toolchain.plan_gcc(
            p["requested"], available, standard,
            nvcc_release=nvcc and nvcc["release"], nvcc_max=nvcc and nvcc["max_gcc"],
            deepspeed_version=p["deepspeed_version"], require_available=p["require_available"])
    except _toolchain.ToolchainError as exc:
        module.fail_json(msg=str(exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
