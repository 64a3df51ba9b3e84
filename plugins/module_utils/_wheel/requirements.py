# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Job requirements: parse them, pin them against torch/DeepSpeed, read pip's verdict, write the lock.

Pure functions (no subprocess, no network): the module wheel_distribute (lock) runs pip and hands its
output and report here. Unit-tested on recorded pip runs (tests/fixtures/requirements/).
"""
from __future__ import annotations

import hashlib
import json
import re

from ansible_collections.multinode.training.plugins.module_utils._node.preflight import (
    canonicalize_name,
    parse_set,
    venv_problems,
)
from ansible_collections.multinode.training.plugins.module_utils._node.preflight import lock_problems as node_lock_problems

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version
    HAS_PACKAGING = True
except ImportError:  # pragma: no cover - packaging ships with ansible-core
    HAS_PACKAGING = False

LOCK_HEADER = "# multinode.training requirements lock"
# pip's line for a requirement it found nothing to install for (a binary-only resolution: no wheel).
NO_DISTRIBUTION_RE = re.compile(r"^ERROR: No matching distribution found for (\S+)")
# pip's include of a requirements file, as an item of a requirements list: -r <path> (also -r<path>,
# --requirement <path>, --requirement=<path>); every other item is one PEP 508 requirement.
INCLUDE_RE = re.compile(r"^(?:-r\s*|--requirement(?:=|\s+))(?P<path>\S(?:.*\S)?)\s*$")
# a wheel's file name: {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl (PEP 427)
_WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


class RequirementsError(Exception):
    """Bad requirements input; the message names file, line and text."""


def parse_requirements(lines, source):
    """[(source, lineno, text)] -> list of dicts {source, line, text, name}.

    Comments, blank lines and trailing comments are skipped. pip options (-e, --index-url ..., a -r inside
    an included file) are refused: the resolution is done once, with pip's own configuration on the
    controller (pip.conf, PIP_INDEX_URL) and the module's pip_args. A requirements list's own ``-r <path>``
    items are read by requirement_groups first.
    """
    if not HAS_PACKAGING:  # pragma: no cover
        raise RequirementsError("python package 'packaging' is needed on the controller")
    parsed, problems, seen = [], [], {}
    for lineno, raw in enumerate(lines, start=1):
        text = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not text:
            continue
        where = "%s line %d" % (source, lineno)
        if text.startswith("-"):
            problems.append("%s: %r: pip options are not supported in job requirements; valid: one PEP 508 "
                            "requirement per line (index options go in pip's configuration: pip.conf, PIP_INDEX_URL)"
                            % (where, text))
            continue
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            problems.append("%s: %r is not a valid requirement (%s); valid: PEP 508, e.g. 'accelerate>=1.0'"
                            % (where, text, str(exc).splitlines()[0]))
            continue
        if req.url:
            problems.append("%s: %r: direct URL requirements are not supported; valid: name and version "
                            "specifier (put the wheel on an index or find-links)" % (where, text))
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            problems.append("%s: %r: %s is already required at %s" % (where, text, req.name, seen[name]))
            continue
        seen[name] = where
        parsed.append({"source": source, "line": lineno, "text": text, "name": name})
    if problems:
        raise RequirementsError("; ".join(problems))
    return parsed


def spec_name(spec):
    """A requirement as pip prints it -> its project name as written: 'flash-attn>=2.7 ; python_version>"3"' ->
    'flash-attn' (canonicalize_name it to compare)."""
    return re.split(r"[<>=!~ ;\[(]", str(spec).strip(), maxsplit=1)[0]


def included_file(item):
    """An item of a requirements list -> the path of the requirements file it includes (pip's ``-r <path>``;
    relative: from the working directory), or None for a requirement."""
    match = INCLUDE_RE.match(str(item).strip())
    return match.group("path") if match else None


def requirement_groups(items, source, read):
    """A requirements list -> [(source, lines)]: the list's own requirements first (an include left blank, so
    that a problem's line number stays the item's position), then each included file's lines (``read(path)``
    returns its text) - what ``pip install -r`` would read, for parse_requirements or unmet_requirements."""
    groups = [(source, ["" if included_file(item) else str(item) for item in items])]
    for item in items:
        path = included_file(item)
        if path:
            groups.append((path, read(path).splitlines()))
    return groups


def merge_requirements(*groups):
    """Several parsed groups (list variable, file) -> one list; the same package twice is refused."""
    merged, seen, problems = [], {}, []
    for group in groups:
        for req in group:
            if req["name"] in seen:
                problems.append("%s line %d: %r: %s is already required at %s"
                                % (req["source"], req["line"], req["text"], req["name"], seen[req["name"]]))
                continue
            seen[req["name"]] = "%s line %d" % (req["source"], req["line"])
            merged.append(req)
    if problems:
        raise RequirementsError("; ".join(problems))
    return merged


def wheel_name_version(filename):
    """'torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl' -> ('torch', '2.13.0+cpu'), or None."""
    match = _WHEEL_RE.match(filename)
    if not match:
        return None
    return canonicalize_name(match.group("name")), match.group("version")


def pinned_set(wheel_files):
    """Wheel file names of the wheelhouse and the DeepSpeed wheel -> {name: version} (the pins).

    Two versions of one package in the wheelhouse pin nothing for it (pip picks the newest; the
    report check below still compares against what the wheelhouse resolution would have taken).
    """
    versions = {}
    for filename in wheel_files:
        nv = wheel_name_version(filename)
        if nv:
            versions.setdefault(nv[0], set()).add(nv[1])
    return {name: sorted(v)[0] for name, v in sorted(versions.items()) if len(v) == 1}


def constraints_text(pinned):
    return "".join("%s==%s\n" % (name, version) for name, version in sorted(pinned.items()))


def input_digest(requirements, pinned, python_version, pip_args, wheel_sha256, platform_tags=()):
    """sha256 over everything that decides the resolution; recorded in the lock's header.

    platform_tags: pip's ``--platform`` tags for the nodes (_wheel/node_platform.py); none (nodes not known)
    leaves the digest as it was before the platform was resolved for."""
    doc = {"requirements": [r["text"] for r in requirements], "pinned": pinned,
           "python": python_version, "pip_args": list(pip_args), "wheel_sha256": wheel_sha256}
    if platform_tags:
        doc["platform"] = list(platform_tags)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


_CONFLICT_START = "The conflict is caused by:"


def pip_failure(output, requirements, pinned):
    """pip's stdout+stderr of a failed resolution -> list of messages naming package and conflict."""
    lines = [line.rstrip() for line in output.splitlines()]
    by_name = {r["name"]: r for r in requirements}
    problems = []

    def where(name):
        req = by_name.get(canonicalize_name(name))
        return ("%s line %d (%s)" % (req["source"], req["line"], req["text"])) if req else name

    for i, line in enumerate(lines):
        match = NO_DISTRIBUTION_RE.match(line)
        if match:
            spec = match.group(1)
            name = spec_name(spec)
            versions = ""
            for prev in lines[max(0, i - 3):i]:
                found = re.search(r"\(from versions: ([^)]*)\)", prev)
                if found:
                    versions = found.group(1)
            problems.append("%s: the index has no wheel of %s for the nodes' python and platform (versions it has: %s)"
                            % (where(name), spec, versions or "none"))
    if _CONFLICT_START in lines:
        start = lines.index(_CONFLICT_START) + 1
        causes = []
        for line in lines[start:]:
            if not line.strip():
                break
            causes.append(line.strip())
        names = set()
        for cause in causes:
            for word in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", cause):
                if canonicalize_name(word) in pinned:
                    names.add(canonicalize_name(word))
        mine = [r for r in requirements
                if any(canonicalize_name(w) == r["name"]
                       for cause in causes for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", cause))]
        pins = ", ".join("%s==%s" % (n, pinned[n]) for n in sorted(names)) or "the pinned set"
        problems.append("%s conflicts with the pinned %s (torch, DeepSpeed and their dependencies stay as "
                        "built): pip says: %s"
                        % (", ".join(where(r["name"]) for r in mine) or "a requirement", pins, "; ".join(causes)))
    if not problems:
        errors = [line for line in lines if line.startswith("ERROR:")]
        problems.append("pip could not resolve the requirements: %s"
                        % (" / ".join(errors[-3:]) if errors else " / ".join(lines[-3:])))
    return problems


def report_entries(report, pinned):
    """pip's --report JSON -> (entries, problems).

    entries: [{name, version, filename, url, sha256, pinned}] sorted by name. problems: a pinned package
    resolved to another version (torch, DeepSpeed or a dependency would change), or an artifact
    without a sha256 (no --require-hashes install possible).
    """
    entries, problems = [], []
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        name = canonicalize_name(meta.get("name", ""))
        version = meta.get("version", "")
        info = item.get("download_info", {})
        url = info.get("url", "")
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        sha256 = hashes.get("sha256")
        if not sha256:
            legacy = (info.get("archive_info") or {}).get("hash", "")
            sha256 = legacy.split("=", 1)[1] if legacy.startswith("sha256=") else None
        filename = url.rsplit("/", 1)[-1].split("#", 1)[0]
        filename = re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), filename)
        if name in pinned and pinned[name] != version:
            problems.append("%s would change from the pinned %s to %s" % (name, pinned[name], version))
        if not sha256:
            problems.append("%s %s (%s) has no sha256 in pip's report" % (name, version, url))
        if not filename.endswith(".whl"):
            problems.append("%s %s resolved to %s, not a wheel; valid: requirements available as wheels"
                            % (name, version, filename))
        entries.append({"name": name, "version": version, "filename": filename, "url": url,
                        "sha256": sha256, "pinned": name in pinned})
    return sorted(entries, key=lambda e: e["name"]), problems


def lock_text(entries, digest):
    """The lock file: every package of the environment, pinned, with its sha256 (pip --require-hashes)."""
    out = [LOCK_HEADER, "# input: %s" % digest,
           "# install: pip install --no-index --require-hashes --find-links <wheelhouse> -r <this file>"]
    for e in entries:
        out.append("%s==%s --hash=sha256:%s  # %s" % (e["name"], e["version"], e["sha256"], e["filename"]))
    return "\n".join(out) + "\n"


def read_lock(text):
    """Lock file text -> (digest or None, [{name, version, sha256, filename}])."""
    digest, entries = None, []
    for line in text.splitlines():
        if line.startswith("# input: "):
            digest = line[len("# input: "):].strip()
            continue
        match = re.match(r"^(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})\s+#\s+(\S+)$", line)
        if match:
            entries.append({"name": match.group(1), "version": match.group(2), "sha256": match.group(3),
                            "filename": match.group(4), "pinned": None})
    return digest, entries


def unmet_requirements(installed, requirements):
    """[name==version] installed, [PEP 508 requirement] -> one line per requirement the set does not meet.

    A requirement whose environment marker does not apply (evaluated here, on the controller) is
    skipped; a version outside the specifier or a package not installed is named.
    """
    have = parse_set(installed)
    lines = []
    for line in requirements:
        text = line.split(" #", 1)[0].strip()  # a requirements file's line: comments, pip options skipped
        if not text or text.startswith(("#", "-")):
            continue
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue  # refused with its file and line by the lock step (wheel_distribute (lock))
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        if name not in have:
            lines.append("%s: not installed" % text)
            continue
        try:
            ok = req.specifier.contains(Version(have[name]), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            lines.append("%s: installed %s" % (text, have[name]))
    return lines


def lock_problems(packages, venv, lock=None, requirements=None):
    """{node: [name==version] of its venv} -> one line per node whose venv is not the job's.

    With the lock of this run (wheel_distribute resolved it: every package of the environment), a node
    must hold exactly the lock (_node/preflight.py's check, which the Slurm launcher makes on the batch
    host too); without it (the nodes were not prepared in this run), a node must meet the job
    requirements. Each line names the node, the venv and every differing package.
    """
    if lock:
        return node_lock_problems(packages, venv, lock)
    if requirements:
        return venv_problems({node: unmet_requirements(packages[node], requirements) for node in packages}, venv,
                             "the job requirements")
    return []
