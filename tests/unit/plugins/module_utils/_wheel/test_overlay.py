"""The overlay through which the job uses an existing environment (_wheel.overlay), made and used as the
role does: a venv of the environment's python, the .pth the guard's plan names, real pip installs."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import node_probe
from ansible_collections.multinode.training.plugins.module_utils._wheel import overlay

from .test_existing_env import Runner


def test_overlay_paths_and_the_pth_line():
    assert overlay.overlay_path("/opt/conda/envs/train") == "/opt/multinode-training/envs/opt-conda-envs-train"
    assert overlay.overlay_path("/usr/") == "/opt/multinode-training/envs/usr"
    assert overlay.overlay_path("/") == "/opt/multinode-training/envs/root"
    plan = overlay.plan("/o", "3.11.2", ["/env/lib/python3.11/site-packages"])
    assert plan == {"path": "/o", "pth": "/o/lib/python3.11/site-packages/_multinode_training_env.pth",
                    "pth_text": 'import site; list(map(site.addsitedir, ["/env/lib/python3.11/site-packages"]))\n'}


def _wheel(directory, name, version):
    """A pure-python wheel (module <name> that knows its version), as pip builds one."""
    path = os.path.join(directory, "%s-%s-py3-none-any.whl" % (name, version))
    info = "%s-%s.dist-info" % (name, version)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("%s.py" % name, "VERSION = %r\n" % version)
        archive.writestr(info + "/METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
        archive.writestr(info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(info + "/RECORD", "")
    return path


def _run(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def user_env(tmp_path_factory):
    """A user's environment: a venv (pip in it) holding mtbase 1.0 and the user's own mtds 1.0."""
    root = tmp_path_factory.mktemp("user")
    wheels = root / "wheels"
    wheels.mkdir()
    for name, version in (("mtbase", "1.0"), ("mtds", "1.0"), ("mtds", "2.0"), ("mtdep", "1.0")):
        _wheel(str(wheels), name, version)
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    _run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels),
          "mtbase==1.0", "mtds==1.0"])
    return env, wheels


def test_the_overlay_reads_the_environment_and_never_writes_it(user_env, tmp_path):
    env, wheels = user_env
    before = sorted(os.path.relpath(os.path.join(d, f), str(env)) for d, _s, fs in os.walk(str(env)) for f in fs
                    if "__pycache__" not in d)
    # as the role does: the guard's probe of the environment, the overlay, the .pth of the plan
    facts = node_probe.existing_env_facts(Runner(), str(env), str(tmp_path / "marker.json"), str(tmp_path / "ov"))
    assert facts["overlay"] is None and facts["sites"] and "mtds==1.0" in facts["packages"]
    facts_before_sites = facts["sites"]
    ov = tmp_path / "ov"
    subprocess.run([str(env / "bin" / "python"), "-m", "venv", "--without-pip", str(ov)], check=True)
    version = _run([str(env / "bin" / "python"), "-c", "import platform; print(platform.python_version())"])
    plan = overlay.plan(str(ov), version, facts["sites"])
    with open(plan["pth"], "w") as handle:
        handle.write(plan["pth_text"])
    python = str(ov / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    _run(pip + ["mtdep==1.0", "mtbase==1.0"])  # what the environment lacks; what it has is kept
    _run(pip + ["--no-deps", "--force-reinstall", str(wheels / "mtds-2.0-py3-none-any.whl")])
    # the job's python: the overlay's mtds, the environment's mtbase, the overlay's mtdep
    code = "import mtbase, mtds, mtdep; print(mtbase.__file__, mtds.VERSION, mtdep.__file__)"
    base_file, ds_version, dep_file = _run([python, "-c", code]).split()
    assert base_file.startswith(str(env)) and ds_version == "2.0" and dep_file.startswith(str(ov))
    # the environment: as it was, its own mtds 1.0 still imported by its python
    after = sorted(os.path.relpath(os.path.join(d, f), str(env)) for d, _s, fs in os.walk(str(env)) for f in fs
                   if "__pycache__" not in d)
    assert after == before
    assert _run([str(env / "bin" / "python"), "-c", "import mtds; print(mtds.VERSION)"]) == "1.0"
    # the guard probes through the overlay once it exists: the environment's sites read back from the .pth
    facts = node_probe.existing_env_facts(Runner(), str(env), str(tmp_path / "marker.json"), str(ov))
    assert facts["overlay"] == str(ov) and facts["sites"] == facts_before_sites
    assert "mtds==2.0" in facts["packages"] and "mtbase==1.0" in facts["packages"]
