"""Unit tests for _wheel.pack: the files a node lacks as one tar, shared by nodes that lack the same."""
import hashlib
import os
import tarfile
import threading

import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import pack as _pack


def files(tmp_path):
    """{name: {src, sha256, size}} as step source returns them, for three real files."""
    out = {}
    for name, data in (("dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl", b"ds"),
                       ("wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", b"torch" * 1000),
                       ("wheelhouse/numpy-2.0-cp311-cp311-linux_x86_64.whl", b"numpy")):
        src = tmp_path / "controller" / name
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_bytes(data)
        src.chmod(0o600)
        out[name] = {"src": str(src), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return out


def test_archive_holds_the_set_root_owned_0644(tmp_path):
    f = files(tmp_path)
    send = ["wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "dist/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"]
    path, made = _pack.pack(f, send, str(tmp_path / "out"))
    assert made and os.path.dirname(path) == str(tmp_path / "out")
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        assert sorted(m.name for m in members) == sorted(send)
        assert {(m.uid, m.gid, m.uname, m.mode) for m in members} == {(0, 0, "root", 0o644)}
        for m in members:
            assert hashlib.sha256(tar.extractfile(m).read()).hexdigest() == f[m.name]["sha256"]
    assert not [n for n in os.listdir(tmp_path / "out") if n.endswith(".partial")]


def test_same_set_same_archive_reused_other_set_other_archive(tmp_path):
    f = files(tmp_path)
    a, made_a = _pack.pack(f, list(f), str(tmp_path / "out"))
    b, made_b = _pack.pack(f, list(reversed(list(f))), str(tmp_path / "out"))
    c, made_c = _pack.pack(f, list(f)[:1], str(tmp_path / "out"))
    assert (made_a, made_b, made_c) == (True, False, True)
    assert a == b != c


def test_the_name_follows_the_content_not_only_the_names(tmp_path):
    f = files(tmp_path)
    changed = {k: dict(v) for k, v in f.items()}
    name = next(iter(changed))
    changed[name]["sha256"] = "0" * 64
    assert _pack.archive_name(f, [name]) != _pack.archive_name(changed, [name])


def test_concurrent_calls_for_one_set_write_it_once(tmp_path):
    f = files(tmp_path)
    results = []
    threads = [threading.Thread(target=lambda: results.append(_pack.pack(f, list(f), str(tmp_path / "out"))))
               for _index in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({path for path, _made in results}) == 1
    assert sorted(made for _path, made in results) == [False] * 5 + [True]


def test_a_name_not_distributed_is_refused(tmp_path):
    with pytest.raises(_pack.PackError, match="not among the files to distribute: wheelhouse/x.whl"):
        _pack.pack(files(tmp_path), ["wheelhouse/x.whl"], str(tmp_path / "out"))


def test_an_unreadable_source_is_named_and_leaves_no_partial_file(tmp_path):
    f = files(tmp_path)
    name = "wheelhouse/numpy-2.0-cp311-cp311-linux_x86_64.whl"
    os.unlink(f[name]["src"])
    with pytest.raises(_pack.PackError, match="numpy-2.0.*cannot be read on the controller"):
        _pack.pack(f, [name], str(tmp_path / "out"))
    assert [n for n in os.listdir(tmp_path / "out") if not n.endswith(".lock")] == []
