"""An existing environment on a node (wheel_distribute_venv_existing): probed through its own python, refused
when it cannot take the wheel, current when its verified install is still there."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest
from ansible_collections.multinode.training.plugins.module_utils._wheel import compat
from ansible_collections.multinode.training.plugins.module_utils._wheel import dist as _wheel_dist
from ansible_collections.multinode.training.plugins.module_utils._wheel import node_probe

from ....conftest import FIXTURES
from .test_dist import dist, install_deepspeed

RECORDED = FIXTURES / "manifest" / "cpu-build-vm.manifest.json"


class Runner(object):
    """What node_probe needs of AnsibleModule: run_command, for real."""

    def run_command(self, argv, handle_exceptions=True):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr


def dist_info(site, name, version):
    info = site / ("%s-%s.dist-info" % (name, version))
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\n" % (name, version))


@pytest.fixture(scope="module")
def base_env(tmp_path_factory):
    """A real environment (python -m venv, no pip), as a site image has one, with torch 2.13.0+cpu in it."""
    root = tmp_path_factory.mktemp("site") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python*/site-packages"))
    dist_info(site, "torch", "2.13.0+cpu")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("raise ImportError('the probe must not import torch')\n")
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    return root, site


def test_facts_come_from_the_environments_own_python(base_env, tmp_path):
    root, site = base_env
    marker = tmp_path / "envs" / "x.json"
    facts = node_probe.existing_env_facts(Runner(), str(root), str(marker))
    assert facts["existing"] is True and facts["state"] == "directory" and "error" not in facts
    assert (facts["torch"], facts["torch_cuda"], facts["marker"]) == ("2.13.0+cpu", None, None)
    assert "torch==2.13.0+cpu" in facts["packages"]
    assert facts["site"] == str(site)  # no DeepSpeed yet: where its python installs
    marker.parent.mkdir()
    marker.write_text(json.dumps({"verified": True}))
    assert node_probe.existing_env_facts(Runner(), str(root), str(marker))["marker"] == {"verified": True}
    # a CUDA build of torch: the release read from torch/version.py (torch is never imported)
    cuda_env = tmp_path / "cuda"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(cuda_env)], check=True)
    cuda_site = next((cuda_env / "lib").glob("python*/site-packages"))
    dist_info(cuda_site, "torch", "2.11.0")
    (cuda_site / "torch").mkdir()
    (cuda_site / "torch" / "version.py").write_text("cuda: Optional[str] = '13.0'\n")
    facts = node_probe.existing_env_facts(Runner(), str(cuda_env), str(marker))
    assert (facts["torch"], facts["torch_cuda"]) == ("2.11.0", "13.0")


def test_refusals_name_the_node_the_path_and_the_fix(base_env, tmp_path):
    root, _site = base_env
    m = _manifest.read(str(RECORDED))
    marker = str(tmp_path / "m.json")

    def problems(path, manifest=m):
        facts = {"venv": node_probe.existing_env_facts(Runner(), str(path), marker),
                 "python": node_probe.interpreter(Runner(), os.path.join(str(path), "bin", "python")),
                 "cpuinfo": "flags\t: " + " ".join((m.get("cpu") or {}).get("flags") or []) + "\n"}
        return [p for p in compat.node_problems(manifest, facts, "node1") if "python tag" not in p]

    assert problems(root) == []
    missing = problems(tmp_path / "absent")
    assert missing == ["node1: wheel_distribute_venv=%s (an existing environment): missing; %s" % (
        tmp_path / "absent", compat.EXISTING_VALID)]
    (tmp_path / "file").write_text("")
    assert "not a directory (file)" in problems(tmp_path / "file")[0]
    # a directory whose python is not there: one problem, not a second one about the interpreter
    (tmp_path / "nopython").mkdir()
    broken = problems(tmp_path / "nopython")
    assert len(broken) == 1 and "its python cannot say what it holds" in broken[0], broken
    # another torch: never replaced, the build named as the fix
    other = problems(root, dict(m, torch=dict(m["torch"], version="2.12.0+cpu")))
    assert other == ["node1: wheel needs torch 2.12.0+cpu, the existing environment %s has torch 2.13.0+cpu "
                     "(its torch is never replaced: build the wheel against it, deepspeed_build_torch_requirement "
                     "\"\" with deepspeed_build_python an interpreter with this torch)" % root]
    # no torch at all
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    assert problems(bare) == ["node1: wheel_distribute_venv=%s (an existing environment): its python has no "
                              "torch; %s (torch %s)" % (bare, compat.EXISTING_VALID, m["torch"]["version"])]


def test_current_after_a_verified_install_and_each_reason_it_is_not(base_env, tmp_path):
    root, site = base_env
    m = dict(_manifest.read(str(RECORDED)), wheel_sha256="a" * 64)
    env = tmp_path / "env"
    subprocess.run(["cp", "-a", str(root), str(env)], check=True)
    env_site = next((env / "lib").glob("python*/site-packages"))
    install_deepspeed(env_site, m)
    marker_path = tmp_path / "envs" / "e.json"
    marker_path.parent.mkdir()
    content = {"dist/w.whl": b"wheel"}
    node = tmp_path / "node"
    (node / "dist").mkdir(parents=True)
    (node / "dist" / "w.whl").write_bytes(b"wheel")
    expected = {name: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for name, b in content.items()}
    record = json.dumps({"files": expected})

    def why():
        facts = node_probe.existing_env_facts(Runner(), str(env), str(marker_path))
        assert facts["site"] == str(env_site)  # where its python finds DeepSpeed
        return _wheel_dist.current_problems(m, facts, "", str(node), expected, record)

    assert why() == ["the venv's marker is not this wheel's verified install"]
    marker_path.write_text(json.dumps({"verified": True, "existing": True, "wheel_sha256": m["wheel_sha256"],
                                       "torch": m["torch"]["version"], "requirements_sha256": ""}))
    assert why() == []
    # an op binary changed after the install
    op = env_site / m["ops"][0]["file"]
    op.write_bytes(b"patched")
    assert why() == ["op %s: %s differs from the installed wheel's RECORD" % (m["ops"][0]["name"], op)]


def test_an_existing_environment_gets_no_torch_from_the_wheelhouse(tmp_path):
    d, _m, _wheel = dist(tmp_path, torch_in_wheelhouse=True)
    path = _wheel_dist.choose_manifest(str(d), "", "")
    files = _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "", existing=True)["files"]
    assert sorted(name for name in files if name.startswith("wheelhouse/")) == [
        "wheelhouse/numpy-2.0-cp311-cp311-linux_x86_64.whl"]
    # none needed either: a wheelhouse without torch, or none at all (a build against a preinstalled torch)
    (d / "wheelhouse" / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").unlink()
    assert _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "", existing=True)
    assert _wheel_dist.source(str(d), path, "", "", "", existing=True)
    with pytest.raises(_wheel_dist.DistError):
        _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "")
