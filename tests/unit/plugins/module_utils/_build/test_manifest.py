"""Unit tests for _manifest: schema, read, problems, write on recorded manifests."""
import json
import os

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest

from ....conftest import FIXTURES

RECORDED = [FIXTURES / "manifest" / "cpu-build-vm.manifest.json"] + sorted((FIXTURES / "wheel_compat").glob("manifest-*.json"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_manifests_are_valid(path):
    manifest = _manifest.read(str(path))
    assert _manifest.problems(manifest, str(path)) == []
    assert manifest["schema"] == _manifest.SCHEMA
    assert set(_manifest.REQUIRED_KEYS) <= set(manifest)


def test_write_then_read_roundtrip_and_idempotent(tmp_path):
    manifest = _manifest.read(str(RECORDED[0]))
    path = str(tmp_path / (manifest["wheel"] + _manifest.SUFFIX))
    assert _manifest.write(path, manifest) is True
    assert _manifest.write(path, manifest) is False  # same text: not rewritten
    assert _manifest.read(path) == manifest
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(path)]  # no temp file left


def test_write_check_mode_writes_nothing(tmp_path):
    path = str(tmp_path / "x.whl.manifest.json")
    assert _manifest.write(path, {"schema": 1}, check_mode=True) is True
    assert not os.path.exists(path)


@pytest.mark.parametrize("text,expected", [
    ("{", "is not valid JSON"),
    ("[1, 2]", "holds JSON list, not an object"),
])
def test_read_refuses_non_objects(tmp_path, text, expected):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(_manifest.ManifestError) as exc:
        _manifest.read(str(path))
    assert str(exc.value).startswith("manifest %s " % path) and expected in str(exc.value)


def test_read_missing_and_not_utf8(tmp_path):
    with pytest.raises(_manifest.ManifestError, match="cannot be read"):
        _manifest.read(str(tmp_path / "absent.json"))
    bad = tmp_path / "bin.json"
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(_manifest.ManifestError, match="not UTF-8"):
        _manifest.read(str(bad))


@pytest.mark.parametrize("change,expected", [
    ({"schema": 2}, "has schema 2"),
    ({"wheel_sha256": "abc"}, "is not a sha256"),
    ({"wheel": "deepspeed.tar.gz"}, "not a wheel file name"),
    ({"ops": "cpu_adam"}, "ops is str, not a list"),
    ({"ops": [{"name": "x"}]}, "ops[0] lacks 'builder'"),
])
def test_problems(change, expected):
    manifest = dict(_manifest.read(str(RECORDED[0])), **change)
    found = _manifest.problems(manifest, "/d/m.json")
    assert found and all(p.startswith("manifest /d/m.json") for p in found)
    assert expected in found[0]


def test_problems_missing_keys_each_named():
    manifest = _manifest.read(str(RECORDED[0]))
    del manifest["ops"], manifest["torch"]
    assert _manifest.problems(manifest, "m") == ["manifest m lacks key 'torch'", "manifest m lacks key 'ops'"]
    assert _manifest.missing_keys(manifest) == ["torch", "ops"]


def test_newest_and_wheel_problem(tmp_path):
    assert _manifest.newest(str(tmp_path / "none")) is None
    wheel = tmp_path / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel bytes")
    manifest = dict(_manifest.read(str(RECORDED[0])), wheel=wheel.name, wheel_sha256=_manifest.sha256_file(str(wheel)))
    old = tmp_path / "deepspeed-0.19.7-cp311-cp311-linux_x86_64.whl.manifest.json"
    old.write_text("{}")
    os.utime(str(old), (1, 1))
    path = _manifest.path_for(str(wheel))
    _manifest.write(path, manifest)
    (tmp_path / "notes.json").write_text("{}")
    assert _manifest.newest(str(tmp_path)) == path
    assert _manifest.wheel_path(path, manifest) == str(wheel)
    assert _manifest.wheel_problem(manifest, str(wheel), path) is None
    wheel.write_bytes(b"other bytes")
    assert "has sha256 %s, manifest %s says" % (_manifest.sha256_file(str(wheel)), path) in \
        _manifest.wheel_problem(manifest, str(wheel), path)
    assert "not found on the controller" in _manifest.wheel_problem(manifest, str(tmp_path / "x.whl"), path)


def test_dumps_is_stable():
    manifest = _manifest.read(str(RECORDED[0]))
    assert _manifest.dumps(manifest) == json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    assert _manifest.sha256_text(_manifest.dumps(manifest)) == _manifest.read_text(str(RECORDED[0]))[1]
