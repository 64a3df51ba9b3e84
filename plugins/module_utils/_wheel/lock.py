# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module wheel_distribute's lock step: read the requirements, let pip resolve them against the
pinned wheelhouse, download what is added, write the lock.

plugins/modules/wheel_distribute.py documents it and runs ``run_module`` as its lock step (module_utils/_stepped.py).
The decisions on text (parsing, pinning, pip's verdict, the lock's format) are _wheel/requirements.py.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs

ARGUMENT_SPEC = dict(
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
)
REFUSED = "job requirements refused before any node was touched: "


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


def read_text(path):
    with open(path) as handle:
        return handle.read()


def read_requirements(module):
    """The variable's requirements, the files its ``-r <path>`` items include, then the file's, merged; a bad
    line or a missing file fails the module."""
    p = module.params
    for index, item in enumerate(p["requirements"]):
        path = reqs.included_file(item)
        if path is not None and not os.path.isfile(path):
            module.fail_json(msg="wheel_distribute_requirements[%d]=%s: no such file on the controller; valid: "
                                 "-r <path of a readable requirements file>" % (index, json.dumps(item)))
    try:
        groups = [reqs.parse_requirements(lines, source) for source, lines in
                  reqs.requirement_groups(p["requirements"], "wheel_distribute_requirements", read_text)]
        if p["requirements_file"]:
            if not os.path.isfile(p["requirements_file"]):
                module.fail_json(msg="wheel_distribute_requirements_file=%s: no such file on the controller; "
                                     "valid: a readable requirements file" % p["requirements_file"])
            groups.append(reqs.parse_requirements(read_text(p["requirements_file"]).splitlines(),
                                                  p["requirements_file"]))
        return reqs.merge_requirements(*groups)
    except reqs.RequirementsError as exc:
        module.fail_json(msg=str(exc))


def pinned_wheels(files, wheelhouse, deepspeed_wheel):
    """The wheelhouse's and DeepSpeed's wheels: ({name: pinned version}, {name: the pinned wheel's path})."""
    pinned = reqs.pinned_set(files + [os.path.basename(deepspeed_wheel)])
    pinned_files = {}
    for path in [os.path.join(wheelhouse, f) for f in files] + [deepspeed_wheel]:
        name_version = reqs.wheel_name_version(os.path.basename(path))
        if name_version and pinned.get(name_version[0]) == name_version[1]:
            pinned_files[name_version[0]] = path
    return pinned, pinned_files


def resolve_cmd(python, p, tmp, constraints, report, pinned, requirements):
    """pip's dry-run resolution of DeepSpeed, torch's pin and the requirements, offline-first, as argv."""
    torch = pinned.get("torch")
    return ([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-input",
             "--disable-pip-version-check", "--only-binary=:all:",
             "--python-version", p["python_version"], "--target", os.path.join(tmp, "target"),
             "--report", report, "-c", constraints,
             "--find-links", p["wheelhouse"], "--find-links", os.path.dirname(p["deepspeed_wheel"])]
            + p["pip_args"]
            + [p["deepspeed_wheel"]] + (["torch==%s" % torch] if torch else [])
            + [r["text"] for r in requirements])


def resolve(module, python, tmp, pinned, pinned_files, requirements, result):
    """Run pip's resolution; its report -> the lock's entries (a pin names the wheelhouse file)."""
    constraints = os.path.join(tmp, "constraints.txt")
    with open(constraints, "w") as handle:
        handle.write(reqs.constraints_text(pinned))
    report = os.path.join(tmp, "report.json")
    cmd = resolve_cmd(python, module.params, tmp, constraints, report, pinned, requirements)
    result["cmd"] = cmd
    rc, out, err = module.run_command(cmd)
    if rc != 0:
        module.fail_json(msg=REFUSED + "; ".join(reqs.pip_failure(out + "\n" + err, requirements, pinned)),
                         **result)
    with open(report) as handle:
        entries, problems = reqs.report_entries(json.load(handle), pinned)
    # A pinned package is installed from the wheelhouse file (pip may have looked at an index copy
    # with other tags): the lock names that file and its sha256.
    for entry in entries:
        local = pinned_files.get(entry["name"])
        if entry["pinned"] and local and os.path.basename(local) != entry["filename"]:
            entry.update(filename=os.path.basename(local), sha256=module.sha256(local))
    if problems:
        module.fail_json(msg=REFUSED + "; ".join(problems), **result)
    return entries


def download(module, python, tmp, entries, result):
    """Fetch the added wheels dest lacks (or holds with another sha256) into dest, checked against pip's report."""
    p, sha256_of = module.params, module.sha256
    added = [e for e in entries if not e["pinned"]]
    missing = [e for e in added if not (os.path.isfile(os.path.join(p["dest"], e["filename"]))
                                        and sha256_of(os.path.join(p["dest"], e["filename"]))
                                        == e["sha256"])]
    if not missing or module.check_mode:
        return
    if not os.path.isdir(p["dest"]):
        os.makedirs(p["dest"], 0o755)
    fetch = os.path.join(tmp, "download")
    dl = ([python, "-m", "pip", "download", "--no-deps", "--no-input", "--disable-pip-version-check",
           "--only-binary=:all:", "--python-version", p["python_version"], "-d", fetch]
          + p["pip_args"] + ["%s==%s" % (e["name"], e["version"]) for e in missing])
    rc, _out, err = module.run_command(dl)
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


def write_lock(module, entries, digest, result):
    """Write the lock when its text changes (not in check mode); changed also when a wheel was downloaded."""
    lock = module.params["lock"]
    text = reqs.lock_text(entries, digest)
    old = open(lock).read() if os.path.isfile(lock) else None
    if old != text:
        result["changed"] = True
        if not module.check_mode:
            with open(lock + ".tmp", "w") as handle:
                handle.write(text)
            os.rename(lock + ".tmp", lock)
    result["changed"] = result["changed"] or bool(result["downloaded"])


def run_module(module):
    p = module.params
    requirements = read_requirements(module)
    wheel_dir = os.path.dirname(p["deepspeed_wheel"])
    files = sorted(f for f in os.listdir(p["wheelhouse"]) if f.endswith(".whl"))
    pinned, pinned_files = pinned_wheels(files, p["wheelhouse"], p["deepspeed_wheel"])
    digest = reqs.input_digest(requirements, pinned, p["python_version"], p["pip_args"], p["wheel_sha256"])
    result = dict(changed=False, lock=p["lock"], requirements=requirements, downloaded=[])

    entries = reusable(module.sha256, p["lock"], digest, p["dest"], p["wheelhouse"], wheel_dir)
    if entries is None:
        python = p["python"] or sys.executable
        tmp = tempfile.mkdtemp(prefix="mt-requirements-")
        try:
            entries = resolve(module, python, tmp, pinned, pinned_files, requirements, result)
            download(module, python, tmp, entries, result)
            write_lock(module, entries, digest, result)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for entry in entries:  # a reused lock does not record which entries are pins
        entry["pinned"] = entry["name"] in pinned
    result["entries"] = entries
    result["added"] = [os.path.join(p["dest"], e["filename"]) for e in entries
                       if not os.path.isfile(os.path.join(p["wheelhouse"], e["filename"]))
                       and e["filename"] != os.path.basename(p["deepspeed_wheel"])]
    result["lock_sha256"] = module.sha256(p["lock"]) if os.path.isfile(p["lock"]) else ""
    module.exit_json(**result)
