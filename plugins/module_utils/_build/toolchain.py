# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which gcc can build a given DeepSpeed, and which gcc the installed nvcc accepts.

Two constraints bound the host compiler of a DeepSpeed op build:
- from below, the C++ standard the ops are compiled with (torch's cpp_extension and
  DeepSpeed's op builders add `-std=c++20` since torch 2.12; gcc 7 stops at C++17);
- from above, nvcc's host-compiler check (`include/crt/host_config.h`: `#if __GNUC__ > N`
  -> "unsupported GNU version"), for CUDA builds only.
"""
from __future__ import annotations

import re

# First gcc major that accepts -std=<standard> as a complete-enough language mode.
MIN_GCC_FOR_STANDARD = {"c++14": 5, "c++17": 7, "c++20": 10}
STANDARDS = ("c++14", "c++17", "c++20")

# nvcc's highest accepted gcc major, by CUDA release (from host_config.h of each
# release; torch.utils.cpp_extension.CUDA_GCC_VERSIONS keeps the same table).
# Used only when the installed toolkit's host_config.h cannot be read.
NVCC_MAX_GCC = {
    "11.0": 9, "11.1": 10, "11.2": 10, "11.3": 10, "11.4": 11, "11.5": 11,
    "11.6": 11, "11.7": 11, "11.8": 11, "12.0": 12, "12.1": 12, "12.2": 12,
    "12.3": 13, "12.4": 13, "12.5": 13, "12.6": 13, "12.8": 14, "12.9": 14,
    "13.0": 15,
}


class ToolchainError(ValueError):
    """A requested compiler cannot work; the message says why and what would."""


def parse_version(text):
    """'0.19.8' / '2.13.0+cpu' / 'v0.19.8' -> (0, 19, 8); unknown parts stop the tuple."""
    if text is None:
        return ()
    match = re.match(r"v?(\d+(?:\.\d+)*)", str(text).strip())
    if not match:
        return ()
    return tuple(int(p) for p in match.group(1).split("."))


def cxx_standard(deepspeed_version=None, torch_version=None):
    """The C++ standard DeepSpeed's ops compile with, for these versions.

    torch's cpp_extension adds -std=c++20 since 2.12 and DeepSpeed's builders follow
    torch (0.19: `-std=c++20 if torch >= 2.12 else -std=c++17`). An unknown version
    (a git branch) is taken as the newest, the safe side for a lower bound.
    """
    ds = parse_version(deepspeed_version)
    torch = parse_version(torch_version)
    if torch and torch[:2] < (2, 12):
        torch_std = "c++17" if torch[:2] >= (2, 1) else "c++14"
    else:
        torch_std = "c++20"
    if ds and ds[:2] < (0, 10):
        ds_std = "c++14"
    else:
        ds_std = "c++17"
    return max(torch_std, ds_std, key=STANDARDS.index)


def parse_nvcc_release(nvcc_version_output):
    """`nvcc --version` output -> '13.0' (None when not recognised)."""
    match = re.search(r"release (\d+)\.(\d+)", nvcc_version_output or "")
    return "%s.%s" % match.groups() if match else None


def nvcc_max_gcc_from_host_config(host_config_text):
    """Highest gcc major nvcc accepts, from host_config.h (`#if __GNUC__ > 15`)."""
    match = re.search(r"^#if __GNUC__ > (\d+)\s*$", host_config_text or "", re.MULTILINE)
    return int(match.group(1)) if match else None


def nvcc_max_gcc(release, host_config_text=None):
    """Highest gcc major for this CUDA release: host_config.h first, then the table."""
    found = nvcc_max_gcc_from_host_config(host_config_text)
    if found is not None:
        return found
    if release in NVCC_MAX_GCC:
        return NVCC_MAX_GCC[release]
    # A release newer than the table: assume it accepts what the newest known one does.
    newest = max(NVCC_MAX_GCC, key=parse_version)
    if parse_version(release) > parse_version(newest):
        return NVCC_MAX_GCC[newest]
    return None


def parse_available(pkgnames_output):
    """`apt-cache pkgnames gcc-` output -> sorted gcc majors that have both gcc-N and g++-N."""
    names = set((pkgnames_output or "").split())
    versions = set()
    for name in names:
        match = re.fullmatch(r"gcc-(\d+)", name)
        if match and ("g++-%s" % match.group(1)) in names:
            versions.add(int(match.group(1)))
    return sorted(versions)


def parse_installed(paths):
    """/usr/bin/gcc-N and /usr/bin/g++-N paths -> sorted majors N that have both."""
    names = set(p.rsplit("/", 1)[-1] for p in paths or [])
    return sorted(int(m.group(1)) for m in (re.fullmatch(r"gcc-(\d+)", n) for n in names)
                  if m and ("g++-%s" % m.group(1)) in names)


def gcc_bounds(standard, nvcc_release=None, nvcc_max=None):
    """(lowest, highest or None) gcc major: the C++ standard's floor, nvcc's ceiling (CUDA builds)."""
    return MIN_GCC_FOR_STANDARD[standard], (nvcc_max if nvcc_release else None)


def fitting(versions, low, high):
    """The majors of versions within [low, high] (high None: no ceiling)."""
    return [v for v in versions or [] if v >= low and (high is None or v <= high)]


def keep_installed(installed, default, low, high=None):
    """The gcc a build uses without changing the machine: the default gcc's major when it fits
    [low, high] (and gcc-N/g++-N name it), else the newest installed gcc-N/g++-N pair that fits;
    None when none does."""
    fits = fitting(installed, low, high)
    if default in fits:
        return default
    return max(fits) if fits else None


def plan_gcc(requested, available, standard, nvcc_release=None, nvcc_max=None, deepspeed_version=None,
             require_available=True, installed=None, default=None):
    """Choose the gcc major to install, or raise ToolchainError naming what would work.

    requested: 'auto' or an int-like; available: majors the package archive offers.
    require_available=False accepts an explicit version the archive lacks (Ubuntu: the PPA comes next).
    installed/default (the gcc-N/g++-N pairs on the host and the default gcc's major), given when the
    default is not to change: auto then keeps what is there (keep_installed) before it installs.
    """
    low, high = gcc_bounds(standard, nvcc_release, nvcc_max)
    what = "DeepSpeed %s" % deepspeed_version if deepspeed_version else "this DeepSpeed"
    reasons_low = "%s compiles its ops with -std=%s, which needs gcc >= %d" % (what, standard, low)
    reasons_high = ("nvcc %s accepts gcc <= %s" % (nvcc_release, high)) if high else None
    fits = fitting(available, low, high)
    window = "gcc %d..%s" % (low, high if high else "newest")

    if str(requested) == "auto":
        kept = keep_installed(installed, default, low, high) if installed is not None else None
        if kept is not None:
            return kept
        if not fits:
            raise ToolchainError(
                "toolchain_gcc_version=auto: no gcc in the package archive fits: %s%s; "
                "the archive offers %s. Set toolchain_gcc_version to a version in %s "
                "(on Ubuntu the ubuntu-toolchain-r PPA is added for it)."
                % (reasons_low, ("; " + reasons_high) if reasons_high else "",
                   ", ".join(map(str, available)) or "none", window))
        return max(fits)

    try:
        version = int(str(requested))
    except ValueError:
        raise ToolchainError(
            "toolchain_gcc_version=%r is not 'auto' or a gcc major version such as 12" % (requested,))
    if version < 4 or version > 99:
        raise ToolchainError(
            "toolchain_gcc_version=%d is not a gcc major version (4..99); use 'auto' or e.g. 12" % version)
    problems = []
    if version < low:
        problems.append(reasons_low)
    if high is not None and version > high:
        problems.append(reasons_high)
    if problems:
        raise ToolchainError(
            "toolchain_gcc_version=%d cannot work: %s. Versions that would: %s%s."
            % (version, "; ".join(problems), window,
               (" (in this archive: %s)" % ", ".join(map(str, fits))) if fits else ""))
    if require_available and version not in available and version not in (installed or []):
        raise ToolchainError(
            "toolchain_gcc_version=%d: gcc-%d/g++-%d are not in this host's package archive, which offers %s; "
            "versions that would work here: %s"
            % (version, version, version, ", ".join(map(str, available)) or "none",
               ", ".join(map(str, fits)) or "none (add a repository that carries one of %s)" % window))
    return version


# --------------------------------------------------------------------------- what is installed (no-change probe)

def parse_dpkg_status(dpkg_query_output):
    """`dpkg-query -W -f '${Package} ${Status}\\n' ...` -> the set of packages installed."""
    installed = set()
    for line in (dpkg_query_output or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[-3:] == ["install", "ok", "installed"]:
            installed.add(parts[0].split(":")[0])
    return installed


def parse_alternative(query_output):
    """`update-alternatives --query gcc` -> {value, alternatives: {path: {priority, slaves: {name: path}}}}."""
    result = {"value": None, "alternatives": {}}
    current = None
    in_slaves = False
    for line in (query_output or "").splitlines():
        if line.startswith("Value:"):
            result["value"] = line.split(":", 1)[1].strip()
        elif line.startswith("Alternative:"):
            current = {"priority": None, "slaves": {}}
            result["alternatives"][line.split(":", 1)[1].strip()] = current
            in_slaves = False
        elif current is not None and line.startswith("Priority:"):
            current["priority"] = int(line.split(":", 1)[1].strip())
        elif current is not None and line.startswith("Slaves:"):
            in_slaves = True
        elif current is not None and in_slaves and line.startswith(" "):
            name, _sep, path = line.strip().partition(" ")
            current["slaves"][name] = path.strip()
        else:
            in_slaves = False
    return result


def alternative_selected(query_output, gcc, priority):
    """gcc-N is registered at `priority` with g++-N as its slave, and selected."""
    parsed = parse_alternative(query_output)
    want = "/usr/bin/gcc-%s" % gcc
    entry = parsed["alternatives"].get(want) or {}
    return (parsed["value"] == want and entry.get("priority") == int(priority)
            and entry.get("slaves", {}).get("g++") == "/usr/bin/g++-%s" % gcc)
