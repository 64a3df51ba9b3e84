# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job requirement that ships only an sdist, through the real `ansible-playbook` and the real lock step.

A tiny package with a C extension (a PEP 517 backend of its own that runs the compiler, so that nothing is
fetched to build it) is served as an sdist from a find-links folder, with `--no-index`; the DeepSpeed wheel
is a stand-in of a few bytes. The module step `wheel_distribute` (lock) runs for real (pip resolves, asks,
builds with gcc, checks, downloads, writes the lock) for nodes reported as this machine. Asserted: the wheel
is built, in dest, in the lock with its sha256; a second run builds nothing and changes nothing; an sdist
whose build fails is refused naming the package and the compiler's words; nodes whose glibc is older than
the controller's are refused before a build, naming why. Last, role wheel_distribute's preflight alone: it
asks the node for its platform and the lock step resolves for it.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tarfile
import tempfile
import time
import zipfile

import pytest

from test_badinput import failure_messages, run_playbook  # pylint: disable=import-error

BACKEND = r'''
import base64, hashlib, os, subprocess, sys, sysconfig, zipfile
NAME, VERSION = "mt_tinyext", "1.0"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    so = NAME + sysconfig.get_config_var("EXT_SUFFIX")
    subprocess.check_call([os.environ.get("CC", "gcc"), "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"],
                           "tinyext.c", "-o", so])
    tag = "cp%d%d" % sys.version_info[:2]
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    info = "%s-%s.dist-info" % (NAME, VERSION)
    files = {so: open(so, "rb").read(),
             info + "/METADATA": b"Metadata-Version: 2.1\nName: mt-tinyext\nVersion: 1.0\n",
             info + "/WHEEL": ("Wheel-Version: 1.0\nGenerator: mt-test\nRoot-Is-Purelib: false\nTag: %s-%s-%s\n"
                               % (tag, tag, plat)).encode()}
    record = ["%s,sha256=%s,%d" % (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode(),
                                   len(d)) for n, d in files.items()] + [info + "/RECORD,,"]
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = "%s-%s-%s-%s-%s.whl" % (NAME, VERSION, tag, tag, plat)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as whl:
        for n, d in files.items():
            whl.writestr(n, d)
    return name
'''
C_OK = ('#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "mt_tinyext", NULL, -1, NULL};\n'
        "PyMODINIT_FUNC PyInit_mt_tinyext(void) { return PyModule_Create(&m); }\n")
C_BROKEN = "int broken( {\n"
PLAYBOOK = """
- name: The lock step, as role wheel_distribute's preflight runs it
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Resolve and lock the job requirements
      multinode.training.wheel_distribute:
        lock: "{{ lock_args }}"
      register: lock_result

    - name: Say what the lock step did
      ansible.builtin.debug:
        var: lock_result
"""


def sdist(links, name, source):
    """<links>/<name>-1.0.tar.gz: an sdist whose in-tree backend compiles ``source``."""
    root = tempfile.mkdtemp()
    try:
        top = os.path.join(root, "%s-1.0" % name)
        os.mkdir(top)
        with open(os.path.join(top, "pyproject.toml"), "w") as handle:
            handle.write('[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
        with open(os.path.join(top, "backend.py"), "w") as handle:
            handle.write(BACKEND.replace('"mt_tinyext"', json.dumps(name.replace("-", "_"))))
        with open(os.path.join(top, "tinyext.c"), "w") as handle:
            handle.write(source.replace("mt_tinyext", name.replace("-", "_")))
        with open(os.path.join(top, "PKG-INFO"), "w") as handle:
            handle.write("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name)
        with tarfile.open(os.path.join(links, "%s-1.0.tar.gz" % name), "w:gz") as tar:
            tar.add(top, arcname="%s-1.0" % name)
    finally:
        shutil.rmtree(root)


def stand_in_wheel(folder, name="deepspeed", version="0.0.1"):
    """<name>-<version>-py3-none-any.whl: enough of a wheel for pip's resolution (no dependencies); by
    default the DeepSpeed wheel's stand-in."""
    info = "%s-%s.dist-info" % (name, version)
    files = {name + "/__init__.py": b"",
             info + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)).encode(),
             info + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: mt-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[info + "/RECORD"] = "".join("%s,,\n" % n for n in list(files) + [info + "/RECORD"]).encode()
    path = os.path.join(folder, "%s-%s-py3-none-any.whl" % (name, version))
    with zipfile.ZipFile(path, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
    return path


def this_machine():
    return {"machine": platform.machine(), "glibc": os.confstr("CS_GNU_LIBC_VERSION").split()[-1]}


@pytest.fixture
def area():
    path = tempfile.mkdtemp(prefix="mt-sdist-")
    for sub in ("links", "wheelhouse", "dist", "build"):
        os.mkdir(os.path.join(path, sub))
    sdist(os.path.join(path, "links"), "mt-tinyext", C_OK)
    sdist(os.path.join(path, "links"), "mt-broken", C_BROKEN)
    wheel = stand_in_wheel(os.path.join(path, "dist"))
    yield path, wheel
    shutil.rmtree(path, ignore_errors=True)


def lock_step(path, wheel, requirements, nodes):
    args = {"requirements": requirements, "wheelhouse": path + "/wheelhouse", "deepspeed_wheel": wheel,
            "wheel_sha256": "0" * 64, "python_version": "%d.%d" % tuple(map(int, platform.python_version_tuple()[:2])),
            "dest": path + "/dist/requirements", "lock": wheel + ".requirements.lock", "nodes": nodes,
            "pip_args": ["--no-index", "--find-links", path + "/links"], "build_dir": path + "/build"}
    with open(os.path.join(path, "lock.yml"), "w") as handle:
        handle.write(PLAYBOOK)
    case = os.path.join(path, "case")
    os.makedirs(case, exist_ok=True)
    start = time.monotonic()
    proc, report, _seconds = run_playbook(os.path.join(path, "lock.yml"), {"lock_args": args}, case)
    seconds = time.monotonic() - start
    results = [r for play in report.get("plays", []) for t in play["tasks"] for r in t["hosts"].values()
               if t["task"]["name"] == "Resolve and lock the job requirements"]
    return proc, report, (results or [{}])[0], seconds


def test_an_sdist_only_requirement_is_built_once_locked_and_reused(area):
    path, wheel = area
    nodes = {"node1": this_machine(), "node2": this_machine()}
    proc, report, first, cold = lock_step(path, wheel, ["mt-tinyext"], nodes)
    assert proc.returncode == 0, failure_messages(report) or proc.stdout[-3000:] + proc.stderr[-2000:]
    tag = "cp%d%d" % tuple(map(int, platform.python_version_tuple()[:2]))
    built = "mt_tinyext-1.0-%s-%s-linux_%s.whl" % (tag, tag, platform.machine())
    assert first["changed"] is True and first["built"] == [built] and first["downloaded"] == [built]
    assert "linux_%s" % platform.machine() in first["platform"]
    in_dest = os.path.join(path, "dist", "requirements", built)
    with open(in_dest, "rb") as handle:
        sha256 = hashlib.sha256(handle.read()).hexdigest()
    with open(wheel + ".requirements.lock") as handle:
        lock_text = handle.read()
    assert "mt-tinyext==1.0 --hash=sha256:%s  # %s" % (sha256, built) in lock_text, lock_text
    assert first["added"] == [in_dest]
    # the same inputs: the lock is reused, pip does not run, nothing is built or changed
    proc, report, second, warm = lock_step(path, wheel, ["mt-tinyext"], nodes)
    assert proc.returncode == 0 and second["changed"] is False, failure_messages(report)
    assert second["built"] == [] and second["downloaded"] == [] and "cmd" not in second
    assert report["stats"]["localhost"]["changed"] == 0
    print("sdist build: cold run %.1f s, cached second run %.1f s" % (cold, warm))


def test_an_sdist_whose_build_fails_is_refused_naming_the_package_and_why(area):
    path, wheel = area
    proc, report, result, _seconds = lock_step(path, wheel, ["mt-broken"], {"node1": this_machine()})
    failed = failure_messages(report)
    assert proc.returncode != 0 and len(failed) == 1, failed or proc.stderr[-2000:]
    assert failed[0].startswith('job requirements refused before any node was touched: '
                                'wheel_distribute_requirements[0]="mt-broken": mt-broken==1.0 has no wheel for the '
                                "nodes (python "), failed
    assert "its build failed: " in failed[0] and "tinyext.c:1:" in failed[0] and "; valid: " in failed[0], failed
    assert not os.path.exists(wheel + ".requirements.lock") and result.get("built") == []


def test_nodes_with_an_older_glibc_than_the_controller_are_refused_before_a_build(area):
    path, wheel = area
    old = dict(this_machine(), glibc="2.17")
    proc, report, result, _seconds = lock_step(path, wheel, ["mt-tinyext"], {"node1": this_machine(), "old1": old})
    failed = failure_messages(report)
    assert proc.returncode != 0 and len(failed) == 1, failed or proc.stderr[-2000:]
    assert "is newer than glibc 2.17 of old1 (a wheel built here would need the newer one)" in failed[0], failed
    assert "manylinux_2_17_%s" % platform.machine() in failed[0]
    assert os.listdir(os.path.join(path, "build")) == [] and result.get("built") == []


def test_the_role_resolves_for_the_platform_of_its_nodes(area, monkeypatch):
    """Role wheel_distribute's preflight, run alone: it asks each node for its platform (one read-only
    node_facts call, which train.yml's facts make needless) and the lock step resolves for it."""
    path, wheel = area
    with open(wheel, "rb") as handle:
        sha256 = hashlib.sha256(handle.read()).hexdigest()
    manifest = {"schema": 1, "accelerator": "cpu", "deepspeed": {"version": "0.0.1"}, "ops": [],
                "python": {"tag": "py3", "version": platform.python_version()}, "torch": {"version": "2.13.0"},
                "wheel": os.path.basename(wheel), "wheel_sha256": sha256}
    with open(wheel + ".manifest.json", "w") as handle:
        json.dump(manifest, handle)
    with open(os.path.join(path, "role.yml"), "w") as handle:
        handle.write("- name: The role's preflight alone\n  hosts: localhost\n  gather_facts: false\n  tasks:\n"
                     "    - name: Preflight\n      ansible.builtin.import_role:\n"
                     "        name: multinode.training.wheel_distribute\n        tasks_from: preflight.yml\n")
    stand_in_wheel(os.path.join(path, "links"), "mt_pure", "1.0")  # a wheel for the requirement: nothing to build
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the role has no pip arguments: pip's own configuration
    monkeypatch.setenv("PIP_FIND_LINKS", path + "/links")
    case = os.path.join(path, "case")
    os.makedirs(case, exist_ok=True)
    extra = {"wheel_distribute_dist_dir": path + "/dist", "wheel_distribute_wheelhouse": path + "/wheelhouse",
             "wheel_distribute_index_url": "https://index.invalid/simple",
             "wheel_distribute_requirements": ["mt-pure"]}
    proc, report, _seconds = run_playbook(os.path.join(path, "role.yml"), extra, case)
    assert proc.returncode == 0, failure_messages(report) or proc.stdout[-3000:] + proc.stderr[-2000:]
    tasks = {t["task"]["name"]: t["hosts"]["localhost"] for play in report["plays"] for t in play["tasks"]}
    asked = [r for name, r in tasks.items() if name.endswith("the nodes' platform for the job requirements (read-only)")]
    assert asked and asked[0]["ansible_facts"]["multinode_training_platform"] == this_machine()
    locked = [r for name, r in tasks.items() if name.endswith("resolve and lock the job requirements (controller)")][0]
    glibc = this_machine()["glibc"].split(".")
    assert locked["platform"][0] == "manylinux_%s_%s_%s" % (glibc[0], glibc[1], platform.machine())
    assert locked["cmd"].count("--platform") == len(locked["platform"]) and not locked["built"]
    assert [e["filename"] for e in locked["entries"] if not e["pinned"]] == ["mt_pure-1.0-py3-none-any.whl"]
