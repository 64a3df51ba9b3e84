#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resolve a job's requirements against the pinned torch/DeepSpeed set, download them, write a lock."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_requirements_lock
short_description: Resolve job requirements once against the pinned torch and DeepSpeed, with sha256 lock
version_added: "0.2.0"
description:
  - Runs on the controller (or the build host), once. Parses the requirements (list and file; a syntax
    error is refused naming file and line), then asks pip to resolve them together with the DeepSpeed
    wheel and torch, constrained to the exact versions of the wheelhouse (C(pip install --dry-run
    --report), nothing is installed).
  - A requirement that would change torch, DeepSpeed or one of their dependencies is refused naming the
    package and pip's conflict; a package or version the index lacks is refused naming it.
  - The wheels the requirements add are downloaded (C(pip download --no-deps)) into I(dest) and checked
    against the sha256 in pip's report; the lock file lists every package of the environment with its
    sha256, for an offline C(pip install --no-index --require-hashes) on the nodes.
  - A lock whose recorded input digest matches (same requirements, pins, python, pip arguments and wheel)
    and whose wheels are present with their sha256 is reused without running pip; nothing is downloaded.
author:
  - multinode.training maintainers (@multinode)
options:
  requirements:
    description: Requirement strings (PEP 508).
    type: list
    elements: str
    default: []
  requirements_file:
    description: Controller path of a requirements file (one requirement per line, comments allowed); empty for none.
    type: path
  wheelhouse:
    description: Directory of the pinned wheels (torch and the DeepSpeed dependencies).
    type: path
    required: true
  deepspeed_wheel:
    description: The DeepSpeed wheel (pinned too).
    type: path
    required: true
  wheel_sha256:
    description: sha256 of the DeepSpeed wheel (from its manifest).
    type: str
    required: true
  python_version:
    description: Python version of the nodes (C(3.11)); wheels are resolved for it.
    type: str
    required: true
  dest:
    description: Directory that receives the wheels the requirements add.
    type: path
    required: true
  lock:
    description: Path of the lock file to write.
    type: path
    required: true
  pip_args:
    description: Extra arguments for pip (index options).
    type: list
    elements: str
    default: []
  python:
    description: Python interpreter (with pip) that resolves and downloads; default the one running this module.
    type: path
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: partial
    details: Resolves and reports; writes neither wheels nor the lock.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
    details: The same inputs reuse the lock and the downloaded wheels (changed=false, no pip run).
"""

EXAMPLES = r"""
- name: Resolve accelerate against the pinned torch
  multinode.training.wheel_requirements_lock:
    requirements: [accelerate, tabulate==0.9.0]
    wheelhouse: /srv/dist/wheelhouse
    deepspeed_wheel: /srv/dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl
    wheel_sha256: "{{ manifest.wheel_sha256 }}"
    python_version: "3.11"
    dest: /srv/dist/requirements
    lock: /srv/dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.requirements.lock
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
lock:
  description: Path of the lock file.
  returned: always
  type: str
lock_sha256:
  description: sha256 of the lock file (names the node release).
  returned: always
  type: str
entries:
  description: Every package of the environment, with C(name), C(version), C(filename), C(sha256), C(pinned).
  returned: always
  type: list
  elements: dict
added:
  description: Controller paths of the wheels the requirements add (not in the wheelhouse).
  returned: always
  type: list
  elements: str
downloaded:
  description: File names downloaded in this run (empty on a re-run).
  returned: always
  type: list
  elements: str
requirements:
  description: The parsed requirements with their source and line.
  returned: always
  type: list
  elements: dict
cmd:
  description: The pip resolution command (absent when the lock was reused).
  returned: when pip ran
  type: list
  elements: str
"""

import json
import os
import shutil
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs


def reusable(sha256_of, lock_path, digest, dest, wheelhouse, wheel_dir):
    """True when the lock records this digest and every wheel it names is present with its sha256."""
    if not os.path.isfile(lock_path):
        return None
    with open(lock_path) as handle:
        recorded, entries = reqs.read_lock(handle.read())
    if recorded != digest or not entries:
        return None
    for entry in entries:
        for base in (dest, wheelhouse, wheel_dir):
            path = os.path.join(base, entry["filename"])
            if os.path.isfile(path):
                break
        else:
            return None
        if base == dest and sha256_of(path) != entry["sha256"]:
            return None
    return entries


def main():
    module = AnsibleModule(
        argument_spec=dict(
            requirements=dict(type="list", elements="str", default=[]),
            requirements_file=dict(type="path"),
            wheelhouse=dict(type="path", required=True),
            deepspeed_wheel=dict(type="path", required=True),
            wheel_sha256=dict(type="str", required=True),
            python_version=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            lock=dict(type="path", required=True),
            pip_args=dict(type="list", elements="str", default=[]),
            python=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    sha256_of = module.sha256
    try:
        groups = [reqs.parse_requirements(p["requirements"], "wheel_distribute_requirements")]
        if p["requirements_file"]:
            if not os.path.isfile(p["requirements_file"]):
                module.fail_json(msg="wheel_distribute_requirements_file=%s: no such file on the controller; "
                                     "valid: a readable requirements file" % p["requirements_file"])
            with open(p["requirements_file"]) as handle:
                groups.append(reqs.parse_requirements(handle.read().splitlines(), p["requirements_file"]))
        requirements = reqs.merge_requirements(*groups)
    except reqs.RequirementsError as exc:
        module.fail_json(msg=str(exc))

    wheel_dir = os.path.dirname(p["deepspeed_wheel"])
    files = sorted(f for f in os.listdir(p["wheelhouse"]) if f.endswith(".whl"))
    pinned = reqs.pinned_set(files + [os.path.basename(p["deepspeed_wheel"])])
    pinned_files = {}
    for path in [os.path.join(p["wheelhouse"], f) for f in files] + [p["deepspeed_wheel"]]:
        name_version = reqs.wheel_name_version(os.path.basename(path))
        if name_version and pinned.get(name_version[0]) == name_version[1]:
            pinned_files[name_version[0]] = path
    digest = reqs.input_digest(requirements, pinned, p["python_version"], p["pip_args"], p["wheel_sha256"])
    result = dict(changed=False, lock=p["lock"], requirements=requirements, downloaded=[])

    entries = reusable(sha256_of, p["lock"], digest, p["dest"], p["wheelhouse"], wheel_dir)
    if entries is None:
        python = p["python"] or sys.executable
        tmp = tempfile.mkdtemp(prefix="mt-requirements-")
        try:
            constraints = os.path.join(tmp, "constraints.txt")
            with open(constraints, "w") as handle:
                handle.write(reqs.constraints_text(pinned))
            report = os.path.join(tmp, "report.json")
            torch = pinned.get("torch")
            cmd = ([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-input",
                    "--disable-pip-version-check", "--only-binary=:all:",
                    "--python-version", p["python_version"], "--target", os.path.join(tmp, "target"),
                    "--report", report, "-c", constraints,
                    "--find-links", p["wheelhouse"], "--find-links", wheel_dir]
                   + p["pip_args"]
                   + [p["deepspeed_wheel"]] + (["torch==%s" % torch] if torch else [])
                   + [r["text"] for r in requirements])
            result["cmd"] = cmd
            rc, out, err = module.run_command(cmd)
            if rc != 0:
                module.fail_json(msg="job requirements refused before any node was touched: "
                                     + "; ".join(reqs.pip_failure(out + "\n" + err, requirements, pinned)),
                                 **result)
            with open(report) as handle:
                entries, problems = reqs.report_entries(json.load(handle), pinned)
            # A pinned package is installed from the wheelhouse file (pip may have looked at an index copy
            # with other tags): the lock names that file and its sha256.
            for entry in entries:
                local = pinned_files.get(entry["name"])
                if entry["pinned"] and local and os.path.basename(local) != entry["filename"]:
                    entry.update(filename=os.path.basename(local), sha256=sha256_of(local))
            if problems:
                module.fail_json(msg="job requirements refused before any node was touched: "
                                     + "; ".join(problems), **result)
            added = [e for e in entries if not e["pinned"]]
            missing = [e for e in added if not (os.path.isfile(os.path.join(p["dest"], e["filename"]))
                                                and sha256_of(os.path.join(p["dest"], e["filename"]))
                                                == e["sha256"])]
            if missing and not module.check_mode:
                if not os.path.isdir(p["dest"]):
                    os.makedirs(p["dest"], 0o755)
                fetch = os.path.join(tmp, "download")
                dl = ([python, "-m", "pip", "download", "--no-deps", "--no-input", "--disable-pip-version-check",
                       "--only-binary=:all:", "--python-version", p["python_version"], "-d", fetch]
                      + p["pip_args"] + ["%s==%s" % (e["name"], e["version"]) for e in missing])
                rc, out, err = module.run_command(dl)
                if rc != 0:
                    module.fail_json(msg="downloading the requirement wheels failed: %s" % err.strip()[-800:],
                                     dl_cmd=dl, **result)
                for entry in missing:
                    got = os.path.join(fetch, entry["filename"])
                    if not os.path.isfile(got) or sha256_of(got) != entry["sha256"]:
                        module.fail_json(msg="%s: downloaded file %s is missing or its sha256 differs from pip's "
                                             "report (%s)" % (entry["name"], entry["filename"], entry["sha256"]),
                                         **result)
                    shutil.move(got, os.path.join(p["dest"], entry["filename"]))
                    result["downloaded"].append(entry["filename"])
            text = reqs.lock_text(entries, digest)
            old = open(p["lock"]).read() if os.path.isfile(p["lock"]) else None
            if old != text:
                result["changed"] = True
                if not module.check_mode:
                    with open(p["lock"] + ".tmp", "w") as handle:
                        handle.write(text)
                    os.rename(p["lock"] + ".tmp", p["lock"])
            result["changed"] = result["changed"] or bool(result["downloaded"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for entry in entries:  # a reused lock does not record which entries are pins
        entry["pinned"] = entry["name"] in pinned
    result["entries"] = entries
    result["added"] = [os.path.join(p["dest"], e["filename"]) for e in entries
                       if not os.path.isfile(os.path.join(p["wheelhouse"], e["filename"]))
                       and e["filename"] != os.path.basename(p["deepspeed_wheel"])]
    result["lock_sha256"] = sha256_of(p["lock"]) if os.path.isfile(p["lock"]) else ""
    module.exit_json(**result)


if __name__ == "__main__":
    main()
