# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job's firewall guard (O(firewall_allow), role variable train_firewall): the ports it guards, its nftables
table made at the start, kept alive by a root keeper process while the job runs, and deleted at the end. The nft
calls are job.py's (the module runs them); here: what they are given and what their answers mean."""
from __future__ import annotations

import os
import sys

from ansible_collections.multinode.training.plugins.module_utils._torchrun.errors import JobError
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import spawn, supervisor_source
from ansible_collections.multinode.training.plugins.module_utils._train.security import (
    SecurityError,
    job_tables,
    parse_tables,
    render_delete,
    render_refresh,
    render_table,
)


def rdzv_port(endpoint):
    """The port of a rendezvous endpoint (``host:port``, ``[v6]:port``) -> int, or None."""
    try:
        return int(str(endpoint or "").rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def guarded_ports(argv, watch):
    """The ports the job's firewall guard lets only the job's nodes reach: the rendezvous port and,
    on the node whose watcher is the hub, the watchers' port (the other nodes report there)."""
    ports = []
    port = rdzv_port(argv[argv.index("--rdzv_endpoint") + 1]) if "--rdzv_endpoint" in argv else None
    if port:
        ports.append(port)
    if watch and watch.get("hub") and watch.get("port"):
        ports.append(int(watch["port"]))
    return sorted(set(ports))


# Seconds the job's nftables guard lives unless the keeper renews it (every third of it): a killed
# keeper leaves the rendezvous port closed to others for at most a minute, and a busy node has two
# chances to renew before it expires (docs/design.md, "Fixed timings"). The torchrun module's default.
TTL = 60


def keeper_argv(python, nft, pid, result_file, ttl, refresh, delete):
    """The firewall keeper's command line. It runs as root: its code comes from the module
    (``-c``), never from the job directory, which the job's user may write; isolated (``-I``): no
    current directory or PYTHON* variable decides what it imports."""
    return [python, "-I", "-c", supervisor_source(), "keep", nft, str(pid), result_file, str(ttl), refresh,
            delete]


def usable_nft(nft, host, euid):
    """With O(firewall_allow): the nft binary found (``nft``, None: not found), which needs root -> its path."""
    if not nft or euid != 0:
        raise JobError("firewall_allow (train_firewall) on %s: needs nft (package nftables) and root; "
                       "found nft=%s, uid %d" % (host, nft, euid))
    return nft


def guard_rules(table, argv, params, host):
    """The job's nftables table: only O(firewall_allow) reach the guarded ports -> (its ``nft -f`` rules, those
    ports)."""
    ports = guarded_ports(argv, params["watch"])
    try:
        return render_table(table, ports, params["firewall_allow"], params["firewall_ttl"]), ports
    except (SecurityError, TypeError) as exc:
        raise JobError("firewall_allow on %s: %s (rdzv_endpoint %s)" % (host, exc, params["rdzv_endpoint"]))


def check_applied(rc, err, host):
    """``nft -f`` of the job's table ended with ``rc`` and ``err``: JobError unless it took the rules."""
    if rc != 0:
        raise JobError("train_firewall on %s: nft refused the rule: %s" % (host, err.strip()))


def start_keeper(nft, pid, job_dir, table, ports, ttl):
    """The root keeper that refreshes the table while the supervisor ``pid`` runs and deletes it after."""
    with open(os.devnull, "wb") as null:
        spawn(keeper_argv(sys.executable, nft, pid, os.path.join(job_dir, "result.json"), ttl,
                          render_refresh(table, ports, ttl), render_delete(table)),
              {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}, null.fileno(), None)


def job_table(rc, out, job_id):
    """``nft -j list tables`` (``rc``, ``out``) -> the job's table there, or None."""
    try:
        tables = job_tables(parse_tables(out), job_id) if rc == 0 else []
    except ValueError:
        tables = []
    return tables[0] if tables else None


def not_deleted(job_id, table, host, err):
    """The message of an ``nft -f`` that did not delete the job's table."""
    return "job %s: cannot delete nftables table %s on %s: %s" % (job_id, table, host, err.strip())
