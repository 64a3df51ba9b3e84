# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""train_data_sync: datasets and model files the same on every node, verified, sent once.

Four steps (module and action data_sync):

1. ``manifest`` (controller, once): every file of every ``{src, dest}`` item with its size, mode and
   sha256. A file whose size and mtime match the controller's cache (``~/.cache/multinode-training/
   data/``) is not hashed again.
2. ``check`` (every node): which files the node lacks or holds wrong. A file whose size and mtime
   match the node's record (written when it was placed or last hashed) counts as its recorded sha256;
   any other is hashed. A file that exists with other content is named (``differs``): it is repaired
   by the transfer.
3. ``plan`` (controller, pure): per file, the nodes that hold it; none - the controller sends it once,
   to the first node that lacks it; then a doubling tree (each holder sends to one node per round), so
   N copies take about log2(N) transfer times and the controller's uplink carries one.
4. ``transfer`` (every node at once, ``_data.worker``): each node serves what it holds and takes what
   it lacks, with progress read by the action every few seconds; then ``stop`` ends every worker and
   removes their state.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import signal
import stat as _stat
import subprocess
import sys
import tempfile
import time

from ansible_collections.multinode.training.plugins.module_utils._data import worker as _worker
from ansible_collections.multinode.training.plugins.module_utils._train import listener as _listener

CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "multinode-training", "data")


class ManifestError(ValueError):
    """An item cannot be listed; str() names the variable, the value and what is valid."""


# ------------------------------------------------------------------ 1. the controller's manifest
def _walk(src):
    """(rel, path) of every regular file below directory ``src`` (symlinks to files followed,
    symlinked directories not entered), sorted."""
    found = []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path):
                found.append((os.path.relpath(path, src), path))
    return sorted(found)


def _cache_file(cache_dir, src):
    return os.path.join(cache_dir, hashlib.sha256(os.path.abspath(src).encode()).hexdigest()[:24] + ".json")


def manifest(items, cache_dir=CACHE_DIR, hash_file=_worker.sha256_file):
    """[{src, dest, kind, files: {rel: {size, mode, sha256}}}] and the bytes hashed now."""
    out, hashed = [], 0
    for index, item in enumerate(items):
        src, dest = str(item.get("src", "")), str(item.get("dest", ""))
        name = "train_data_sync[%d][src]" % index
        if not os.path.exists(src):
            raise ManifestError("%s=%s: does not exist on the controller; valid: a file or directory "
                                "on the controller" % (name, src))
        kind = "dir" if os.path.isdir(src) else "file"
        entries = _walk(src) if kind == "dir" else [("", src)]
        cache_path = _cache_file(cache_dir, src)
        try:
            with open(cache_path) as handle:
                cache = json.load(handle)
        except (IOError, OSError, ValueError):
            cache = {}
        files, new_cache = {}, {}
        for rel, path in entries:
            try:
                stat = os.stat(path)
                known = cache.get(rel)
                if known and known[0] == stat.st_size and known[1] == stat.st_mtime_ns:
                    digest = known[2]
                else:
                    digest = hash_file(path)
                    hashed += stat.st_size
            except (IOError, OSError) as exc:
                raise ManifestError("%s=%s: cannot read %s on the controller (%s); valid: files the "
                                    "controller's user can read" % (name, src, path, exc.strerror or exc))
            files[rel] = {"size": stat.st_size, "mode": stat.st_mode & 0o7777, "sha256": digest}
            new_cache[rel] = [stat.st_size, stat.st_mtime_ns, digest]
        if new_cache != cache:
            try:
                os.makedirs(cache_dir, mode=0o700, exist_ok=True)
                tmp = "%s.%d.tmp" % (cache_path, os.getpid())
                with open(tmp, "w") as handle:
                    json.dump(new_cache, handle)
                os.replace(tmp, cache_path)
            except (IOError, OSError):
                pass  # only the next run's speed depends on it
        out.append({"src": src, "dest": dest.rstrip("/") or dest, "kind": kind, "files": files})
    return out, hashed


def target_of(items, index, rel):
    """The node path of file ``rel`` of item ``index``."""
    return _worker.target(items[int(index)]["dest"], rel)


def sizes(items):
    return sum(f["size"] for item in items for f in item["files"].values())


# ------------------------------------------------------------------ 2. a node's check
def check(items, uid=None, gid=None, fix=True, hash_file=_worker.sha256_file):
    """-> {need: [[item, rel]], differs: [path], hashed: bytes, fixed: [path]} for this node.

    ``differs``: files that differ from the manifest and were changed on this node since they were placed
    (or were never placed by a sync): a node's copy gone wrong, named and repaired. A file as the last
    sync left it that differs is the controller's change: needed, not named."""
    need, differs, fixed, hashed = [], [], [], 0
    for index, item in enumerate(items):
        dest = item["dest"]
        record = _worker.load_record(dest)
        changed_record = False
        for rel, want in sorted(item["files"].items()):
            path = _worker.target(dest, rel)
            try:
                stat = os.lstat(path)
            except OSError:
                need.append([index, rel])
                continue
            known = record.get(rel)
            # as this run or an earlier one left it: a difference is the controller's change, not the node's
            as_placed = bool(known) and known[0] == stat.st_size and known[1] == stat.st_mtime_ns
            if not _stat.S_ISREG(stat.st_mode) or stat.st_size != want["size"]:
                need.append([index, rel])
                if not as_placed:
                    differs.append(path)
                continue
            if as_placed:
                digest = known[2]
            else:
                digest = hash_file(path)
                hashed += stat.st_size
                record[rel] = [stat.st_size, stat.st_mtime_ns, digest]
                changed_record = True
            if digest != want["sha256"]:
                need.append([index, rel])
                if not as_placed:
                    differs.append(path)
                continue
            mode = int(want.get("mode", 0o644)) & 0o7777 | 0o400
            wrong_owner = uid is not None and uid >= 0 and (stat.st_uid != uid or (gid is not None and stat.st_gid != gid))
            if wrong_owner or stat.st_mode & 0o7777 != mode:
                fixed.append(path)
                if fix:
                    os.chmod(path, mode)
                    if wrong_owner:
                        os.chown(path, uid, -1 if gid is None else gid)
        if changed_record and os.path.isdir(os.path.dirname(_worker.record_path(dest))):
            _worker.save_record(dest, record)
    return {"need": need, "differs": differs, "hashed": hashed, "fixed": fixed}


# ------------------------------------------------------------------ 3. the plan
def plan(items, needs, hosts, addrs, differs=None):
    """Who sends what: ``needs`` {host: [[item, rel]]} (step check), ``hosts`` in play order, ``addrs``
    {host: job address} -> {"nodes": {host: {upload, pull, serve}}, "summary": {...}}.

    Per file: the holders are the nodes that do not need it. None: the controller sends it to the first
    node that needs it. Then rounds: every node that has it (or gets it in an earlier round) sends to the
    next node that lacks it; each pull names its planned source first, then every node that held the
    file before the transfer (or the one the controller sent it to), as fallbacks."""
    wanted = dict((h, set((int(i), r) for i, r in needs.get(h, []))) for h in hosts)
    nodes = dict((h, {"upload": [], "pull": [], "serve": False}) for h in hosts)
    upload_bytes, peer_bytes, copies = 0, 0, 0
    keys = sorted(set(k for h in hosts for k in wanted[h]))
    for number, key in enumerate(keys):
        size = items[key[0]]["files"][key[1]]["size"]
        needy = [h for h in hosts if key in wanted[h]]
        holders = [h for h in hosts if key not in wanted[h]]
        if holders:
            shift = number % len(holders)  # spread the first sends over the holders
            holders = holders[shift:] + holders[:shift]
        else:
            seed = needy.pop(0)
            nodes[seed]["upload"].append(list(key))
            upload_bytes += size
            holders = [seed]
        first_holders = list(holders)
        have = list(holders)
        round_ = 0
        while needy:
            round_ += 1
            for source in list(have):
                if not needy:
                    break
                node = needy.pop(0)
                fallbacks = [h for h in first_holders if h != source]
                nodes[node]["pull"].append({"item": key[0], "rel": key[1], "round": round_,
                                            "from": [[h, addrs[h]] for h in [source] + fallbacks]})
                for h in [source] + fallbacks:
                    nodes[h]["serve"] = True
                have.append(node)
                peer_bytes += size
                copies += 1
    total = dict((h, sum(items[i]["files"][r]["size"] for i, r in wanted[h])) for h in hosts)
    summary = {"files": len(keys), "upload_bytes": upload_bytes, "peer_bytes": peer_bytes, "copies": copies,
               "bytes": total, "rounds": max([p["round"] for n in nodes.values() for p in n["pull"]] or [0])}
    summary["line"] = summary_line(items, summary, hosts, nodes, differs or {})
    return {"nodes": nodes, "summary": summary}


def summary_line(items, summary, hosts, nodes, differs):
    """What travels, in one line (the play prints it before the transfer)."""
    count = sum(len(item["files"]) for item in items)
    if not summary["files"]:
        return "data: every node has train_data_sync's %d files (%s), checked against their sha256" % (
            count, human(sizes(items)))
    line = "data: %d of %d files to send" % (summary["files"], count)
    if summary["upload_bytes"]:
        seeds = [h for h in hosts if nodes[h]["upload"]]
        line += ": %s from the controller (to %s)" % (human(summary["upload_bytes"]), ", ".join(seeds))
    else:
        line += ": nothing from the controller"
    if summary["copies"]:
        line += ", %d cop%s node to node (%s) in %d round%s" % (
            summary["copies"], "y" if summary["copies"] == 1 else "ies", human(summary["peer_bytes"]),
            summary["rounds"], "" if summary["rounds"] == 1 else "s")
    wrong = []
    for host in hosts:
        paths = differs.get(host) or []
        if paths:
            more = " and %d more" % (len(paths) - 3) if len(paths) > 3 else ""
            wrong.append("%s: %s%s" % (host, ", ".join(paths[:3]), more))
    if wrong:
        line += "; a node's copy differs from the controller's (repaired): " + "; ".join(wrong)
    return line


def human(count):
    """Bytes as "400 B", "27.0 MiB", "1.0 GiB" (TiB at most)."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    count = float(count)
    while count >= 1024 and len(units) > 1:
        count /= 1024.0
        units.pop(0)
    return "%d B" % count if units[0] == "B" else "%.1f %s" % (count, units[0])


# ------------------------------------------------------------------ 4. the node's worker
def state_dir(port):
    return os.path.join(tempfile.gettempdir(), "multinode-training-data-%d" % int(port))


def _pid(directory):
    try:
        with open(os.path.join(directory, "pid")) as handle:
            return int(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None


def _alive(pid):
    """Whether ``pid`` is a worker that has not exited (its command line names the worker: a reused pid
    is not one)."""
    if not pid:
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            if _worker.MARK.encode() not in handle.read().split(b"\0"):
                return False
    except (IOError, OSError):
        return False
    return _listener.running(pid)


def stop(port, items=(), wait=5.0):
    """End the worker on ``port`` and remove its state and the items' staging directories -> (whether
    a worker was running, its last status: what it served)."""
    directory = state_dir(port)
    pid = _pid(directory)
    last = read_status(port) if os.path.isdir(directory) else {}
    was = _alive(pid)
    if was:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
        deadline = time.time() + wait
        while _alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    shutil.rmtree(directory, ignore_errors=True)
    for item in items:
        shutil.rmtree(_worker.staging_path(item["dest"]), ignore_errors=True)
    return was, last


def start(config, python=None):
    """Start this node's worker (detached) -> its state directory. A worker left on the port by an
    earlier run is stopped first."""
    stop(config["port"], config["items"])
    directory = state_dir(config["port"])
    os.makedirs(directory, mode=0o700)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        json.dump(config, handle)
    argv = [python or sys.executable, "-c", inspect.getsource(_worker), _worker.MARK, directory]
    with open(os.devnull, "r+b") as null:
        proc = subprocess.Popen(argv, stdin=null, stdout=null, stderr=null, close_fds=True, start_new_session=True)
    with open(os.path.join(directory, "pid"), "w") as handle:
        handle.write(str(proc.pid))
    return directory


def abort(port, why):
    """Tell the worker that the controller's copy will not come (it fails, and says why to its peers)."""
    directory = state_dir(port)
    if os.path.isdir(directory):
        with open(os.path.join(directory, "abort"), "w") as handle:
            handle.write(why)


def read_status(port, wait=0.0, poll=0.25):
    """The worker's status; with ``wait``, returns early once it is no longer running."""
    directory = state_dir(port)
    try:  # the controller's poll: the worker's lease (_data.worker LEASE)
        with open(os.path.join(directory, "lease"), "w"):
            pass
    except (IOError, OSError):
        pass
    deadline = time.time() + wait
    while True:
        try:
            with open(os.path.join(directory, "status.json")) as handle:
                status = json.load(handle)
        except (IOError, OSError, ValueError):
            status = {"state": "starting", "bytes_done": 0, "bytes_total": 0}
        pid = _pid(directory)
        if status.get("state") in ("running", "starting") and not _alive(pid):
            status["state"] = "failed"
            status["error"] = status.get("error") or "the transfer process on this node ended unexpectedly"
        if status.get("state") not in ("running", "starting") or time.time() >= deadline:
            return status
        time.sleep(poll)
