# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a torchrun job left in its job directory -> per-rank results and the root cause.

Shared by the torchrun module (one node's ``<log_dir>/<job id>/``) and the slurm_job module (one
directory per node under the Slurm job's directory, read on the submit host). The parsing and the
root-cause choice are _torchrun.agent_log's and _node.torchrun's; this file only reads the files.

``pack_job_dir`` (node) and ``unpack_job_archive`` (controller, action torchrun) move one node's
job directory to the controller with the wait's last call: inline in its result when small.
"""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import socket
import stat
import tarfile
import tempfile
import time

from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import (  # noqa: F401 (one place)
    open_regular,
    rank_dirs,
    read_bytes,
    read_ranks,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.agent_log import parse_agent_log, parse_error_file
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    is_peer_error,
    pick_root_cause,
    rank_results,
    summarize_failure,
    tail,
)


def read_text(path):
    """A file of the job directory as text ('' when it cannot be read; never through a link, never
    a FIFO: ``_node.watchlib.read_bytes``)."""
    return read_bytes(path).decode("utf-8", "replace")


def read_json(path):
    text = read_text(path)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def inside(job_dir, path):
    """``path`` where it lies inside ``job_dir`` (torchrun names the error files in its log, which
    the job's account writes: root reads no file the log points to elsewhere), else None."""
    if not path:
        return None
    top = os.path.abspath(job_dir)
    full = os.path.abspath(os.path.join(top, path))
    return full if full.startswith(top.rstrip("/") + "/") else None


def _time_of(entry, error_file):
    if error_file and os.path.exists(error_file):
        return os.path.getmtime(error_file)
    if entry.get("time"):
        try:
            return time.mktime(time.strptime(entry["time"], "%Y-%m-%d_%H:%M:%S"))
        except ValueError:
            return None
    return None


# Lines of the failing rank's log a result carries, when the caller gives none (the torchrun and
# slurm_job modules' tail_lines).
TAIL_LINES = 30


def latest_records(job_dir):
    """Local rank -> the rank wrapper's record of its latest attempt (``_node.watchlib.read_ranks``)."""
    latest = {}
    for record in read_ranks(job_dir):
        local = record.get("local_rank")
        if local is not None and (local not in latest or (record.get("restart") or 0) >= (latest[local].get("restart") or 0)):
            latest[local] = record
    return latest


def wrapper_exits(job_dir, latest=None):
    """Local rank -> the exit code the rank wrapper recorded for its latest attempt (where it recorded one)."""
    latest = latest_records(job_dir) if latest is None else latest
    return {local: record["exitcode"] for local, record in latest.items()
            if record.get("state") in ("succeeded", "failed") and record.get("exitcode") is not None}


def recorded_failures(latest, failures):
    """The ranks that failed by their own records (``latest``: local rank -> the rank wrapper's record of
    its latest attempt) and that torchrun's summary (``failures``) does not name.

    torchrun prints its failure summary as it ends; a torchrun that a signal ends first prints none.
    Under Slurm that happens to the node whose rank failed when another node's task exits first:
    ``srun --kill-on-bad-exit`` signals every process of the step while this node's torchrun still
    waits for its other ranks. The failing rank recorded its exit code and error as it ended. A rank
    that left no record (killed by a signal: torchrun's own stop, mostly) is not named here."""
    named = set(f.get("local_rank") for f in failures)
    return [{"rank": record.get("rank"), "local_rank": local, "exitcode": record.get("exitcode"),
             "message": record.get("message"), "error_file": None, "source": "rank record",
             "timestamp": record.get("time"), "peer": is_peer_error(record.get("message"), record.get("exitcode"))}
            for local, record in sorted(latest.items())
            if local not in named and record.get("state") == "failed"]


def collect(job_dir, job, result_data, tail_lines, host):
    """Everything the job left behind on one node (``host``) -> return values."""
    agent_log = read_text(os.path.join(job_dir, "torchrun.log"))
    parsed = parse_agent_log(agent_log)
    dirs = rank_dirs(job_dir)
    rc = result_data.get("rc") if result_data else None
    failures = []
    for entry in ([parsed["root_cause"]] if parsed["root_cause"] else []) + parsed["failures"]:
        local = entry.get("local_rank")
        error_file = inside(job_dir, entry.get("error_file"))
        if local is not None and local in dirs and not error_file:
            candidate = os.path.join(dirs[local], "error.json")
            error_file = candidate if os.path.exists(candidate) else None
        info = dict(entry, error_file=error_file)
        if error_file:
            recorded = read_json(error_file)
            if recorded:
                parsed_error = parse_error_file(recorded)
                info["message"] = parsed_error["message"] or info.get("message")
        info["timestamp"] = _time_of(entry, error_file)
        info["peer"] = is_peer_error(info.get("message"), info.get("exitcode"))
        if not any(f["rank"] == info["rank"] and f["local_rank"] == info["local_rank"] for f in failures):
            failures.append(info)
    latest = latest_records(job_dir)
    if rc != 0:
        failures += recorded_failures(latest, failures)
    rendezvous = parsed["rendezvous"] or {}
    local_ranks = rendezvous.get("local_ranks") or sorted(dirs) or list(range(job.get("nproc_per_node", 0)))
    ranks = rank_results(local_ranks, rendezvous.get("global_ranks") or [], failures, rc, wrapper_exits(job_dir, latest))
    for entry in ranks:
        directory = dirs.get(entry["local_rank"])
        entry["stdout"] = os.path.join(directory, "stdout.log") if directory else None
        entry["stderr"] = os.path.join(directory, "stderr.log") if directory else None
    out = {
        "rc": rc,
        "duration": round(result_data["end"] - result_data["start"], 3) if result_data else None,
        "world_size": rendezvous.get("world_size"),
        "group_rank": rendezvous.get("group_rank"),
        "ranks": ranks,
        "failures": failures,
        "timed_out": bool(result_data and result_data.get("timed_out")),
        "stopped": bool(result_data and result_data.get("stopped")),
        "leftovers_killed": (result_data or {}).get("leftovers_killed", []),
    }
    if rc != 0:
        root = pick_root_cause(failures)
        out["root_cause"] = root
        out["root_cause_line"] = summarize_failure(host, root)
        log_text = ""
        if root and root.get("local_rank") in dirs:
            directory = dirs[root["local_rank"]]
            log_text = read_text(os.path.join(directory, "stderr.log")).strip() or \
                read_text(os.path.join(directory, "stdout.log"))
        if not root:
            recorded = read_json(os.path.join(job_dir, "torchrun_error.json"))
            if recorded:
                out["root_cause_line"] += ": " + str(parse_error_file(recorded)["message"])
        out["log_tail"] = tail(log_text or agent_log, tail_lines)
    return out


# Archives up to this size travel inline (base64) in the wait's last result: no extra round trip.
INLINE_MAX = 16 * 1024 * 1024
# A file of the job directory larger than this (a rank's log of a days-long job, or what a script
# wrote into its working directory) comes home cut to its last FILE_CAP bytes - where a log's end,
# the failure, is - after a line saying how much was left out and where the whole file is. The
# archive is built in the node's memory: one file must not make it the size of a checkpoint.
FILE_CAP = 50 * 1024 * 1024


def pack_job_dir(job_dir, path, inline_max=INLINE_MAX, spool=None, file_cap=FILE_CAP):
    """tar.gz of ``job_dir`` (its name as the top directory, like ``tar -C <log dir> <job id>``).

    Up to ``inline_max`` bytes -> ``{"inline": base64 text, "path": None, "size"}`` and no file is
    left; larger -> written under a new directory of its own, named ``path``'s file name
    (``{"inline": None, "path": <that file>, "remove": <its directory>, "size"}``), for the
    controller to fetch, then remove the directory.

    That directory is made in ``spool`` (default: /var/tmp, on disk; the system's temporary
    directory where there is none), mode 0700: not in the log directory beside ``path``, which the
    job's account owns. There the account could swap the finished archive for a link between this
    call and the controller's fetch (a separate call that reads the file by its name), and the
    fetch would read the link's target as root; in a sticky directory it cannot rename or replace
    a directory of root's.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
        _add_tree(archive, job_dir, os.path.basename(job_dir.rstrip("/")), file_cap)
    data = buffer.getvalue()
    if len(data) <= inline_max:
        return {"inline": base64.b64encode(data).decode("ascii"), "path": None, "size": len(data)}
    if spool is None:
        spool = "/var/tmp" if os.path.isdir("/var/tmp") else None
    private = tempfile.mkdtemp(prefix="multinode-training-logs-", dir=spool)
    target = os.path.join(private, os.path.basename(path))
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError:
        shutil.rmtree(private, ignore_errors=True)
        raise
    return {"inline": None, "path": target, "remove": private, "size": len(data)}


def _entry(name, st):
    """A tar member for ``name`` from the descriptor's fstat (a directory or a regular file)."""
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.mtime = int(st.st_mtime)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    else:
        info.size = st.st_size
    return info


class _CutFile:
    """A file's last ``keep`` bytes after a note: what tarfile reads for a file over the cap (its reads
    must return all the bytes asked for, up to the end)."""

    def __init__(self, note, handle, keep):
        self._parts = [io.BytesIO(note), handle]
        handle.seek(-keep, os.SEEK_END)

    def read(self, size=-1):
        out = b""
        while self._parts and (size < 0 or len(out) < size):
            chunk = self._parts[0].read(-1 if size < 0 else size - len(out))
            if not chunk:
                self._parts.pop(0)
            out += chunk
        return out


def _cut_note(job_dir, name, size, file_cap):
    return ("multinode.training: the first %d of this file's %d bytes were not collected (over %.3g MiB); the "
            "whole file is on %s at %s\n" % (size - file_cap, size, file_cap / 1048576.0, socket.gethostname(),
                                             os.path.join(job_dir, name))).encode()


def _add_tree(archive, job_dir, top, file_cap=FILE_CAP):
    """Add ``job_dir`` to ``archive`` as ``top``: its directories and regular files, each opened
    through its parent's descriptor and never through a link.

    Root packs a directory that the job's account writes: a name looked at, then opened by its path,
    could have become a link to a file of root's in between (tarfile's ``add`` does just that), and
    that file would travel to the controller. Links and other special files are left out: the
    controller's unpack keeps only files and directories. A file over ``file_cap`` bytes is cut to its
    end (FILE_CAP)."""
    top_fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        archive.addfile(_entry(top, os.fstat(top_fd)))
        # fwalk opens each subdirectory by descriptor and descends only where it is the directory
        # it looked at (follow_symlinks=False: a link to one is not entered).
        for path, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top_fd, follow_symlinks=False):
            dirnames.sort()
            prefix = top if path == "." else "%s/%s" % (top, os.path.normpath(path))
            if path != ".":
                archive.addfile(_entry(prefix, os.fstat(dir_fd)))
            for name in sorted(filenames):
                fd, st = open_regular(name, dir_fd)
                if fd is None:  # a link, a special file, gone
                    continue
                info = _entry("%s/%s" % (prefix, name), st)
                with os.fdopen(fd, "rb") as handle:
                    if st.st_size > file_cap:
                        note = _cut_note(job_dir, os.path.normpath(os.path.join(path, name)), st.st_size, file_cap)
                        info.size = len(note) + file_cap
                        archive.addfile(info, _CutFile(note, handle, file_cap))
                    else:
                        archive.addfile(info, handle)
    finally:
        os.close(top_fd)


def _stripped(member):
    """The member's name without its top directory ('' for the top itself); None when unsafe."""
    parts = [p for p in member.name.split("/") if p not in ("", ".")]
    if not parts or member.name.startswith("/") or ".." in parts:
        return None
    return "/".join(parts[1:])


def unpack_job_archive(data, dest):
    """Unpack a job archive (bytes) into ``dest`` without its top directory (``--strip-components=1``),
    owned by the controller's user (``--no-same-owner``): ``dest`` is made 0700 (the logs are the
    job's); only files and directories, none that would leave it (absolute, ``..``).
    Returns the number of files written."""
    if not os.path.isdir(dest):
        os.makedirs(dest)
    os.chmod(dest, 0o700)
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            name = _stripped(member)
            if not name or not (member.isfile() or member.isdir()):
                continue
            target = os.path.join(dest, name)
            if member.isdir():
                if not os.path.isdir(target):
                    os.makedirs(target)
                os.chmod(target, (member.mode & 0o755) | 0o700)
                continue
            parent = os.path.dirname(target)
            if not os.path.isdir(parent):
                os.makedirs(parent)
            if os.path.lexists(target):
                os.remove(target)
            source = archive.extractfile(member)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                while True:
                    chunk = source.read(1 << 20)
                    if not chunk:
                        break
                    handle.write(chunk)
            os.chmod(target, (member.mode & 0o755) | 0o600)
            os.utime(target, (member.mtime, member.mtime))
            count += 1
    return count
