"""Unit tests for _wheel_dist: what the controller distributes, and whether a node is current."""
import base64
import hashlib
import json
import os

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest
from ansible_collections.multinode.training.plugins.module_utils._wheel import node_probe
from ansible_collections.multinode.training.plugins.module_utils._wheel import dist as _wheel_dist

from ....conftest import FIXTURES

RECORDED = FIXTURES / "manifest" / "cpu-build-vm.manifest.json"


def dist(tmp_path, torch_in_wheelhouse=True):
    d = tmp_path / "dist"
    (d / "wheelhouse").mkdir(parents=True)
    m = _manifest.read(str(RECORDED))
    wheel = d / m["wheel"]
    wheel.write_bytes(b"wheel")
    m["wheel_sha256"] = _manifest.sha256_file(str(wheel))
    _manifest.write(_manifest.path_for(str(wheel)), m)
    if torch_in_wheelhouse:
        (d / "wheelhouse" / ("torch-%s-cp311-cp311-linux_x86_64.whl" % m["torch"]["version"])).write_bytes(b"torch")
    (d / "wheelhouse" / "numpy-2.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"numpy")
    return d, m, wheel


def test_source_lists_every_file_with_sha256(tmp_path):
    d, m, wheel = dist(tmp_path)
    path = _wheel_dist.choose_manifest(str(d), "", "")
    found = _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "")
    assert found["manifest"] == m and found["wheel_path"] == str(wheel)
    assert sorted(found["files"]) == sorted(["dist/" + wheel.name, "dist/" + wheel.name + ".manifest.json",
                                             "wheelhouse/numpy-2.0-cp311-cp311-linux_x86_64.whl",
                                             "wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"])
    numpy = found["files"]["wheelhouse/numpy-2.0-cp311-cp311-linux_x86_64.whl"]
    assert numpy == {"sha256": hashlib.sha256(b"numpy").hexdigest(), "size": 5,
                     "src": str(d / "wheelhouse" / "numpy-2.0-cp311-cp311-linux_x86_64.whl")}
    record = _wheel_dist.expected_record(found["files"])
    assert all(set(entry) == {"sha256", "size"} for entry in record.values())
    lock = tmp_path / "x.requirements.lock"
    lock.write_text("pkg==1 --hash=sha256:00\n")
    extra = tmp_path / "tabulate-0.9.0-py3-none-any.whl"
    extra.write_bytes(b"tab")
    found = _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "", str(lock), [str(extra)])
    assert "dist/x.requirements.lock" in found["files"] and "wheelhouse/" + extra.name in found["files"]


@pytest.mark.parametrize("case,expected", [
    ("missing-manifest", "wheel manifest %(d)s/absent.whl.manifest.json not found on the controller"),
    ("wrong-sha", "has sha256 %(sha)s, manifest %(d)s/%(wheel)s.manifest.json says"),
    ("no-torch", "has no torch-2.13.0+cpu-*.whl"),
])
def test_source_refusals_name_the_file(tmp_path, case, expected):
    d, m, wheel = dist(tmp_path, torch_in_wheelhouse=case != "no-torch")
    manifest = ""
    if case == "missing-manifest":
        manifest = str(d / "absent.whl.manifest.json")
    if case == "wrong-sha":
        wheel.write_bytes(b"another wheel")
    path = _wheel_dist.choose_manifest(str(d), manifest, "")
    with pytest.raises(_wheel_dist.DistError) as exc:
        _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "")
    assert expected % {"d": d, "wheel": wheel.name, "sha": hashlib.sha256(b"another wheel").hexdigest()} in str(exc.value)
    # With an index, torch may come from there.
    if case == "no-torch":
        assert _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "https://pypi.org/simple")


def test_source_refuses_a_manifest_whose_arch_list_the_nodes_cannot_read(tmp_path):
    # A hand-edited manifest: refused on the controller, before any copy, not by each GPU node's check.
    d, m, wheel = dist(tmp_path)
    m.update(accelerator="cuda", cuda={"version": "13.0", "arch_list": "8.0;sm9"})
    _manifest.write(_manifest.path_for(str(wheel)), m)
    path = _wheel_dist.choose_manifest(str(d), "", "")
    with pytest.raises(_wheel_dist.DistError) as exc:
        _wheel_dist.source(str(d), path, "", str(d / "wheelhouse"), "")
    assert str(exc.value) == ("manifest %s: cuda.arch_list='8.0;sm9': 'sm9' is not a compute capability; valid "
                              "tokens look like 7.5, 8.0, 9.0a, 9.0+PTX (separated by ';'), e.g. '7.5;8.0;9.0+PTX' "
                              "(see docs/manifest.md)" % path)


def install_deepspeed(site, m, op_bytes=b"op"):
    """DeepSpeed in a site-packages as pip leaves it: its dist-info with a RECORD of the op binaries (each
    recorded as b"op"), and the op binaries (op_bytes)."""
    info = site / ("deepspeed-%s.dist-info" % m["deepspeed"]["version"])
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deepspeed\nVersion: %s\n\n" % m["deepspeed"]["version"])
    lines = []
    for op in m["ops"]:
        path = site / op["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(op_bytes)
        digest = base64.urlsafe_b64encode(hashlib.sha256(b"op").digest()).decode().rstrip("=")
        lines.append("%s,sha256=%s,%d" % (op["file"], digest, 2))
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def install(tmp_path, m, op_bytes=b"op"):
    """A release venv as install.yml leaves it: deepspeed dist-info RECORD, the op binary, the marker."""
    release = tmp_path / "venv.releases" / "r1"
    install_deepspeed(release / "lib" / "python3.11" / "site-packages", m, op_bytes)
    marker = {"verified": True, "wheel_sha256": m["wheel_sha256"], "torch": m["torch"]["version"],
              "requirements_sha256": "", "python_version": "3.11.2", "deepspeed": "0.19.8",
              "ops": sorted(op["name"] for op in m["ops"]), "venv": "/opt/v", "python": "/opt/v/bin/python",
              "torch_cuda": None, "accelerator": "cpu", "wheel": m["wheel"], "release": str(release)}
    (release / node_probe.MARKER_NAME).write_text(json.dumps(marker))
    venv = tmp_path / "venv"
    os.symlink(str(release), str(venv))
    return venv, marker


def node_dir_with(tmp_path, files):
    node = tmp_path / "node"
    for name, content in files.items():
        (node / os.path.dirname(name)).mkdir(parents=True, exist_ok=True)
        (node / name).write_bytes(content)
    return node


def test_current_node_and_each_reason_it_is_not(tmp_path):
    m = dict(_manifest.read(str(RECORDED)), wheel_sha256="a" * 64)
    venv, marker = install(tmp_path, m)
    content = {"dist/w.whl": b"wheel", "wheelhouse/t.whl": b"torch"}
    node = node_dir_with(tmp_path, content)
    expected = {name: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for name, b in content.items()}
    record = json.dumps({"files": expected})
    facts = node_probe.venv_facts(str(venv))
    assert _wheel_dist.current_problems(m, facts, "", str(node), expected, record) == []
    assert _wheel_dist.env_from_marker(marker)["ops"] == marker["ops"]
    # no record yet (first run of this version of the role), other files, a truncated copy
    assert "no record" in _wheel_dist.current_problems(m, facts, "", str(node), expected, None)[0]
    other = dict(expected, **{"wheelhouse/n.whl": {"sha256": "0" * 64, "size": 1}})
    assert _wheel_dist.current_problems(m, facts, "", str(node), other, record) == [
        "the files recorded in %s differ from the controller's" % node, "%s/wheelhouse/n.whl is missing" % node]
    (node / "wheelhouse" / "t.whl").write_bytes(b"to")
    assert "has 2 bytes, expected 5" in _wheel_dist.current_problems(m, facts, "", str(node), expected, record)[0]
    (node / "wheelhouse" / "t.whl").write_bytes(b"torch")
    # another wheel, or a requirements lock the install did not use
    assert "marker" in _wheel_dist.current_problems(dict(m, wheel_sha256="b" * 64), facts, "", str(node), expected, record)[0]
    assert _wheel_dist.current_problems(m, facts, "c" * 64, str(node), expected, record) == [
        "the venv was installed with another job requirements lock (none, this run's: %s)" % ("c" * 64)]
    # the lock's packages: exactly these in the venv, or the node is not current
    lock = ["torch==2.13.0+cpu", "accelerate==1.15.0"]
    assert _wheel_dist.current_problems(m, dict(facts, packages=lock + ["pip==24.0"]), "", str(node), expected,
                                        record, lock) == []
    assert _wheel_dist.current_problems(m, dict(facts, packages=lock[:1]), "", str(node), expected, record, lock) == [
        "the venv differs from the job requirements' lock: accelerate: the lock has 1.15.0, not installed"]
    # an op binary changed after the install
    site = os.path.join(facts["target"], "lib", "python3.11", "site-packages")
    with open(os.path.join(site, m["ops"][0]["file"]), "wb") as handle:
        handle.write(b"patched")
    assert _wheel_dist.current_problems(m, facts, "", str(node), expected, record) == [
        "op %s: %s differs from the installed wheel's RECORD" % (m["ops"][0]["name"], os.path.join(site, m["ops"][0]["file"]))]
    # a venv directory not made by the role
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not a release symlink" in _wheel_dist.current_problems(
        m, node_probe.venv_facts(str(plain)), "", str(node), expected, record)[0]


def test_checksum_cache_rehashes_only_changed_files(tmp_path):
    path = tmp_path / "a.whl"
    path.write_bytes(b"one")
    cache = {}
    assert _wheel_dist.file_entry(str(path), cache)["sha256"] == hashlib.sha256(b"one").hexdigest()
    assert cache[str(path)][2] == hashlib.sha256(b"one").hexdigest()
    cache[str(path)][2] = "cached"  # an unchanged file is answered from the cache
    assert _wheel_dist.file_entry(str(path), cache)["sha256"] == "cached"
    path.write_bytes(b"three")  # another size: read again
    assert _wheel_dist.file_entry(str(path), cache)["sha256"] == hashlib.sha256(b"three").hexdigest()
    store = tmp_path / "cache" / "sums.json"
    _wheel_dist.save_cache(str(store), cache)
    assert _wheel_dist.load_cache(str(store)) == cache
    store.write_text("[")
    assert _wheel_dist.load_cache(str(store)) == {}
