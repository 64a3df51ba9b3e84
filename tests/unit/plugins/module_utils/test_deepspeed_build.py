"""Unit tests for _deepspeed_build: source lookup, build key, existing wheel, dist/ comparison."""
import hashlib
import json
import os
import tarfile

from ansible_collections.multinode.training.plugins.module_utils import _deepspeed_build as db
from ansible_collections.multinode.training.plugins.module_utils import _manifest

from ...conftest import FIXTURES

RECORDED = FIXTURES / "manifest" / "cpu-build-vm.manifest.json"
# The plan and inputs of the build that wrote RECORDED (its build.key), as the probe saw them.
PLAN = {"accelerator": "cpu", "arch_list": "", "nvcc": None, "ops": [{"name": "cpu_adam"}, {"name": "deepspeed_shm_comm"}],
        "compiler": {"gcc": "12.2.0"}}


def recorded():
    return _manifest.read(str(RECORDED))


def test_build_key_changes_with_each_input():
    m = recorded()
    plan = dict(PLAN, cpu={"march": m["cpu"]["march"], "flags": m["cpu"]["flags"]})
    source_digest = "a9ed8b1a3ed9d30c0a67d2c0c4f9cd3f5e8a9d6c53a2a7ba7f6e1b3cc6f2f7d0"
    key = db.build_key(source_digest, m["torch"], plan, m["python"], {})
    # Same inputs, same key; any input changed, another key.
    assert key == db.build_key(source_digest, dict(m["torch"]), dict(plan), dict(m["python"]), {})
    assert key != db.build_key(source_digest, m["torch"], dict(plan, arch_list="8.0"), m["python"], {})
    assert key != db.build_key(source_digest, m["torch"], plan, m["python"], {"DS_BUILD_STRING": "x"})
    assert key != db.build_key("0" * 64, m["torch"], plan, m["python"], {})


def test_build_key_is_the_sha256_of_sorted_json():
    plan = dict(PLAN, cpu={"march": "znver3", "flags": ["avx2"]})
    python = {"tag": "cp311", "platform": "linux_x86_64"}
    torch = {"version": "2.13.0+cpu", "cuda": None}
    inputs = {"source": "d", "torch": {"version": "2.13.0+cpu", "cuda": None}, "accelerator": "cpu", "arch_list": "",
              "nvcc": None, "ops": ["cpu_adam", "deepspeed_shm_comm"], "gcc": "12.2.0", "cpu": ["znver3", ["avx2"]],
              "python": ["cp311", "linux_x86_64"], "env": {}}
    # Ansible's `to_json(sort_keys=True) | hash('sha256')`, which keyed the wheels built before this module.
    assert db.build_key("d", torch, plan, python, {}) == hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def test_torch_key_version_strips_only_the_matching_cuda_label():
    assert db.torch_key_version({"version": "2.13.0+cu130", "cuda": "13.0"}) == "2.13.0"
    assert db.torch_key_version({"version": "2.13.0", "cuda": "13.0"}) == "2.13.0"
    assert db.torch_key_version({"version": "2.13.0+cpu", "cuda": None}) == "2.13.0+cpu"
    assert db.torch_key_version({"version": "2.13.0+cu128", "cuda": "13.0"}) == "2.13.0+cu128"


def test_wheelhouse_key_matches_the_recorded_stamp_form():
    # [manifest file name, build key, torch requirement, pip args] as Ansible's to_json wrote it.
    text = json.dumps(["w.whl.manifest.json", "k", "torch==2.13.0", []])
    assert db.wheelhouse_key("w.whl.manifest.json", "k", "torch==2.13.0", []) == hashlib.sha256(text.encode()).hexdigest()


def make_sdist(tmp_path, version="0.19.8"):
    tree = tmp_path / "deepspeed-src"
    (tree / "deepspeed").mkdir(parents=True)
    (tree / "setup.py").write_text("print('setup')\n")
    (tree / "version.txt").write_text(version + "\n")
    (tree / "deepspeed" / "__init__.py").write_text("")
    cache = tmp_path / "src" / ("pypi-" + version)
    cache.mkdir(parents=True)
    archive = cache / ("deepspeed-%s.tar.gz" % version)
    with tarfile.open(str(archive), "w:gz") as tar:
        tar.add(str(tree), arcname="deepspeed-" + version)
    return tree, archive


def test_find_source_pypi_states(tmp_path):
    src = str(tmp_path / "src")
    assert db.find_source("pypi", src, "0.19.8", "")["reason"] == "sdist not downloaded yet"
    tree, archive = make_sdist(tmp_path)
    found = db.find_source("pypi", src, "0.19.8", "")
    assert not found["ready"] and found["reason"] == "archive not unpacked yet"
    assert found["sha256"] == _manifest.sha256_file(str(archive))
    unpacked = db.tree_for_archive(src, found["sha256"])
    os.rename(str(tree), unpacked)
    found = db.find_source("pypi", src, "0.19.8", "")
    assert found["ready"] and found["tree"] == unpacked and found["spec"] == "deepspeed==0.19.8"
    assert db.read_version(unpacked) == "0.19.8"
    # local: the same archive elsewhere finds the same tree; a directory is used as it is.
    local = db.find_source("local", src, "0.19.8", str(archive))
    assert local["ready"] and local["tree"] == unpacked and local["spec"] == str(archive)
    assert db.find_source("local", src, "0.19.8", unpacked)["tree"] == unpacked
    assert not db.find_source("git", src, "0.19.8", "")["ready"]


def test_source_digest_ignores_build_output(tmp_path):
    tree, _archive = make_sdist(tmp_path)
    before = db.source_digest(str(tree))
    (tree / "build").mkdir()
    (tree / "build" / "x.o").write_text("object")
    (tree / "deepspeed" / "git_version_info_installed.py").write_text("written by setup.py")
    assert db.source_digest(str(tree)) == before
    (tree / "deepspeed" / "__init__.py").write_text("changed")
    assert db.source_digest(str(tree)) != before


def write_build(out, key="k" * 64):
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"the wheel")
    m = dict(recorded(), wheel=wheel.name, wheel_sha256=_manifest.sha256_file(str(wheel)))
    m["build"] = dict(m["build"], key=key)
    _manifest.write(_manifest.path_for(str(wheel)), m)
    return wheel, m


def test_existing_wheel(tmp_path):
    out = tmp_path / "out"
    assert "no manifest" in db.existing_wheel(str(out), "k" * 64)["reason"]
    wheel, _m = write_build(out)
    found = db.existing_wheel(str(out), "k" * 64)
    assert found["up_to_date"] and found["manifest_sha256"] == _manifest.read_text(found["manifest_path"])[1]
    assert db.existing_wheel(str(out), "other")["reason"] == "the manifest's build key differs (inputs changed)"
    wheel.write_bytes(b"truncated")
    assert db.existing_wheel(str(out), "k" * 64)["reason"] == "the wheel's sha256 differs from its manifest"
    wheel.unlink()
    assert "is missing" in db.existing_wheel(str(out), "k" * 64)["reason"]


def test_dist_state(tmp_path):
    out, dist = tmp_path / "out", tmp_path / "dist"
    wheel, m = write_build(out)
    manifest_sha = _manifest.read_text(_manifest.path_for(str(wheel)))[1]
    assert db.dist_state(str(dist), m, manifest_sha, "stamp") == {"wheel": True, "manifest": True, "wheelhouse": True}
    (dist / "wheelhouse").mkdir(parents=True)
    for name in (wheel.name, wheel.name + _manifest.SUFFIX):
        (dist / name).write_bytes((out / name).read_bytes())
    (dist / "wheelhouse" / ".stamp").write_text("stamp\n")
    assert db.dist_state(str(dist), m, manifest_sha, "stamp") == {"wheel": False, "manifest": False, "wheelhouse": False}
    assert db.dist_state(str(dist), m, manifest_sha, None)["wheelhouse"] is False  # no wheelhouse kept
    (dist / (wheel.name + _manifest.SUFFIX)).write_text("{}")
    assert db.dist_state(str(dist), m, manifest_sha, "stamp")["wheel"] is True  # fetched again as a pair


def test_installed_torch_from_dist_info(tmp_path):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    assert db.installed_torch(str(venv / "bin" / "python")) is None
    (site / "torch-2.13.0+cpu.dist-info").mkdir(parents=True)
    (site / "torch-2.13.0+cpu.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert db.installed_torch(str(venv / "bin" / "python")) == {"version": "2.13.0+cpu", "cuda": None}
    (site / "torch" / "version.py").write_text("cuda: Optional[str] = '13.0'\n")
    assert db.installed_torch(str(venv / "bin" / "python"))["cuda"] == "13.0"


def test_missing_packages():
    assert db.missing_packages({"venv": True, "headers": True}, "pypi", []) == []
    assert db.missing_packages({"venv": False, "headers": False}, "git", ["async_io"]) == [
        "python3-venv", "python3-dev", "git", "libaio-dev"]
