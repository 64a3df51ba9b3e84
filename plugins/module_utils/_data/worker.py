# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One node's side of train_data_sync's transfer: serve what it holds, take what it lacks.

Standard library only: module data_sync (start) runs this file's source detached
(``python -c SOURCE multinode-training-data STATE_DIR``); ``STATE_DIR/config.json`` says what to do
and ``STATE_DIR/status.json`` says how far it got (module data_sync (poll) reads it). The same
helpers (sha256, the node's record, where a file goes) serve the module's check (``_data.sync``).

- **Serve**: an HTTP server on the node's job address and port (train_rdzv_port + 2) hands out the
  files of the manifest this node holds complete and verified, to a peer that knows the run's token.
  A file this node is still receiving is answered 409 (not yet): the peer waits. One send at a time,
  the request of the lowest round first: the plan is a doubling tree (node1 sends to node2, then
  node1 and node2 to node3 and node4, ...), which one send at a time keeps.
- **Take**: the files the controller sent in one tar (``upload.tar`` in the state directory, put
  there by the action after its transfer) and the files of the plan's ``pull`` list, each from the
  first source that answers (the plan's peer, then every node that held it before). Each file is
  written into a staging directory beside its destination (same filesystem), checked against its
  size and sha256, given its owner and mode, then renamed into place: a failure leaves nothing
  half-written in the destination.
- After its own files it keeps serving until told to stop (module data_sync (stop)) or nobody asked
  for anything for ``linger`` seconds.

The node's record (``.<name>.multinode-training-data.json`` beside each destination: size, mtime and
sha256 per file) lets the next check trust a file whose size and mtime did not change instead of
hashing it again.
"""
from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import os
import socket
import sys
import tarfile
import threading
import time

from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from urllib.parse import quote, unquote

MARK = "multinode-training-data"
RECORD = ".multinode-training-data.json"
PART = ".multinode-training-part"
CHUNK = 1 << 20
# Seconds a source may not answer at all before the next source is tried (a source that answers
# "not yet" is alive and waited for); the ssh keepalives give up on a frozen node after 60 s too.
PATIENCE = 60.0
# Seconds without a request after which a worker whose own files are done exits by itself.
LINGER = 600.0
# Seconds without a poll from the controller (the action polls at least every 30 s) after which a worker
# that is still taking files gives up: ansible-playbook was stopped, nothing else would end it.
LEASE = 120.0
# Seconds a worker waits for the controller's archive at least; the action adds one per MB it sends.
UPLOAD_WAIT = 600.0
# Seconds between writes of the node's record while files arrive (the last one at the end).
RECORD_EVERY = 2.0


class SyncError(Exception):
    """A file cannot be brought here; str() says which and why."""


# ------------------------------------------------------------------ helpers shared with the check
def target(dest, rel):
    """The node path of file ``rel`` of an item whose destination is ``dest`` ("" for a file item)."""
    return dest if rel == "" else os.path.join(dest, rel)


def _beside(dest, suffix):
    head, name = os.path.split(dest.rstrip("/"))
    return os.path.join(head, "." + name + suffix)


def record_path(dest):
    return _beside(dest, RECORD)


def staging_path(dest):
    return _beside(dest, PART)


def sha256_file(path, progress=None):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(CHUNK)
            if not block:
                break
            digest.update(block)
            if progress:
                progress(len(block))
    return digest.hexdigest()


def load_record(dest):
    try:
        with open(record_path(dest)) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (IOError, OSError, ValueError):
        return {}


def save_record(dest, record):
    path = record_path(dest)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "w") as handle:
            json.dump(record, handle, sort_keys=True)
        os.replace(tmp, path)
    except (IOError, OSError):
        try:
            os.remove(tmp)
        except OSError:
            pass


def make_dirs(path, uid, gid, stop_at):
    """Make ``path`` and its missing parents; those at or below ``stop_at`` (the destination) get
    ``uid``/``gid`` and mode 0750, those above it root's usual 0755."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        inside = directory == stop_at or directory.startswith(stop_at.rstrip("/") + "/")
        os.mkdir(directory, 0o750 if inside else 0o755)
        if inside:
            os.chmod(directory, 0o750)
            if uid is not None and uid >= 0:
                os.chown(directory, uid, -1 if gid is None else gid)


# ------------------------------------------------------------------ the worker
class Worker:
    def __init__(self, state_dir, config):
        self.state_dir = state_dir
        self.cfg = config
        self.items = config["items"]
        self.uid = config.get("uid")
        self.gid = config.get("gid")
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        # files this node holds complete and verified: (item, rel)
        self.ready = set()
        todo = set((int(i), rel) for i, rel in config.get("upload", []))
        todo |= set((int(p["item"]), p["rel"]) for p in config.get("pull", []))
        for index, item in enumerate(self.items):
            for rel in item["files"]:
                if (index, rel) not in todo:
                    self.ready.add((index, rel))
        total = sum(self.items[i]["files"][rel]["size"] for i, rel in todo)
        self.status = {"state": "running", "bytes_total": total, "bytes_done": 0,
                       "files_total": len(todo), "files_done": 0, "from": {}, "served": {},
                       "placed": [], "error": "", "waiting_for": "", "started": time.time()}
        self.last_request = time.time()
        self.lease_from = time.time()  # the controller's copy pauses its polls: counted from its end
        # each item's record, kept here and written every RECORD_EVERY s and at the end (not once per
        # file: a dataset of many files would rewrite its whole record for each one)
        self.records, self.dirty, self._records_written = {}, set(), 0.0
        self.queue = []  # send slot: heap of (round, seq)
        self.seq = itertools.count()
        self.sending = False
        self.stopped = threading.Event()
        self._written = 0.0

    # -- status
    def save_status(self, force=False):
        now = time.time()
        if not force and now - self._written < 0.5:
            return
        self._written = now
        path = os.path.join(self.state_dir, "status.json")
        with self.lock:
            text = json.dumps(self.status)
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)

    def check_lease(self):
        """SyncError once the controller has not polled for ``lease`` seconds (the poll touches the file)."""
        lease = float(self.cfg.get("lease", LEASE))
        try:
            last = os.path.getmtime(os.path.join(self.state_dir, "lease"))
        except OSError:
            last = self.status["started"]
        if lease > 0 and time.time() - max(last, self.lease_from) > lease:
            raise SyncError("the controller stopped following this node's transfer (no poll for %ds: "
                            "ansible-playbook ended?)" % lease)

    def save_records(self, force=False):
        if not force and time.time() - self._records_written < RECORD_EVERY:
            return
        self._records_written = time.time()
        with self.lock:
            dirty, self.dirty = self.dirty, set()
            copies = dict((index, dict(self.records[index])) for index in dirty)
        for index, record in copies.items():
            save_record(self.items[index]["dest"], record)

    def _progress(self, count, source):
        with self.lock:
            self.status["bytes_done"] += count
            self.status["from"][source] = self.status["from"].get(source, 0) + count
        self.save_status()

    # -- placing a file
    def _staging_file(self, index):
        dest = self.items[index]["dest"]
        staging = staging_path(dest)
        make_dirs(os.path.dirname(staging), None, None, "/\0")
        if not os.path.isdir(staging):
            os.mkdir(staging, 0o700)
        return os.path.join(staging, "%d.%d.part" % (os.getpid(), next(self.seq)))

    def place(self, index, rel, tmp):
        """Owner, mode and rename into place of a checked staging file."""
        item = self.items[index]
        want = item["files"][rel]
        path = target(item["dest"], rel)
        mode = int(want.get("mode", 0o644)) & 0o7777 | 0o400
        os.chmod(tmp, mode)
        if self.uid is not None and self.uid >= 0:
            os.chown(tmp, self.uid, -1 if self.gid is None else self.gid)
        if item["kind"] == "dir":
            make_dirs(os.path.dirname(path), self.uid, self.gid, item["dest"].rstrip("/"))
        else:
            make_dirs(os.path.dirname(path), None, None, "/\0")
        if os.path.isdir(path) and not os.path.islink(path):
            raise SyncError("%s: a directory is in the way of the file" % path)
        os.replace(tmp, path)
        stat = os.stat(path)
        with self.cond:
            if index not in self.records:
                self.records[index] = load_record(item["dest"])
            self.records[index][rel] = [stat.st_size, stat.st_mtime_ns, want["sha256"]]
            self.dirty.add(index)
            self.ready.add((index, rel))
            self.status["files_done"] += 1
            self.status["placed"].append([index, rel])
            self.cond.notify_all()
        self.save_records()

    def receive(self, index, rel, stream, source, length=None):
        """Write ``stream`` to staging, check size and sha256, place -> None; SyncError when wrong."""
        want = self.items[index]["files"][rel]
        tmp = self._staging_file(index)
        digest, size = hashlib.sha256(), 0
        try:
            with open(tmp, "wb") as out:
                remaining = want["size"] if length is None else length
                while remaining > 0:
                    block = stream.read(min(CHUNK, remaining))
                    if not block:
                        break
                    out.write(block)
                    digest.update(block)
                    size += len(block)
                    remaining -= len(block)
                    self._progress(len(block), source)
            if size != want["size"] or digest.hexdigest() != want["sha256"]:
                with self.lock:
                    self.status["bytes_done"] -= size
                raise SyncError("%s from %s: %d bytes, sha256 %s; the manifest says %d bytes, sha256 %s"
                                % (target(self.items[index]["dest"], rel), source, size, digest.hexdigest()[:12],
                                   want["size"], want["sha256"][:12]))
            self.place(index, rel, tmp)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    # -- what the controller sent
    def ingest_upload(self):
        expected = set((int(i), rel) for i, rel in self.cfg.get("upload", []))
        if not expected:
            return
        path = os.path.join(self.state_dir, "upload.tar")
        with self.lock:
            self.status["waiting_for"] = "the controller"
        abort = os.path.join(self.state_dir, "abort")
        limit = time.time() + float(self.cfg.get("upload_wait", UPLOAD_WAIT))
        while not os.path.exists(path):
            if os.path.exists(abort):  # the controller's copy failed: say so to the peers waiting here
                with open(abort) as handle:
                    raise SyncError("the controller's copy to this node failed: %s" % handle.read().strip())
            if time.time() > limit:
                raise SyncError("the controller's copy did not arrive within %ds" % self.cfg.get("upload_wait", UPLOAD_WAIT))
            if self.stopped.wait(0.2):
                return
        self.lease_from = time.time()
        with self.lock:
            self.status["waiting_for"] = ""
        with tarfile.open(path, "r|") as tar:
            for member in tar:
                index, rel = member.name.split("/", 1)
                key = (int(index), rel if rel != "." else "")
                if key not in expected or not member.isfile():
                    raise SyncError("the controller's archive holds %s, which was not asked for" % member.name)
                self.receive(key[0], key[1], tar.extractfile(member), "controller", member.size)
                expected.discard(key)
        os.remove(path)
        if expected:
            raise SyncError("the controller's archive lacks %s" % ", ".join(
                target(self.items[i]["dest"], rel) for i, rel in sorted(expected)))

    # -- what peers send
    def pull_one(self, pull):
        index, rel = int(pull["item"]), pull["rel"]
        path = target(self.items[index]["dest"], rel)
        failures = []
        for name, addr in pull["from"]:
            done, why = self._fetch(index, rel, pull.get("round", 0), name, addr)
            if done:
                return
            failures.append("%s (%s)" % (name, why))
        raise SyncError("cannot get %s from %s" % (path, "; ".join(failures)))

    def _fetch(self, index, rel, round_, name, addr):
        """(True, "") once the file is placed; (False, why) when this source gave up."""
        host = addr.strip("[]")
        last_answer, why = time.time(), ""
        url = "/%d/%s" % (index, quote(rel))
        while not self.stopped.is_set():
            conn = HTTPConnection(host, int(self.cfg["port"]), timeout=PATIENCE)
            try:
                conn.request("GET", url, headers={"X-Token": self.cfg["token"], "X-Round": str(round_),
                                                  "X-Node": self.cfg["node"]})
                response = conn.getresponse()
                last_answer = time.time()
                if response.status == 200:
                    with self.lock:
                        self.status["waiting_for"] = ""
                    length = int(response.getheader("Content-Length", "-1"))
                    try:
                        self.receive(index, rel, response, name, None if length < 0 else length)
                    except SyncError as exc:
                        return False, str(exc)
                    return True, ""
                response.read()
                if response.status == 409:
                    with self.lock:
                        self.status["waiting_for"] = name
                    self.check_lease()
                    self.stopped.wait(0.3)
                    continue
                if response.status == 410:
                    return False, "its own transfer failed: %s" % response.getheader("X-Error", "")
                return False, "HTTP %d %s" % (response.status, response.reason)
            except (socket.error, OSError, IOError) as exc:
                why = "%s:%s: %s" % (addr, self.cfg["port"], exc)
                patience = float(self.cfg.get("patience", PATIENCE))
                if time.time() - last_answer > patience:
                    return False, "no answer for %ds: %s" % (patience, why)
                self.check_lease()
                self.stopped.wait(0.5)
            finally:
                conn.close()
        return False, "stopped"

    # -- serving
    def acquire_send(self, round_):
        with self.cond:
            entry = (round_, next(self.seq))
            heapq.heappush(self.queue, entry)
            while self.sending or self.queue[0] != entry:
                self.cond.wait(0.5)
            heapq.heappop(self.queue)
            self.sending = True

    def release_send(self):
        with self.cond:
            self.sending = False
            self.cond.notify_all()

    def send_file(self, handler, path, peer):
        """The file at path as a request's answer, counting what each peer took."""
        with open(path, "rb") as handle:
            handler.send_response(200)
            handler.send_header("Content-Length", str(os.fstat(handle.fileno()).st_size))
            handler.end_headers()
            while True:
                block = handle.read(CHUNK)
                if not block:
                    break
                handler.wfile.write(block)
                with self.lock:
                    self.status["served"][peer] = self.status["served"].get(peer, 0) + len(block)
                self.last_request = time.time()

    def serve(self):
        worker = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):  # no stderr: nobody reads it
                return

            def do_GET(self):
                worker.last_request = time.time()
                if self.headers.get("X-Token") != worker.cfg["token"]:
                    self.send_error(403)
                    return
                parts = self.path.split("/", 2)
                try:
                    index, rel = int(parts[1]), unquote(parts[2])
                    item = worker.items[index]
                    item["files"][rel]
                except (IndexError, ValueError, KeyError):
                    self.send_error(404)
                    return
                with worker.lock:
                    ready = (index, rel) in worker.ready
                    failed = worker.status["error"] if worker.status["state"] == "failed" else ""
                if not ready:
                    # 409: still coming here, wait; 410: it will not come (this node's transfer failed)
                    self.send_response(410 if failed else 409)
                    self.send_header("X-Error", failed.replace("\n", " ")[:500])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                peer = self.headers.get("X-Node", self.client_address[0])
                worker.acquire_send(int(self.headers.get("X-Round", "0") or 0))
                try:
                    worker.send_file(self, target(item["dest"], rel), peer)
                except (IOError, OSError):
                    pass
                finally:
                    worker.release_send()

        class Server(ThreadingMixIn, HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        bind = self.cfg["bind"]
        if ":" in bind:
            Server.address_family = socket.AF_INET6
        return Server((bind.strip("[]"), int(self.cfg["port"])), Handler)

    # -- the whole run
    def run(self):
        server = None
        self.save_status(force=True)
        try:
            if self.cfg.get("serve"):
                try:
                    server = self.serve()
                except (socket.error, OSError) as exc:
                    raise SyncError("cannot serve the files its peers need on %s port %s: %s"
                                    % (self.cfg["bind"], self.cfg["port"], exc))
                threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
            self.ingest_upload()
            for pull in sorted(self.cfg.get("pull", []), key=lambda p: p.get("round", 0)):
                self.pull_one(pull)
            with self.lock:
                self.status["state"] = "done"
        except (SyncError, IOError, OSError, tarfile.TarError) as exc:
            with self.lock:
                self.status["state"] = "failed"
                self.status["error"] = str(exc)
        self.save_records(force=True)
        for item in self.items:  # empty by now: each file was renamed into place or removed
            try:
                os.rmdir(staging_path(item["dest"]))
            except OSError:
                pass
        self.status["ended"] = time.time()
        self.save_status(force=True)
        linger = float(self.cfg.get("linger", LINGER))
        while server is not None and not self.stopped.is_set() and time.time() - self.last_request < linger:
            self.stopped.wait(1.0)
            self.save_status()
        if server is not None:
            server.shutdown()
        return 0 if self.status["state"] == "done" else 1


def main(argv):
    index = argv.index(MARK) if MARK in argv else 0
    state_dir = argv[index + 1]
    with open(os.path.join(state_dir, "config.json")) as handle:
        config = json.load(handle)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    return Worker(state_dir, config).run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
