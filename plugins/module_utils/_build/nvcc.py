# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find the CUDA toolkit's nvcc on a host and read which gcc it accepts."""
from __future__ import annotations

import os

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import toolchain


def find_nvcc(module, explicit, env=None):
    """The nvcc a build uses: ``explicit``; else the toolkit of a CUDA_HOME the user gave in ``env``
    (deepspeed_build_env, which the build's setup.py also gets: the plan must judge the nvcc the compile runs,
    not the first on PATH); else PATH, the host's $CUDA_HOME, /usr/local/cuda. None when there is none."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    given = (env or {}).get("CUDA_HOME")
    if given:
        path = os.path.join(str(given), "bin", "nvcc")
        return path if os.access(path, os.X_OK) else None
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
    release = toolchain.parse_nvcc_release(out) if rc == 0 else None
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
    cuda_home = None
    for top in candidates:
        for rel in ("include/crt/host_config.h", "targets/x86_64-linux/include/crt/host_config.h",
                    "targets/sbsa-linux/include/crt/host_config.h"):
            candidate = os.path.join(top, rel)
            if os.path.isfile(candidate):
                with open(candidate) as handle:
                    host_config = handle.read()
                cuda_home = os.path.normpath(top)
                break
        if host_config:
            break
    # The architectures this nvcc compiles for (CUDA 13 dropped everything below sm_75).
    rc3, out3, _err3 = module.run_command([path, "--list-gpu-arch"])
    archs = cuda_arch.parse_nvcc_gpu_archs(out3) if rc3 == 0 else []
    return {"path": path, "release": release, "max_gcc": toolchain.nvcc_max_gcc(release, host_config),
            # The toolkit root (CUDA_HOME): nvcc's own TOP, not the folder of a wrapper script.
            "cuda_home": cuda_home or os.path.dirname(os.path.dirname(real)), "archs": archs}


# Headers that torch's CUDA extension headers (ATen/cuda/CUDAContext.h) include.
CUDA_HEADERS = ("cuda_runtime.h", "cublas_v2.h", "cusparse.h", "cusolverDn.h", "curand.h")


def cuda_include_dirs(cuda_home, site_packages=None, needed=CUDA_HEADERS):
    """Where the headers a CUDA op build needs are: (extra include dirs, missing headers, dirs searched).

    The toolkit's own include dirs come first and need no mention (torch adds them from
    CUDA_HOME); a toolkit assembled from pip packages lacks cuBLAS/cuSPARSE/cuSOLVER/cuRAND
    headers, which the nvidia-* wheels that the CUDA torch depends on carry
    (site-packages/nvidia/cu13/include, or nvidia/<library>/include for CUDA 12 wheels).
    """
    import glob

    toolkit = [os.path.join(cuda_home, "include")] + sorted(glob.glob(os.path.join(cuda_home, "targets", "*", "include")))
    wheels = sorted(glob.glob(os.path.join(site_packages, "nvidia", "*", "include"))) if site_packages else []
    extra = []
    missing = []
    for header in needed:
        if any(os.path.isfile(os.path.join(d, header)) for d in toolkit):
            continue
        found = next((d for d in wheels if os.path.isfile(os.path.join(d, header))), None)
        if found is None:
            missing.append(header)
        elif found not in extra:
            extra.append(found)
    return extra, missing, toolkit + wheels
