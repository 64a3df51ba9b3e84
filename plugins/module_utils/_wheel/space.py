# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Disk space on a node for what role wheel_distribute copies and installs, checked before any copy.

The controller reads each wheel's installed size from its zip directory (``unpacked_size``: what pip
writes into site-packages, with the bytecode it compiles). The node's guard (module wheel_distribute (compat)) adds up what it
would receive (the controller's files whose copy there is missing or of another size) and what a new
release would unpack (the wheels whose package==version the current venv does not hold: the seed
step carries those over as hard links), and compares each filesystem's need with its free space
(``space_problems``). A node short of room is refused naming the path, the free and the needed
bytes, before the wheelhouse (about 2.4 GB with a CUDA torch) is sent to any node.
"""
from __future__ import annotations

import os
import zipfile

from ansible_collections.multinode.training.plugins.module_utils._data.sync import human
from ansible_collections.multinode.training.plugins.module_utils._node.preflight import canonicalize_name
from ansible_collections.multinode.training.plugins.module_utils._wheel.requirements import wheel_name_version

# pip compiles every .py it installs: the .pyc files take about 1.4 times the sources' bytes (measured in
# the release venv of torch 2.13.0+cpu and DeepSpeed 0.19.8 with its wheelhouse: 106 MiB of .py, 150 MiB
# of .pyc, 710 MiB of other files; 978 MiB apparent, 1,034 MiB on disk).
PYC_RATIO = 1.5
# blocks on disk against the files' bytes in that venv (small files round up to a block): 1,034 / 978
ON_DISK = 1.06


def unpacked_size(path):
    """The bytes a wheel takes once installed: its zip members' sizes, plus the bytecode pip compiles for
    its .py files (PYC_RATIO); None for a file that is not a readable zip."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (OSError, zipfile.BadZipFile):
        return None
    sources = sum(info.file_size for info in members if info.filename.endswith(".py"))
    return sum(info.file_size for info in members) + int(sources * PYC_RATIO)


def wheel_package(filename):
    """(normalized name, version) from a wheel's path (its file name: requirements.wheel_name_version), None for
    another file."""
    return wheel_name_version(os.path.basename(filename))


def installed_set(packages):
    """{(normalized name, version)} from name==version strings (the guard's venv facts)."""
    out = set()
    for entry in packages or []:
        name, _sep, version = entry.partition("==")
        out.add((canonicalize_name(name), version))
    return out


def copy_bytes(node_dir, expected):
    """Bytes of the controller's files ({relative path: {size}}) whose copy in node_dir is missing or of
    another size."""
    total = 0
    for name, entry in (expected or {}).items():
        try:
            if os.path.getsize(os.path.join(node_dir, name)) == entry["size"]:
                continue
        except OSError:
            pass
        total += int(entry["size"])
    return total


def install_bytes(unpacked, packages):
    """The disk the wheels ({relative path: installed bytes}) whose package==version is not in ``packages``
    (what the current venv or environment holds) take once installed (ON_DISK: block rounding)."""
    have = installed_set(packages)
    total = 0
    for name, size in (unpacked or {}).items():
        package = wheel_package(name)
        if package and package not in have and size:
            total += int(size)
    return int(total * ON_DISK)


def existing_dir(path):
    """The path, or its nearest existing ancestor."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return probe


def filesystem(path):
    """(device, free bytes) of the filesystem path is on (or would be: its nearest existing ancestor); free
    as statvfs's f_bavail, without the blocks reserved for root."""
    where = existing_dir(path)
    stat = os.statvfs(where)
    return os.stat(where).st_dev, stat.f_bavail * stat.f_frsize


def space_problems(node, needs, fs=filesystem):
    """Each filesystem whose free space is below what lands on it -> a refusal naming node, paths, free and
    needed bytes. ``needs``: [(path, bytes, what)]; paths on one filesystem add up."""
    by_device = {}
    for path, size, what in needs:
        if not size:
            continue
        device, free = fs(path)
        entry = by_device.setdefault(device, {"free": free, "need": 0, "parts": []})
        entry["need"] += size
        entry["parts"].append("%s %s in %s" % (human(size), what, path))
    problems = []
    for entry in by_device.values():
        if entry["need"] > entry["free"]:
            problems.append(
                "%s: not enough disk space: %s needs %s, its filesystem has %s free; valid: free %s there, or "
                "wheel_distribute_venv on a filesystem with room" % (
                    node, " and ".join(entry["parts"]), human(entry["need"]), human(entry["free"]),
                    human(entry["need"] - entry["free"])))
    return problems
