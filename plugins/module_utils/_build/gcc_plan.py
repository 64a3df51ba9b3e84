# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module deepspeed_build's gcc_plan step, one round trip: the C++ standard, nvcc, the gcc versions apt offers, the
gcc to install, and (with probe) what the toolchain role would change.

plugins/modules/deepspeed_build.py documents it and runs ``run_module`` as its gcc_plan step (module_utils/_stepped.py).
The decisions are _build/toolchain.py's; nvcc is probed by _build/nvcc.py.
"""
from __future__ import annotations

import glob

from ansible_collections.multinode.training.plugins.module_utils._build import toolchain
from ansible_collections.multinode.training.plugins.module_utils._build.nvcc import find_nvcc, probe_nvcc

ARGUMENT_SPEC = dict(
    requested=dict(type="str", default="auto"),
    cxx_standard=dict(type="str", default="auto", choices=["auto", "c++14", "c++17", "c++20"]),
    deepspeed_version=dict(type="str"),
    torch_version=dict(type="str"),
    nvcc=dict(type="str", default=""),
    available=dict(type="list", elements="int"),
    require_available=dict(type="bool", default=True),
    probe=dict(type="bool", default=False),
    extra_packages=dict(type="list", elements="str", default=[]),
    set_default=dict(type="bool", default=True),
    priority=dict(type="int", default=60),
)


def apt_gcc_versions(module):
    """The gcc-N versions apt-cache knows."""
    apt_cache = module.get_bin_path("apt-cache", required=True)
    # One call for both gcc-N and g++-N: apt-cache builds its cache in memory on every call.
    rc, names, err = module.run_command([apt_cache, "pkgnames", "g"])
    if rc != 0:
        module.fail_json(msg="apt-cache pkgnames g failed: %s" % err.strip())
    return toolchain.parse_available(names)


def probe_installed(module, version, p):
    """What the role would change: packages missing, alternative not selected, and the compilers' versions."""
    packages = ["gcc-%s" % version, "g++-%s" % version] + p["extra_packages"]
    _rc, out, _err = module.run_command(["dpkg-query", "-W", "-f", "${Package} ${Status}\\n"] + packages)
    installed = toolchain.parse_dpkg_status(out)
    found = dict(packages=packages, missing=[name for name in packages if name not in installed])
    found["selected"] = True
    if p["set_default"]:
        _rc, out, _err = module.run_command(["update-alternatives", "--query", "gcc"])
        found["selected"] = toolchain.alternative_selected(out, version, p["priority"])
    compilers = ["gcc", "g++"] if p["set_default"] else ["gcc-%s" % version, "g++-%s" % version]
    found["compiler_versions"] = {}
    for name in compilers:
        path = module.get_bin_path(name)
        rc, out, _err = module.run_command([path, "-dumpversion"]) if path else (1, "", "")
        found["compiler_versions"][name] = out.strip() if rc == 0 else None
    return found


def installed_gcc(module):
    """The gcc-N/g++-N pairs in /usr/bin and the default gcc's major (None without a gcc)."""
    installed = toolchain.parse_installed(glob.glob("/usr/bin/gcc-[0-9]*") + glob.glob("/usr/bin/g++-[0-9]*"))
    path = module.get_bin_path("gcc")
    rc, out, _err = module.run_command([path, "-dumpversion"]) if path else (1, "", "")
    major = toolchain.parse_version(out)[:1] if rc == 0 else ()
    return installed, (major[0] if major else None)


def run_module(module):
    p = module.params
    standard = p["cxx_standard"]
    if standard == "auto":
        standard = toolchain.cxx_standard(p["deepspeed_version"], p["torch_version"])
    nvcc = None if p["nvcc"] == "none" else probe_nvcc(module, find_nvcc(module, p["nvcc"]))
    nvcc_release, nvcc_max = nvcc and nvcc["release"], nvcc and nvcc["max_gcc"]
    installed = default = kept = None
    if not p["set_default"]:
        # The default stays: a fitting gcc already there is used as it is (no index, no install).
        installed, default = installed_gcc(module)
        if p["requested"] == "auto":
            kept = toolchain.keep_installed(installed, default, *toolchain.gcc_bounds(standard, nvcc_release, nvcc_max))
    available = p["available"]
    if available is None and kept is None:
        if p["probe"] and not glob.glob("/var/lib/apt/lists/*_Packages*"):
            # Container images often ship without package lists: the role refreshes them and asks again.
            module.exit_json(changed=False, index_missing=True, available=[], cxx_standard=standard, nvcc=nvcc)
        available = apt_gcc_versions(module)
    # available stays None when a kept gcc made the archive unnecessary (it was not read)
    result = dict(changed=False, available=available, cxx_standard=standard,
                  min_gcc=toolchain.MIN_GCC_FOR_STANDARD[standard], nvcc=nvcc,
                  installed=installed, default_gcc=default)
    try:
        result["version"] = toolchain.plan_gcc(
            p["requested"], available or [], standard, nvcc_release=nvcc_release, nvcc_max=nvcc_max,
            deepspeed_version=p["deepspeed_version"], require_available=p["require_available"],
            installed=installed, default=default)
    except toolchain.ToolchainError as exc:
        module.fail_json(msg=str(exc), **result)
    if p["probe"]:
        result.update(probe_installed(module, result["version"], p))
    module.exit_json(index_missing=False, **result)
