# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find the CUDA toolkit's nvcc on a host and read which gcc it accepts."""
from __future__ import annotations

import os

from ansible_collections.multinode.training.plugins.module_utils import _toolchain


def find_nvcc(module, explicit):
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = module.get_bin_path("nvcc")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if base and os.access(os.path.join(base, "bin", "nvcc"), os.X_OK):
            return os.path.join(base, "bin", "nvcc")
    return None


def probe_nvcc(module, path):
    if not path:
        return None
    rc, out, _err = module.run_command([path, "--version"])
    release = _toolchain.parse_nvcc_release(out) if rc == 0 else None
    if not release:
        return None
    # nvcc may be a wrapper script; the toolkit is where the real binary lives.
    real = os.path.realpath(path)
    # --dryrun prints the toolkit root ("#$ TOP=...") without compiling anything.
    _rc2, out2, _err2 = module.run_command([path, "--dryrun", "-x", "cu", "-E", "/dev/null"])
    candidates = [os.path.dirname(os.path.dirname(real))]
    for line in (out2 or "").splitlines() + (_err2 or "").splitlines():
        if "TOP=" in line:
            candidates.insert(0, line.split("TOP=", 1)[1].strip().strip('"'))
    host_config = None
    for top in candidates:
        for rel in ("include/crt/host_config.h", "targets/x86_64-linux/include/crt/host_config.h",
                    "targets/sbsa-linux/include/crt/host_config.h"):
            candidate = os.path.join(top, rel)
            if os.path.isfile(candidate):
                with open(candidate) as handle:
                    host_config = handle.read()
                break
        if host_config:
            break
    return {"path": path, "release": release, "max_gcc": _toolchain.nvcc_max_gcc(release, host_config)}
