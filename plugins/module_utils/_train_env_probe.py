# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only probe of a job's Python environment, run by the job's own interpreter.

Standard library only: module train_probe runs this file's source with train_python
(``python -c SOURCE``) and the Slurm launcher ships it as env_probe.py. It reads package
metadata only (no torch import): python, torch, DeepSpeed and the prebuilt op libraries in
DeepSpeed's files, and every installed package (name==version), as one JSON line on stdout.
"""
from __future__ import annotations

import json
import sys

try:
    from importlib import metadata
except ImportError:  # pragma: no cover - python < 3.8 has no importlib.metadata
    metadata = None


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def prebuilt_ops():
    ops = set()
    if version("deepspeed"):
        for path in metadata.distribution("deepspeed").files or []:
            path = str(path)
            if path.endswith(".so") and "/ops/" in path:
                ops.add(path.rsplit("/", 1)[-1].split(".")[0])
    return sorted(ops)


def probe():
    """{python, torch, deepspeed, ops, packages} of the running interpreter."""
    packages = sorted({"%s==%s" % (dist.metadata["Name"], dist.version) for dist in metadata.distributions()})
    return {"python": sys.version.split()[0], "torch": version("torch"), "deepspeed": version("deepspeed"),
            "ops": prebuilt_ops(), "packages": packages}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(probe()) + "\n")
