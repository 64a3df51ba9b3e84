# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job requirement with no wheel for the nodes but an sdist: build it once on the controller.

Pure functions (no subprocess): the lock step (_wheel/lock.py) runs pip and hands its output here.
- which requirements pip found no wheel for, and whether the index has an sdist of them (pip's
  ``-vv`` "Skipping link: No sources permitted for <name>: <url>", recorded in
  tests/fixtures/sdist/);
- whether the controller can build for the nodes (its python X.Y, its arch, its glibc not newer than
  the nodes' lowest: a wheel built here links against the controller's glibc);
- why a build failed (compiler, nvcc, torch, else the build's last lines);
- whether the built wheel's tags run on every node (_wheel/tags.py).
"""
from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import unquote

from ansible_collections.multinode.training.plugins.module_utils._wheel import node_platform, tags
from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs
from ansible_collections.multinode.training.plugins.module_utils._wheel.requirements import canonicalize_name

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - packaging ships with ansible-core
    Requirement = None

# How many sdists one lock may build (each round of pip's resolution names the next missing one).
MAX_BUILDS = 8
# What a build environment needs besides torch when the sdist imports torch without declaring it
# (flash-attn, apex: "pip install --no-build-isolation"): those the wheelhouse pins.
BUILD_ENV_PACKAGES = ("setuptools", "wheel", "packaging", "ninja", "numpy", "psutil")
_SKIPPED_SDIST = re.compile(r"Skipping link: No sources permitted for (\S+): (\S+)")
_COMPILER = re.compile(r"^(?:[\w.-]+-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(?:-[\d.]+)?$")
# pip's own lines around a failed build
_NOISE = ("note: This error originates from a subprocess", "note: This is an issue with the package", "╰─>", "│",
          "×", "error: subprocess-exited-with-error", "error: metadata-generation-failed", "See above for",
          "ERROR: Failed to build", "ERROR: Failed building wheel", "Failed to build", "hint:",
          "ERROR: Could not build wheels", "Running setup.py clean", "Building wheel for", "Created wheel for",
          "Stored in directory", "Processing ", "Looking in links", "Looking in indexes", "Preparing metadata",
          "Building wheels for collected", "Encountered error while")
_SDIST_EXT = (".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar")


def spec_name(spec):
    """'flash-attn>=2.7 ; python_version>"3"' -> 'flash-attn' (canonical)."""
    return canonicalize_name(reqs.spec_name(spec))


def missing_specs(output):
    """pip's output of a failed binary-only resolution -> the requirement specs it found no wheel for."""
    found = []
    for line in output.splitlines():
        match = reqs.NO_DISTRIBUTION_RE.match(line.strip())
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return found


def sdist_versions(output, name):
    """pip's ``-vv`` output of a binary-only query -> [(version, url)] of the sdists it skipped for ``name``."""
    want, found = canonicalize_name(name), []
    for line in output.splitlines():
        match = _SKIPPED_SDIST.search(line)
        if not match or canonicalize_name(match.group(1)) != want:
            continue
        url = match.group(2)
        filename = unquote(url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1])
        stem = next((filename[:-len(ext)] for ext in _SDIST_EXT if filename.endswith(ext)), None)
        if stem is None or "-" not in stem:
            continue
        project, version = stem.rsplit("-", 1)
        if canonicalize_name(project) == want and (version, url) not in found:
            found.append((version, url))
    return found


def pick_version(versions, spec):
    """The newest version of [(version, url)] that the requirement spec allows (no pre-release unless the
    spec asks for one or nothing else fits), or None."""
    try:
        specifier = Requirement(spec).specifier
    except InvalidRequirement:
        return None
    valid = []
    for version, _url in versions:
        try:
            valid.append(Version(version))
        except InvalidVersion:
            continue
    allowed = list(specifier.filter(valid))
    return str(max(allowed)) if allowed else None


def build_key(python_version, pinned, platform_tags):
    """What a built wheel depends on besides its sdist: the nodes' python, the pins (torch) and platform."""
    doc = {"python": python_version, "pinned": pinned, "platform": list(platform_tags)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def build_constraints(pinned):
    """The constraint every build gets (PIP_CONSTRAINT, which reaches pip's isolated build environment too):
    the pinned torch, so that an extension compiles against the torch the nodes run; nothing else is held
    to the wheelhouse's versions (a build may need another setuptools than DeepSpeed's)."""
    return "torch==%s\n" % pinned["torch"] if "torch" in pinned else ""


def build_env_requirements(pinned):
    """The pins a build environment without isolation gets: torch and the build tools the wheelhouse holds."""
    return ["%s==%s" % (name, pinned[name]) for name in ("torch",) + BUILD_ENV_PACKAGES if name in pinned]


def where(req, requirements):
    """The place a requirement came from, in the project's ``<variable>=<value>`` shape; a dependency is named."""
    by_name = {r["name"]: r for r in requirements}
    found = by_name.get(spec_name(req))
    if found is None:
        return "wheel_distribute_requirements: %s (a dependency of the job requirements)" % req
    if found["source"] == "wheel_distribute_requirements":
        return "wheel_distribute_requirements[%d]=%s" % (found["line"] - 1, json.dumps(found["text"]))
    return "wheel_distribute_requirements (-r %s line %d)=%s" % (
        found["source"], found["line"], json.dumps(found["text"]))


def build_host_problems(build_python, platform, python_version):
    """Can the controller's python build a wheel for the nodes? -> reasons it cannot (empty: it can).

    build_python: _wheel/node_probe.py INTERPRETER_SCRIPT's answer (version, platform, glibc), or
    {executable, error}. platform: node_platform.nodes_platform's answer (None: the nodes are unknown).
    """
    if build_python.get("error"):
        return ["no python %s on the controller to build it with (%s)" % (python_version, build_python["error"])]
    problems = []
    have = ".".join((build_python.get("version") or "").split(".")[:2])
    if have != python_version:
        problems.append("the controller's python %s (%s) is %s, the nodes' is %s" % (
            python_version, build_python.get("executable"), have or "unknown", python_version))
    if platform:
        arch = (build_python.get("platform") or "").partition("_")[2]
        if arch != platform["arch"]:
            problems.append("the controller is %s, the nodes are %s" % (arch or "unknown", platform["arch"]))
        glibc = node_platform.glibc_tuple(build_python.get("glibc"))
        if glibc is None or glibc > node_platform.glibc_tuple(platform["glibc"]):
            problems.append("the controller's glibc %s is newer than glibc %s of %s (a wheel built here would "
                            "need the newer one)" % (build_python.get("glibc"), platform["glibc"],
                                                     ", ".join(platform["lowest"])))
    return problems


def needs_torch(output):
    """Did a build fail because it imports torch and its environment has none (no build isolation wanted)?"""
    return bool(re.search(r"No module named '?torch'?", output))


def _build_words(lines, count=6):
    """What the build itself said: the lines of pip's "[N lines of output]" block (all of the output
    without one), without Python's traceback frames; its error lines first, then its last line."""
    block, inside = [], False
    for line in lines:
        text = line.strip()
        if re.search(r"\[\d+ lines? of output\]", text):
            inside, block = True, []
            continue
        if text == "[end of output]":
            inside = False
            continue
        if inside or not block:
            block.append(text)
    kept, frame = [], False
    for text in block:
        if text.startswith("Traceback (most recent call last)") or text.startswith("File \""):
            frame = text.startswith("File \"")
            continue
        if frame and not re.match(r"^\w*(Error|Exception)\b|^[\w.]+(Error|Exception):", text):
            continue  # the frame's source line and its ^^^ marks
        frame = False
        if text and not text.startswith(_NOISE):
            kept.append(text[:240])
    errors = [text for text in kept if re.search(r"\berror\b", text, re.I)]
    chosen = (errors[:count - 1] + [kept[-1]]) if errors and kept[-1] not in errors[:count - 1] else errors[:count]
    return " / ".join(chosen or kept[-count:])


def _missing_compiler(output):
    """The compiler a build could not run, from setuptools' ``[Errno 2] No such file or directory: 'gcc'``
    (distutils before: ``command 'gcc' failed: No such file or directory``, ``unable to execute 'gcc'``)."""
    for match in re.finditer(r"(?:No such file or directory: '([^']+)'|(?:command|unable to execute) '([^']+)'"
                             r"(?: failed)?: No such file or directory)", output):
        path = match.group(1) or match.group(2)
        if _COMPILER.search(path.rsplit("/", 1)[-1]):
            return path
    return None


def build_failure(output):
    """A failed ``pip wheel`` of an sdist -> why, with the fix: nvcc missing, torch missing, no compiler, or
    the build's own last lines."""
    lines = output.splitlines()
    if re.search(r"CUDA_HOME environment variable is not set|nvcc: (command )?not found|"
                 r"No such file or directory: '[^']*nvcc'", output):
        return ("it compiles CUDA code and the controller has no nvcc (CUDA_HOME unset, no nvcc on PATH); valid: "
                "the CUDA toolkit of the pinned torch's CUDA on the controller (CUDA_HOME, or nvcc on PATH)")
    if needs_torch(output):
        return ("it imports torch to build and the wheelhouse pins no torch to build against; valid: a "
                "wheelhouse with the nodes' torch (wheel_distribute_wheelhouse)")
    compiler = _missing_compiler(output)
    if compiler:
        return ("its compiler %s is missing on the controller; valid: a C/C++ compiler on the controller "
                "(apt-get install build-essential)" % compiler)
    return ("its build failed: %s; valid: an sdist that builds on the controller, or a wheel of it for the nodes "
            "on the index" % (_build_words(lines) or "no output"))


def runs_on_nodes(filename, nodes, python_version):
    """A built wheel's file name against every node ({node: {machine, glibc}}) -> one problem per node."""
    version = python_version.split(".")
    tag = "cp%s%s" % (version[0], version[1])
    problems = []
    for node in sorted(nodes):
        facts = nodes[node] or {}
        interpreter = {"version": python_version, "implementation": "cp", "tag": tag, "abi": tag,
                       "platform": "linux_%s" % facts.get("machine"), "glibc": facts.get("glibc")}
        missing = tags.tag_mismatches(filename, interpreter)
        if missing:
            problems.append("%s: the built wheel %s needs %s, the node has python %s on linux_%s with glibc %s"
                            % (node, filename, ", ".join(missing), python_version, facts.get("machine"),
                               facts.get("glibc")))
    return problems
