# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""train_launcher=env: map what a container platform hands each container to torchrun's options.

Platforms that start one container per node give it the master's address and port, and the node
count in a variable of their own. Pure: it reads a dict (the environment), tests/unit exercise it.

| platform  | endpoint                  | nodes                                   | node rank | rendezvous id  |
|-----------|---------------------------|-----------------------------------------|-----------|----------------|
| sensecore | MASTER_ADDR:MASTER_PORT   | WORLD_SIZE (containers)                 | RANK      | derived        |
| aistation | MASTER_ADDR:MASTER_PORT   | NNODES, or MIN_NNODES:MAX_NNODES        | -         | RDZV_ID or derived |
| generic   | MASTER_ADDR:MASTER_PORT   | NNODES, or MIN_NNODES:MAX_NNODES        | NODE_RANK | RDZV_ID or derived |

NPROC_PER_NODE, when set, gives the processes per container. The derived rendezvous id is a hash of
the endpoint and the node count: the same in every container of one job (they all see the same
values), and new for the next job wherever the platform gives the next job's master a new address
(set RDZV_ID, or train_job_id, where it does not).
"""
from __future__ import annotations

import hashlib
import os
import socket
import time

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    TorchrunError,
    format_endpoint,
    nnodes_arg,
    parse_nnodes,
    validate_job_id,
)

PLATFORMS = ("auto", "sensecore", "aistation", "generic")
ENDPOINT_VARS = ("MASTER_ADDR", "MASTER_PORT")
RELEVANT = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "NNODES", "MIN_NNODES",
            "MAX_NNODES", "NPROC_PER_NODE", "RDZV_ID")


class PlatformError(ValueError):
    """A variable missing or invalid; the message names it and lists what the environment has."""


def detect(environ):
    """auto -> sensecore (WORLD_SIZE, no NNODES), aistation (NNODES or MIN/MAX_NNODES), else None."""
    if environ.get("NNODES") or environ.get("MIN_NNODES") or environ.get("MAX_NNODES"):
        return "aistation"
    if environ.get("WORLD_SIZE"):
        return "sensecore"
    return None


def _present(environ):
    found = [name for name in RELEVANT if environ.get(name) not in (None, "")]
    return ", ".join(found) if found else "none of %s" % ", ".join(RELEVANT)


def _missing(platform, name, environ, needs):
    return PlatformError("train_launcher=env (platform %s): %s is not set; valid: the platform sets %s; "
                         "this container has %s" % (platform, name, needs, _present(environ)))


def _int(environ, name, platform):
    value = environ.get(name)
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise PlatformError("train_launcher=env (platform %s): %s=%r is not a positive integer; this container "
                            "has %s" % (platform, name, value, _present(environ)))
    return number


def _nodes(environ, platform, nnodes_override):
    if nnodes_override:
        try:
            return parse_nnodes(nnodes_override)
        except TorchrunError as exc:
            raise PlatformError("train_nnodes=%s: %s" % (nnodes_override, exc))
    if platform == "sensecore":
        if not environ.get("WORLD_SIZE"):
            raise _missing(platform, "WORLD_SIZE", environ, "MASTER_ADDR, MASTER_PORT, WORLD_SIZE (and RANK)")
        count = _int(environ, "WORLD_SIZE", platform)
        return count, count
    if environ.get("NNODES"):
        count = _int(environ, "NNODES", platform)
        return count, count
    if environ.get("MIN_NNODES") or environ.get("MAX_NNODES"):
        for name in ("MIN_NNODES", "MAX_NNODES"):
            if not environ.get(name):
                raise _missing(platform, name, environ, "MIN_NNODES and MAX_NNODES together (elastic)")
        low, high = _int(environ, "MIN_NNODES", platform), _int(environ, "MAX_NNODES", platform)
        if low > high:
            raise PlatformError("train_launcher=env (platform %s): MIN_NNODES=%d is greater than MAX_NNODES=%d"
                                % (platform, low, high))
        return low, high
    raise _missing(platform, "NNODES", environ, "MASTER_ADDR, MASTER_PORT and NNODES (or MIN_NNODES and MAX_NNODES)")


def map_environment(environ, platform="auto", nnodes=None, rdzv_id=None):
    """The container's environment -> torchrun's nnodes, endpoint, rendezvous id, processes, is_host."""
    if platform not in PLATFORMS:
        raise PlatformError("platform=%r: valid: %s" % (platform, ", ".join(PLATFORMS)))
    used = platform
    if platform == "auto":
        used = detect(environ)
        if used is None:
            if not environ.get("MASTER_ADDR") and not environ.get("MASTER_PORT"):
                raise _missing("auto", "MASTER_ADDR", environ,
                               "MASTER_ADDR, MASTER_PORT and WORLD_SIZE (SenseCore) or NNODES (AIStation)")
            used = "generic"
    for name in ENDPOINT_VARS:
        if not environ.get(name):
            raise _missing(used, name, environ, "MASTER_ADDR and MASTER_PORT")
    try:
        endpoint = format_endpoint(environ["MASTER_ADDR"], environ["MASTER_PORT"])
    except TorchrunError as exc:
        raise PlatformError("train_launcher=env (platform %s): MASTER_ADDR/MASTER_PORT: %s" % (used, exc))
    low, high = _nodes(environ, used, nnodes)
    nnodes_text = nnodes_arg(low, high)
    explicit = rdzv_id or environ.get("RDZV_ID")
    if explicit:
        try:
            job = validate_job_id(explicit, "RDZV_ID" if not rdzv_id else "train_job_id")
        except TorchrunError as exc:
            raise PlatformError(str(exc))
    else:
        digest = hashlib.sha256(("%s|%s|%s" % (used, endpoint, nnodes_text)).encode()).hexdigest()[:12]
        job = "env-%s" % digest
    rank_var = {"sensecore": "RANK", "generic": "NODE_RANK"}.get(used)
    node_rank = environ.get(rank_var) if rank_var else None
    is_host = None
    if node_rank not in (None, ""):
        try:
            is_host = int(node_rank) == 0
        except ValueError:
            raise PlatformError("train_launcher=env (platform %s): %s=%r is not an integer" % (used, rank_var, node_rank))
    nproc = environ.get("NPROC_PER_NODE") or None
    if nproc is not None:
        _int(environ, "NPROC_PER_NODE", used)
    return {
        "platform": used,
        "nnodes": nnodes_text,
        "rdzv_endpoint": endpoint,
        "rdzv_id": job,
        "nproc_per_node": nproc,
        "is_host": is_host,
        "variables": dict((name, environ[name]) for name in RELEVANT if environ.get(name) not in (None, "")),
    }


# --------------------------------------------------------------------------- the platform_env module

ARGUMENT_SPEC = dict(
    platform=dict(type="str", default="auto", choices=["auto", "sensecore", "aistation", "generic"]),
    nnodes=dict(type="str", default=""),
    rdzv_id=dict(type="str", default=""),
)


def owns_address(host):
    """Whether MASTER_ADDR is an address of this container: binding to it only works where it is local."""
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _type, _proto, _name, sockaddr in infos:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
        finally:
            sock.close()
    return False


def run_module(module):
    p = module.params
    environ = dict(os.environ)
    try:
        mapped = map_environment(environ, p["platform"], p["nnodes"] or None, p["rdzv_id"] or None)
    except PlatformError as exc:
        module.fail_json(msg=str(exc), variables=dict(
            (name, environ[name]) for name in RELEVANT if environ.get(name)))
    if mapped["is_host"] is None:
        # No node rank from the platform: the container that owns MASTER_ADDR hosts the store.
        mapped["is_host"] = owns_address(environ["MASTER_ADDR"])
    # The log directory of this container's share of the job: a job id is never reused on a node.
    mapped["job_id"] = "%s-%s" % (mapped["rdzv_id"], time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    module.exit_json(changed=False, **mapped)
