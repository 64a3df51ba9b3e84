# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does a wheel's file name (python tag, ABI, platform) fit the interpreter a node reported?

Pure functions on the wheel's name and the node's interpreter facts (_wheel/node_probe.py's
INTERPRETER_SCRIPT); every problem names the node, the variable and what is valid.
"""
from __future__ import annotations

import json
import re


def _version_tuple(text):
    nums = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in nums[:3])


def parse_wheel_filename(filename):
    """Split a wheel file name (PEP 427) into its parts; tag fields are lists.

    >>> parse_wheel_filename("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl")["python"]
    ['cp311']
    """
    name = filename.rsplit("/", 1)[-1]
    if not name.endswith(".whl"):
        raise ValueError("not a wheel file name (no .whl suffix): %s" % name)
    parts = name[:-4].split("-")
    if len(parts) == 6:
        dist, version, build, py, abi, plat = parts
    elif len(parts) == 5:
        dist, version, py, abi, plat = parts
        build = None
    else:
        raise ValueError("not a wheel file name (expected 5 or 6 dash-separated fields): %s" % name)
    return {
        "distribution": dist,
        "version": version,
        "build": build,
        "python": py.split("."),
        "abi": abi.split("."),
        "platform": plat.split("."),
    }


_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(.+)$")
# PEP 600's legacy aliases and the glibc each stands for (packaging.tags._manylinux's map).
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _platform_ok(tag, node):
    """Does a wheel platform tag run on the node (platform like linux_x86_64, glibc '2.36')?"""
    if tag == "any":
        return True
    if tag == node.get("platform"):
        return True
    arch = (node.get("platform") or "").partition("_")[2]
    glibc = _version_tuple(node.get("glibc") or "")
    match = _MANYLINUX.match(tag)
    if match:
        need, tag_arch = (int(match.group(1)), int(match.group(2))), match.group(3)
    else:
        legacy, _sep, tag_arch = tag.partition("_")
        if legacy not in LEGACY_MANYLINUX:
            return False
        need = LEGACY_MANYLINUX[legacy]
    return bool(glibc) and tag_arch == arch and glibc >= need


def _python_ok(tag, node):
    major, minor = (node.get("version") or "0.0").split(".")[:2]
    impl = node.get("implementation", "cp")
    return tag in ("py%s" % major, "py%s%s" % (major, minor), "%s%s%s" % (impl, major, minor))


def _abi_ok(tag, node):
    return tag in ("none", "abi3", node.get("abi"))


def tag_mismatches(wheel_name, python_facts):
    """The wheel's tag fields that no tag of the interpreter matches, as ``platform linux_aarch64`` etc."""
    wheel = parse_wheel_filename(wheel_name)
    missing = []
    for field, accepts in (("python", _python_ok), ("abi", _abi_ok), ("platform", _platform_ok)):
        if not any(accepts(t, python_facts) for t in wheel[field]):
            missing.append("%s %s" % (field, ".".join(wheel[field])))
    return missing


def wheel_tag_problems(wheel_name, python_facts, node):
    """Problems running a wheel on a node's interpreter (python tag, ABI, platform)."""
    tags = parse_wheel_filename(wheel_name)
    have = "python %s (%s, abi %s) on %s" % (
        python_facts.get("version"), python_facts.get("tag"), python_facts.get("abi"),
        python_facts.get("platform"))
    if python_facts.get("glibc"):
        have += " with glibc %s" % python_facts["glibc"]
    problems = []
    # named by the variable that chose the interpreter (``<node>: wheel_distribute_python="...": ...; valid: ...``)
    where = "%s: wheel_distribute_python=%s" % (node, json.dumps(python_facts.get("executable") or "python"))
    if not any(_python_ok(t, python_facts) for t in tags["python"]):
        problems.append("%s: wheel %s needs python tag %s, this interpreter has %s; valid: an interpreter of "
                        "python tag %s on every node, or a wheel built with this one" % (
                            where, wheel_name, ".".join(tags["python"]), have, ".".join(tags["python"])))
    elif not any(_abi_ok(t, python_facts) for t in tags["abi"]):
        problems.append("%s: wheel %s needs ABI %s, this interpreter has %s; valid: an interpreter of ABI %s on "
                        "every node, or a wheel built with this one" % (
                            where, wheel_name, ".".join(tags["abi"]), have, ".".join(tags["abi"])))
    if not any(_platform_ok(t, python_facts) for t in tags["platform"]):
        problems.append("%s: wheel %s needs platform %s, node has %s; valid: nodes of platform %s, or a wheel "
                        "built on one like this" % (
                            where, wheel_name, ".".join(tags["platform"]), have, ".".join(tags["platform"])))
    return problems
