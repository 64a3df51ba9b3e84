"""Unit tests for _build.deepspeed: source lookup, build key, existing wheel, dist/ comparison."""
import hashlib
import io
import json
import os
import tarfile

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import deepspeed as db
from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest

from ....conftest import FIXTURES

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


def test_find_source_unpacks_a_cached_sdist_once(tmp_path):
    src = str(tmp_path / "src")
    tree, archive = make_sdist(tmp_path)
    found = db.find_source("pypi", src, "0.19.8", "", unpack=True)
    assert found["ready"] and found["unpacked"]
    assert found["tree"] == db.tree_for_archive(src, _manifest.sha256_file(str(archive)))
    # the top folder is stripped, as tar --strip-components=1 does, and the digest is the tree's
    assert sorted(os.listdir(found["tree"])) == ["deepspeed", "setup.py", "version.txt"]
    assert db.source_digest(found["tree"]) == db.source_digest(str(tree))
    assert oct(os.stat(found["tree"]).st_mode & 0o777) == "0o755"
    again = db.find_source("pypi", src, "0.19.8", "", unpack=True)
    assert again["ready"] and not again["unpacked"] and again["tree"] == found["tree"]
    # a local tarball of the same bytes is the same tree, nothing unpacked again
    local = db.find_source("local", src, "0.19.8", str(archive), unpack=True)
    assert local["tree"] == found["tree"] and not local["unpacked"]


def test_unpack_replaces_an_incomplete_tree_and_leaves_no_temporary_folder(tmp_path):
    _tree, archive = make_sdist(tmp_path)
    dest = tmp_path / "cache" / "tree-x"
    dest.mkdir(parents=True)
    (dest / "partial").write_text("left by an interrupted run")
    db.unpack_archive(str(archive), str(dest))
    assert sorted(os.listdir(str(dest))) == ["deepspeed", "setup.py", "version.txt"]
    assert os.listdir(str(dest.parent)) == ["tree-x"]


def tar_with(tmp_path, archive_name, **member):
    archive = tmp_path / archive_name
    with tarfile.open(str(archive), "w:gz") as tar:
        info = tarfile.TarInfo("top/setup.py")
        info.size = 0
        tar.addfile(info, io.BytesIO(b""))
        bad = tarfile.TarInfo(member.pop("name"))
        for key, value in member.items():
            setattr(bad, key, value)
        tar.addfile(bad, io.BytesIO(b""))
    return archive


@pytest.mark.parametrize("member", [
    {"name": "top/../../escape"},
    {"name": "/abs/file"},
    {"name": "top/link", "type": tarfile.SYMTYPE, "linkname": "../../etc/passwd"},
    {"name": "top/link", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"},
    {"name": "top/hard", "type": tarfile.LNKTYPE, "linkname": "../etc/passwd"},
])
def test_unpack_refuses_members_outside_the_tree(tmp_path, member):
    archive = tar_with(tmp_path, "bad.tar.gz", **member)
    dest = tmp_path / "cache" / "tree-bad"
    with pytest.raises(db.ArchiveError, match="bad.tar.gz"):
        db.unpack_archive(str(archive), str(dest))
    assert not dest.exists() and os.listdir(str(dest.parent)) == []


def test_unpack_keeps_links_inside_the_tree(tmp_path):
    archive = tar_with(tmp_path, "ok.tar.gz", name="top/docs/readme", type=tarfile.SYMTYPE, linkname="../setup.py")
    dest = tmp_path / "tree-ok"
    db.unpack_archive(str(archive), str(dest))
    assert os.readlink(str(dest / "docs" / "readme")) == "../setup.py"


def test_unpack_names_a_broken_archive(tmp_path):
    archive = tmp_path / "broken.tar.gz"
    archive.write_bytes(b"not a tarball")
    with pytest.raises(db.ArchiveError, match="broken.tar.gz cannot be unpacked"):
        db.unpack_archive(str(archive), str(tmp_path / "tree"))


def test_ensure_dir_sets_the_mode_on_every_folder_it_makes(tmp_path):
    old = os.umask(0o077)
    try:
        assert db.ensure_dir(str(tmp_path / "a" / "b"))
    finally:
        os.umask(old)
    assert oct(os.stat(str(tmp_path / "a")).st_mode & 0o777) == "0o755"
    assert oct(os.stat(str(tmp_path / "a" / "b")).st_mode & 0o777) == "0o755"
    assert not db.ensure_dir(str(tmp_path / "a" / "b"))


def test_runtime_torch_reads_version_py_as_import_torch_would(tmp_path):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    assert db.runtime_torch(str(venv / "bin" / "python")) is None
    (site / "torch").mkdir(parents=True)
    # a PyPI CUDA torch: pip's metadata says 2.13.0, torch.__version__ 2.13.0+cu130
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n\n__all__ = ['__version__', 'cuda']\n__version__ = '2.13.0+cu130'\n"
        "debug = False\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n")
    assert db.runtime_torch(str(venv / "bin" / "python")) == {"version": "2.13.0+cu130", "cuda": "13.0",
                                                              "site_packages": str(site)}
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert db.runtime_torch(str(venv / "bin" / "python"))["version"] == "2.13.0+cpu"


def test_runtime_torch_of_an_environment_the_venv_sees_through_a_pth_file(tmp_path):
    """A build against an installed torch: the build venv has none, its .pth adds the environment's."""
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    env_site = tmp_path / "conda" / "lib" / "python3.12" / "site-packages"
    (env_site / "torch").mkdir(parents=True)
    site.mkdir(parents=True)
    (env_site / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    python = str(tmp_path / "venv" / "bin" / "python")
    assert db.runtime_torch(python) is None
    (site / "multinode_training_environment.pth").write_text("%s\n/no/such/dir\n" % env_site)
    assert db.runtime_torch(python) == {"version": "2.11.0+cu130", "cuda": "13.0", "site_packages": str(env_site)}


def test_stage_copies_the_tree_into_a_fresh_staging_folder(tmp_path):
    tree, _archive = make_sdist(tmp_path)
    os.symlink("setup.py", str(tree / "link.py"))
    work = tmp_path / "work"
    (work / "staging" / "dist").mkdir(parents=True)
    (work / "staging" / "dist" / "old.whl").write_text("an earlier build")
    staging = db.stage(str(work), str(tree), "print('helper')\n")
    assert staging == str(work / "staging")
    assert os.listdir(str(work / "staging" / "dist")) == []
    assert os.readlink(str(work / "staging" / "src" / "link.py")) == "setup.py"
    assert (work / "staging" / "src" / "version.txt").read_text() == "0.19.8\n"
    assert (work / "run_logged.py").read_text() == "print('helper')\n"


def test_find_wheel(tmp_path):
    assert db.find_wheel(str(tmp_path)) is None
    (tmp_path / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl").write_text("w")
    assert db.find_wheel(str(tmp_path)).endswith("linux_x86_64.whl")
    (tmp_path / "deepspeed-0.19.9-cp311-cp311-linux_x86_64.whl").write_text("w")
    assert db.find_wheel(str(tmp_path)) is None


def test_publish_replaces_the_previous_build_manifest_last(tmp_path, monkeypatch):
    out = tmp_path / "out"
    old_wheel, _m = write_build(out)
    (out / (old_wheel.name + ".build.log")).write_text("old log")
    (out / "wheelhouse").mkdir()
    staging = tmp_path / "staging"
    (staging / "dist").mkdir(parents=True)
    wheel = staging / "dist" / "deepspeed-0.19.9-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"new wheel")
    manifest = staging / "dist" / (wheel.name + _manifest.SUFFIX)
    manifest.write_text("{}")
    (staging / "build.log").write_text("new log")
    order = []
    real_remove, real_move = os.remove, db.shutil.move
    monkeypatch.setattr(db.os, "remove", lambda p: (order.append(("rm", os.path.basename(p))), real_remove(p)))
    monkeypatch.setattr(db.shutil, "move", lambda a, b: (order.append(("mv", os.path.basename(b))), real_move(a, b)))
    placed = db.publish(str(wheel), str(manifest), str(staging / "build.log"), str(out), remove=str(staging))
    assert order == [("rm", old_wheel.name + _manifest.SUFFIX), ("rm", old_wheel.name + ".build.log"),
                     ("rm", old_wheel.name), ("mv", wheel.name), ("mv", wheel.name + ".build.log"),
                     ("mv", wheel.name + _manifest.SUFFIX)]
    assert sorted(os.listdir(str(out))) == sorted([wheel.name, wheel.name + ".build.log", wheel.name + _manifest.SUFFIX,
                                                   "wheelhouse"])
    assert placed["manifest_path"] == str(out / (wheel.name + _manifest.SUFFIX))
    assert not staging.exists()


def test_commit_incoming_moves_in_order_and_removes_the_folder(tmp_path):
    incoming = tmp_path / ".incoming"
    incoming.mkdir()
    (incoming / "a.whl").write_text("wheel")
    (incoming / "a.whl.manifest.json").write_text("{}")
    assert db.commit_incoming(str(tmp_path), ["a.whl", "a.whl.manifest.json"]) == ["a.whl", "a.whl.manifest.json"]
    assert sorted(os.listdir(str(tmp_path))) == ["a.whl", "a.whl.manifest.json"]
    incoming.mkdir()
    with pytest.raises(IOError, match="b.whl is missing"):
        db.commit_incoming(str(tmp_path), ["b.whl"])
