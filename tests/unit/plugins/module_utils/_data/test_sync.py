"""Unit tests for train_data_sync (_data.sync, _data.worker): the controller's manifest and its cache, a
node's check and its record, the plan (controller bytes once, a doubling tree), and real transfers between
workers that serve and pull over HTTP on 127.0.0.1, 127.0.0.2, ... (each a node, in a thread)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import tarfile
import threading
import time

import pytest

from ansible_collections.multinode.training.plugins.module_utils._data import sync
from ansible_collections.multinode.training.plugins.module_utils._data import worker as wk


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "controller" / "ds"
    _write(str(root / "a.bin"), b"a" * 300000)
    _write(str(root / "sub" / "b.txt"), b"hello")
    _write(str(tmp_path / "controller" / "model.pt"), b"weights" * 1000)
    return tmp_path / "controller"


def _items(src, tmp_path, node="n1"):
    return [{"src": str(src / "ds"), "dest": str(tmp_path / node / "data" / "ds")},
            {"src": str(src / "model.pt"), "dest": str(tmp_path / node / "models" / "model.pt")}]


def _counting():
    seen = []

    def hash_file(path):
        seen.append(os.path.basename(path))
        return wk.sha256_file(path)
    return seen, hash_file


# ------------------------------------------------------------------ manifest
def test_manifest_lists_hashes_and_caches(src, tmp_path):
    cache = str(tmp_path / "cache")
    seen, hash_file = _counting()
    items, hashed = sync.manifest(_items(src, tmp_path), cache, hash_file)
    assert items[0]["kind"] == "dir" and sorted(items[0]["files"]) == ["a.bin", "sub/b.txt"]
    assert items[0]["files"]["sub/b.txt"]["sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert items[1]["kind"] == "file" and list(items[1]["files"]) == [""]
    assert hashed == 300000 + 5 + 7000 and len(seen) == 3
    # the same files again: nothing hashed
    seen[:] = []
    assert sync.manifest(_items(src, tmp_path), cache, hash_file)[1] == 0 and seen == []
    # one file changed: only that one
    _write(str(src / "ds" / "sub" / "b.txt"), b"hello, world")
    again, hashed = sync.manifest(_items(src, tmp_path), cache, hash_file)
    assert seen == ["b.txt"] and hashed == 12
    assert again[0]["files"]["sub/b.txt"]["size"] == 12


def test_manifest_refuses_a_missing_src(tmp_path):
    with pytest.raises(sync.ManifestError) as err:
        sync.manifest([{"src": str(tmp_path / "nope"), "dest": "/data/x"}], str(tmp_path / "c"))
    assert str(err.value).startswith("train_data_sync[0][src]=%s: does not exist on the controller; valid:"
                                     % (tmp_path / "nope"))


# ------------------------------------------------------------------ a node's check
def _place_all(items):
    for item in items:
        for rel in item["files"]:
            path = wk.target(item["dest"], rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(wk.target(item["src"], rel), "rb") as handle, open(path, "wb") as out:
                out.write(handle.read())
            os.chmod(path, item["files"][rel]["mode"] | 0o400)


def test_check_names_missing_and_differing_and_trusts_its_record(src, tmp_path):
    items = sync.manifest(_items(src, tmp_path), str(tmp_path / "cache"))[0]
    found = sync.check(items)
    assert sorted(map(tuple, found["need"])) == [(0, "a.bin"), (0, "sub/b.txt"), (1, "")]
    assert found["differs"] == []
    _place_all(items)
    seen, hash_file = _counting()
    assert sync.check(items, hash_file=hash_file)["need"] == [] and len(seen) == 3
    seen[:] = []
    assert sync.check(items, hash_file=hash_file)["need"] == [] and seen == []  # the record
    # corrupted with the same size: its mtime changed, so it is hashed, and named
    path = wk.target(items[0]["dest"], "a.bin")
    with open(path, "r+b") as handle:
        handle.write(b"X")
    os.utime(path, ns=(1, 1))
    found = sync.check(items, hash_file=hash_file)
    assert found["need"] == [[0, "a.bin"]] and found["differs"] == [path] and seen == ["a.bin"]


def test_check_tells_a_controller_change_from_a_node_copy_gone_wrong(src, tmp_path):
    items = sync.manifest(_items(src, tmp_path), str(tmp_path / "cache"))[0]
    _place_all(items)
    sync.check(items)  # the record: as placed
    _write(str(src / "ds" / "sub" / "b.txt"), b"hello again")
    items = sync.manifest(_items(src, tmp_path), str(tmp_path / "cache"))[0]
    found = sync.check(items)
    assert found["need"] == [[0, "sub/b.txt"]] and found["differs"] == []


# ------------------------------------------------------------------ the plan
def _plan_items(count=1, size=100):
    return [{"dest": "/d", "kind": "dir", "files": dict(("f%d" % i, {"size": size, "sha256": "x"})
                                                        for i in range(count))}]


def test_plan_sends_once_from_the_controller_then_a_doubling_tree():
    hosts = ["n%d" % i for i in range(1, 9)]
    addrs = dict((h, "10.0.0.%d" % i) for i, h in enumerate(hosts, 1))
    needs = dict((h, [[0, "f0"]]) for h in hosts)
    out = sync.plan(_plan_items(), needs, hosts, addrs)
    nodes, summary = out["nodes"], out["summary"]
    assert nodes["n1"]["upload"] == [[0, "f0"]] and all(not nodes[h]["upload"] for h in hosts[1:])
    assert summary["upload_bytes"] == 100 and summary["copies"] == 7 and summary["rounds"] == 3
    sources = dict((h, nodes[h]["pull"][0]["from"][0][0]) for h in hosts[1:])
    assert sources == {"n2": "n1", "n3": "n1", "n4": "n2", "n5": "n1", "n6": "n2", "n7": "n3", "n8": "n4"}
    # every source is a node that got the file in an earlier round
    rounds = dict((h, nodes[h]["pull"][0]["round"]) for h in hosts[1:])
    rounds["n1"] = 0
    assert all(rounds[sources[h]] < rounds[h] for h in hosts[1:])
    assert nodes["n8"]["pull"][0]["from"] == [["n4", "10.0.0.4"], ["n1", "10.0.0.1"]]


def test_plan_takes_nothing_from_the_controller_when_a_node_holds_it():
    hosts = ["n1", "n2", "n3"]
    addrs = {"n1": "a1", "n2": "a2", "n3": "a3"}
    out = sync.plan(_plan_items(2), {"n1": [[0, "f0"]], "n2": [], "n3": [[0, "f0"], [0, "f1"]]}, hosts, addrs)
    assert out["summary"]["upload_bytes"] == 0
    assert out["nodes"]["n1"]["pull"][0]["from"][0][0] == "n2"
    assert out["nodes"]["n2"]["serve"] and out["summary"]["bytes"] == {"n1": 100, "n2": 0, "n3": 200}
    # nothing lacking: nothing to do
    idle = sync.plan(_plan_items(2), {}, hosts, addrs)
    assert idle["summary"]["files"] == 0 and not any(n["serve"] or n["pull"] for n in idle["nodes"].values())


# ------------------------------------------------------------------ real transfers between workers
def _free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def _run_nodes(src, tmp_path, hosts, corrupt=None, tokens=None, dead_source=False, patience=5, linger=0.5):
    """Each host a worker in a thread on 127.0.0.N; the controller's archive for the plan's uploads. ``tokens``:
    a host's own token where it is not the run's; ``dead_source``: every pull tries first a source that does not
    answer (127.0.0.99, where nothing listens)."""
    port = _free_port()
    addrs = dict((h, "127.0.0.%d" % i) for i, h in enumerate(hosts, 1))
    node_items = dict((h, sync.manifest(_items(src, tmp_path, h), str(tmp_path / "cache"))[0]) for h in hosts)
    needs = dict((h, sync.check(node_items[h])["need"]) for h in hosts)
    out = sync.plan(node_items[hosts[0]], needs, hosts, addrs)
    workers = {}
    for h in hosts:
        state = tmp_path / ("state-" + h)
        state.mkdir()
        part = out["nodes"][h]
        pulls = [dict(p, **{"from": [["gone", "127.0.0.99"]] + p["from"]}) for p in part["pull"]] if dead_source \
            else part["pull"]
        config = {"items": node_items[h], "upload": part["upload"], "pull": pulls, "serve": part["serve"],
                  "bind": addrs[h], "port": port, "token": (tokens or {}).get(h, "tok"), "node": h, "linger": linger,
                  "patience": patience}
        workers[h] = wk.Worker(str(state), config)
        if part["upload"]:
            with tarfile.open(str(state / "upload.tar.tmp"), "w") as tar:
                for index, rel in part["upload"]:
                    path = wk.target(node_items[h][index]["src"], rel)
                    if corrupt and path.endswith(corrupt):
                        data = b"evil" + open(path, "rb").read()[4:]
                        info = tarfile.TarInfo("%d/%s" % (index, rel or "."))
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
                    else:
                        tar.add(path, arcname="%d/%s" % (index, rel or "."))
            os.rename(str(state / "upload.tar.tmp"), str(state / "upload.tar"))
    rcs = {}
    threads = [threading.Thread(target=lambda h=h: rcs.__setitem__(h, workers[h].run())) for h in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return out, workers, rcs, node_items


def test_workers_bring_every_node_the_files_once_from_the_controller(src, tmp_path):
    hosts = ["n1", "n2", "n3"]
    out, workers, rcs, node_items = _run_nodes(src, tmp_path, hosts)
    assert rcs == {"n1": 0, "n2": 0, "n3": 0}, [w.status["error"] for w in workers.values()]
    for h in hosts:
        assert sync.check(node_items[h])["need"] == []
        assert not os.path.exists(wk.staging_path(node_items[h][0]["dest"]))
        assert json.load(open(wk.record_path(node_items[h][0]["dest"])))["a.bin"][2] == \
            node_items[h][0]["files"]["a.bin"]["sha256"]
    total = 300000 + 5 + 7000
    assert workers["n1"].status["from"] == {"controller": total}
    assert sum(workers["n2"].status["from"].values()) == total
    assert sum(sum(w.status["served"].values()) for w in workers.values()) == 2 * total


def test_a_wrong_file_is_refused_and_nothing_half_written_stays(src, tmp_path):
    hosts = ["n1", "n2"]
    out, workers, rcs, node_items = _run_nodes(src, tmp_path, hosts, corrupt="a.bin")
    assert rcs["n1"] == 1
    error = workers["n1"].status["error"]
    assert "a.bin from controller" in error and "the manifest says 300000 bytes" in error
    assert not os.path.exists(wk.target(node_items["n1"][0]["dest"], "a.bin"))
    assert not os.path.exists(wk.staging_path(node_items["n1"][0]["dest"]))
    # n2 waited for n1, which then told it that the file will not come: n2 fails at once, naming why
    assert rcs["n2"] == 1
    assert workers["n2"].status["error"].startswith("cannot get %s from n1 (its own transfer failed: "
                                                    % wk.target(node_items["n2"][0]["dest"], "a.bin"))


def test_a_peer_without_the_runs_token_gets_nothing(src, tmp_path):
    """n2 asks n1 with another token: n1 answers 403 and sends no byte; n2 fails naming n1 and the refusal."""
    out, workers, rcs, node_items = _run_nodes(src, tmp_path, ["n1", "n2"], tokens={"n2": "not-the-runs"})
    assert rcs == {"n1": 0, "n2": 1}
    assert workers["n2"].status["error"].startswith("cannot get ")
    assert "from n1 (HTTP 403 Forbidden)" in workers["n2"].status["error"]
    assert workers["n1"].status["served"] == {} and workers["n2"].status["from"] == {}


def test_a_pull_falls_back_to_the_next_source_when_the_first_does_not_answer(src, tmp_path):
    """Every pull of n2 names first a node that does not answer (gone), then n1: after its patience n2 takes each
    file from n1 (which serves until 3 s after the last request), and the run succeeds."""
    started = time.monotonic()
    out, workers, rcs, node_items = _run_nodes(src, tmp_path, ["n1", "n2"], dead_source=True, patience=1, linger=3)
    assert rcs == {"n1": 0, "n2": 0}, [w.status["error"] for w in workers.values()]
    assert workers["n2"].status["from"] == {"n1": 300000 + 5 + 7000}
    assert sync.check(node_items["n2"])["need"] == []
    assert time.monotonic() - started < 40


def test_a_port_in_use_is_named(src, tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    items = sync.manifest(_items(src, tmp_path), str(tmp_path / "cache"))[0]
    state = tmp_path / "state"
    state.mkdir()
    worker = wk.Worker(str(state), {"items": items, "serve": True, "bind": "127.0.0.1", "port": port,
                                    "token": "t", "node": "n1", "linger": 0})
    try:
        assert worker.run() == 1
    finally:
        busy.close()
    assert worker.status["error"].startswith("cannot serve the files its peers need on 127.0.0.1 port %d: " % port)
    assert json.load(open(str(state / "status.json")))["state"] == "failed"


def test_nothing_waits_for_ever_when_the_controller_is_gone(src, tmp_path):
    """n1 waits for the controller's archive, which never comes; n2 waits for n1. Without polls from the
    controller (ansible-playbook killed) n2 gives up after its lease, n1 after its upload wait."""
    port = _free_port()
    items = sync.manifest(_items(src, tmp_path), str(tmp_path / "cache"))[0]
    keys = [[i, rel] for i, item in enumerate(items) for rel in item["files"]]
    base = {"items": items, "port": port, "token": "t", "linger": 0.5, "patience": 5}
    workers = {
        "n1": wk.Worker(str(tmp_path / "s1"), dict(base, node="n1", bind="127.0.0.1", serve=True, upload=keys,
                                                   upload_wait=3)),
        "n2": wk.Worker(str(tmp_path / "s2"), dict(base, node="n2", bind="127.0.0.2", lease=1, pull=[
            {"item": i, "rel": rel, "round": 1, "from": [["n1", "127.0.0.1"]]} for i, rel in keys])),
    }
    rcs = {}
    for name in workers:
        os.mkdir(workers[name].state_dir)
    threads = [threading.Thread(target=lambda n=n: rcs.__setitem__(n, workers[n].run())) for n in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert rcs == {"n1": 1, "n2": 1}
    assert workers["n2"].status["error"] == ("the controller stopped following this node's transfer (no poll for "
                                             "1s: ansible-playbook ended?)")
    assert workers["n1"].status["error"] == "the controller's copy did not arrive within 3s"


def test_one_sha256_of_a_file_serves_the_worker_the_build_and_the_seed(tmp_path):
    """worker.sha256_file is the collection's one sha256 of a file (the worker runs alone on the nodes, from
    its source, so the module side takes it from there): the manifest's wheel_sha256, the seed's RECORD check
    and the build's source digest all read a file through it, across its 1 MiB blocks."""
    from ansible_collections.multinode.training.plugins.module_utils._build import deepspeed, manifest
    from ansible_collections.multinode.training.plugins.module_utils._wheel import seed

    small, large = tmp_path / "abc", tmp_path / "tree" / "large.bin"
    small.write_bytes(b"abc")
    large.parent.mkdir()
    data = b"\x00\x01" * (wk.CHUNK + 7) + b"tail"
    large.write_bytes(data)
    progress = []
    assert wk.sha256_file(str(small)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert wk.sha256_file(str(large), progress.append) == hashlib.sha256(data).hexdigest()
    assert progress == [wk.CHUNK, wk.CHUNK, len(data) - 2 * wk.CHUNK]
    assert manifest.sha256_file is wk.sha256_file
    assert seed._file_hash(str(small)) == "sha256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"
    assert seed._file_hash(str(large)) == seed.record_hash(data)
    tree = hashlib.sha256(b"large.bin\0" + hashlib.sha256(data).digest()).hexdigest()
    assert deepspeed.source_digest(str(large.parent)) == tree
