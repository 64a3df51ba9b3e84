# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What torchrun wrote on one node -> its rendezvous, its failures, whether its workers succeeded.

``parse_agent_log`` reads the agent's log (``torchrun.log``, LOGLEVEL=INFO), ``parse_error_file`` a rank's
``error.json``; tested on recorded torchrun output (tests/fixtures/torchrun/). The root cause across ranks
and nodes is _node.torchrun's (``pick_root_cause``); _torchrun.collect reads the files.
"""
from __future__ import annotations

import json
import re

_LOG_PREFIX_RE = re.compile(r"^[IWEDC]\d{4} [\d:.]+ +\d+ [^\]]+\] ?")
_FIELD_RE = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
# torchrun's lines when this node's workers succeeded (it may still wait in its exit barrier).
LOCAL_SUCCEEDED = ("Local worker group finished (WorkerState.SUCCEEDED)", "worker group successfully finished")


def _strip_prefix(line):
    return _LOG_PREFIX_RE.sub("", line)


def _int_list(text):
    return [int(x) for x in re.findall(r"-?\d+", text or "")]


def parse_agent_log(text):
    """Read what the torchrun agent printed (LOGLEVEL=INFO): rendezvous result and failure summary.

    Returns ``{"rendezvous": {...} or None, "failures": [...], "root_cause": {...} or None}``.
    Each failure: rank, local_rank, exitcode, signal, pid, host, time, error_file, message (the
    last line of its traceback).
    """
    lines = (text or "").splitlines()
    root_cause, failures = _failure_sections(lines)
    result = [_normalize_failure(entry) for entry in ([root_cause] if root_cause else []) + failures]
    root = result[0] if root_cause else None
    return {"rendezvous": _rendezvous(lines), "failures": result[1:] if root else result, "root_cause": root}


def _rendezvous(lines):
    """The agent's last ``Rendezvous complete for workers`` block -> its fields, or None."""
    rendezvous = None
    for index, line in enumerate(lines):
        if "Rendezvous complete for workers" in line:
            rendezvous = {}
            for follow in lines[index + 1:index + 16]:
                body = _strip_prefix(follow).strip()
                key, sep, value = body.partition("=")
                if not sep:
                    if rendezvous:
                        break
                    continue
                rendezvous[key.strip()] = value.strip()
    if rendezvous is None:
        return None
    return {
        "restart_count": int(rendezvous.get("restart_count", 0) or 0),
        "master_addr": rendezvous.get("master_addr"),
        "group_rank": int(rendezvous["group_rank"]) if "group_rank" in rendezvous else None,
        "group_world_size": int(rendezvous["group_world_size"]) if "group_world_size" in rendezvous else None,
        "local_ranks": _int_list(rendezvous.get("local_ranks")),
        "global_ranks": _int_list(rendezvous.get("global_ranks")),
        "world_size": (_int_list(rendezvous.get("global_world_sizes")) or [None])[0],
    }


def _failure_sections(lines):
    """The agent's failure summary (``Failures:`` and ``Root Cause`` sections) -> (root cause entry or
    None, failure entries): raw ``key: value`` fields and the traceback's lines."""
    failures, root_cause = [], None
    section, current = None, None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("Failures:") or stripped.startswith("Root Cause"):
            section = "failure" if stripped.startswith("Failures:") else "root"
            continue
        if section is None:
            continue
        if re.match(r"^\[\d+\]:$", stripped):
            current = {"traceback": []}
            if section == "root":
                root_cause = current
            else:
                failures.append(current)
            continue
        if stripped.startswith("=====") or stripped.startswith("-----"):
            current = None
            continue
        if current is None:
            continue
        match = _FIELD_RE.match(line)
        if match and not current.get("_in_traceback"):
            key, value = match.group(1), match.group(2).strip()
            if key == "traceback":
                current["_in_traceback"] = True
                current["traceback"].append(value)
            else:
                current[key] = value
        elif current.get("_in_traceback"):
            current["traceback"].append(line.strip())
    return root_cause, failures


def _normalize_failure(entry):
    rank = re.match(r"^(-?\d+)(?: \(local_rank: (\d+)\))?", entry.get("rank", ""))
    code = re.match(r"^(-?\d+)(?: \(pid: (\d+)\))?(?:\s+\((\w+)\))?", entry.get("exitcode", ""))
    lines = [x for x in entry.get("traceback", []) if x]
    message = lines[-1] if lines else None
    if message and message.startswith("To enable traceback"):
        message = None
    error_file = entry.get("error_file")
    return {
        "rank": int(rank.group(1)) if rank else None,
        "local_rank": int(rank.group(2)) if rank and rank.group(2) is not None else None,
        "exitcode": int(code.group(1)) if code else None,
        "pid": int(code.group(2)) if code and code.group(2) else None,
        "signal": code.group(3) if code and code.group(3) else None,
        "host": entry.get("host"),
        "time": entry.get("time"),
        "error_file": None if not error_file or error_file.startswith("<") else error_file,
        "message": message,
    }


def parse_error_file(data):
    """A rank's ``error.json`` (written by torch's @record / ErrorHandler) -> message, traceback, timestamp."""
    if isinstance(data, (str, bytes)):
        data = json.loads(data)
    message = data.get("message")
    traceback, timestamp = None, data.get("timestamp")
    if isinstance(message, dict):
        extra = message.get("extraInfo") or {}
        traceback = extra.get("py_callstack")
        timestamp = extra.get("timestamp", timestamp)
        message = message.get("message")
    try:
        timestamp = int(timestamp) if timestamp is not None else None
    except (TypeError, ValueError):
        timestamp = None
    return {"message": message, "traceback": traceback, "timestamp": timestamp}


def local_workers_succeeded(agent_log):
    """The agent's local worker group finished successfully (it may still wait in its exit barrier)."""
    return any(line in (agent_log or "") for line in LOCAL_SUCCEEDED)
