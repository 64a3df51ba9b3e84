# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only probe of a job's Python environment, run by the job's own interpreter.

Standard library only: module train_node (probe) runs this file's source with train_python
(``python -c SOURCE``) and the Slurm launcher ships it as env_probe.py. It reads package
metadata only (no torch import): python, torch, DeepSpeed and the prebuilt op libraries in
DeepSpeed's files, and every installed package (name==version), as one JSON line on stdout.

The metadata is read the way importlib.metadata finds it - every ``*.dist-info`` and ``*.egg-info``
on ``sys.path``, in its order; a project's version is the first one found - but without importing
importlib.metadata, whose import alone (email, zipfile, pathlib, ...) costs about 30 ms of CPU on
every node at every launch; only the ``Name`` and ``Version`` headers are read. The unit tests
compare the result with importlib.metadata's.
"""
from __future__ import annotations

import csv
import json
import os
import re
import sys

SUFFIXES = (".dist-info", ".egg-info")


def normalize(name):
    """A project name as importlib.metadata compares them (PEP 503, ``-`` as ``_``). The PEP 503 rule of
    _node/preflight.py's canonicalize_name (with ``_``), written again: this file runs alone on the nodes and imports nothing of the
    collection."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def distributions():
    """(path, directory-name project) of every distribution on sys.path, in sys.path's order."""
    for entry in sys.path:
        folder = entry or "."
        try:
            names = sorted(os.listdir(folder))
        except OSError:  # not a directory (a zip), gone
            continue
        for name in names:
            if name.lower().endswith(SUFFIXES):
                yield os.path.join(folder, name), normalize(name.rsplit(".", 1)[0].split("-", 1)[0])


def headers(path):
    """{name, version} from a distribution's METADATA / PKG-INFO (None where absent)."""
    found = {"name": None, "version": None}
    files = [path] if os.path.isfile(path) else [os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO")]
    for candidate in files:
        try:
            with open(candidate, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if not line.strip():
                        break
                    key, sep, value = line.partition(":")
                    key = key.strip().lower()
                    if sep and key in found and found[key] is None and not line[:1].isspace():
                        found[key] = value.strip()
            return found
        except OSError:
            continue
    return found


def find(name):
    """The path of the first distribution of project ``name`` on sys.path, None when there is none."""
    wanted = normalize(name)
    for path, project in distributions():
        if project == wanted:
            return path
    return None


def version(name):
    path = find(name)
    return headers(path)["version"] if path else None


def files(path):
    """The files a distribution lists: RECORD (dist-info), installed-files.txt or SOURCES.txt (egg-info)."""
    for listing in ("RECORD", "installed-files.txt", "SOURCES.txt"):
        try:
            with open(os.path.join(path, listing), encoding="utf-8", errors="replace", newline="") as handle:
                return [row[0] for row in csv.reader(handle) if row]
        except OSError:
            continue
    return []


def prebuilt_ops():
    ops = set()
    path = find("deepspeed")
    if path and headers(path)["version"]:
        for entry in files(path):
            if entry.endswith(".so") and "/ops/" in entry:
                ops.add(entry.rsplit("/", 1)[-1].split(".")[0])
    return sorted(ops)


def probe():
    """{python, torch, deepspeed, ops, packages} of the running interpreter."""
    packages = set()
    for path, _project in distributions():
        meta = headers(path)
        packages.add("%s==%s" % (meta["name"], meta["version"]))
    return {"python": sys.version.split()[0], "torch": version("torch"), "deepspeed": version("deepspeed"),
            "ops": prebuilt_ops(), "packages": sorted(packages)}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(probe()) + "\n")
