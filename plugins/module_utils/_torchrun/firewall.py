# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job's firewall guard (O(firewall_allow), role variable train_firewall): the ports it guards, its nftables
table made at the start, kept alive by a root keeper process while the job runs, and deleted at the end."""
from __future__ import annotations

import os
import socket
import sys

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


def firewall_tool(module, host, result):
    """With O(firewall_allow): the nft binary (it needs root) -> its path; None without O(firewall_allow)."""
    if not module.params["firewall_allow"]:
        return None
    nft = module.get_bin_path("nft")
    if not nft or os.geteuid() != 0:
        module.fail_json(msg="firewall_allow (train_firewall) on %s: needs nft (package nftables) and root; "
                             "found nft=%s, uid %d" % (host, nft, os.geteuid()), **result)
    return nft


def open_firewall(module, nft, table, argv, host, result):
    """The job's nftables table: only O(firewall_allow) reach the guarded ports -> those ports."""
    p = module.params
    ports = guarded_ports(argv, p["watch"])
    try:
        rules = render_table(table, ports, p["firewall_allow"], p["firewall_ttl"])
    except (SecurityError, TypeError) as exc:
        module.fail_json(msg="firewall_allow on %s: %s (rdzv_endpoint %s)" % (host, exc, p["rdzv_endpoint"]),
                         **result)
    rc, _out, err = module.run_command([nft, "-f", "-"], data=rules, binary_data=True)
    if rc != 0:
        module.fail_json(msg="train_firewall on %s: nft refused the rule: %s" % (host, err.strip()), **result)
    return ports


def start_keeper(nft, pid, job_dir, table, ports, ttl):
    """The root keeper that refreshes the table while the supervisor ``pid`` runs and deletes it after."""
    with open(os.devnull, "wb") as null:
        spawn(keeper_argv(sys.executable, nft, pid, os.path.join(job_dir, "result.json"), ttl,
                          render_refresh(table, ports, ttl), render_delete(table)),
              {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}, null.fileno(), None)


def remove_firewall(module, job_id):
    """Delete the job's nftables table when it exists; its name, or None."""
    nft = module.get_bin_path("nft")
    if not nft or os.geteuid() != 0:
        return None
    rc, out, _err = module.run_command([nft, "-j", "list", "tables"])
    try:
        tables = job_tables(parse_tables(out), job_id) if rc == 0 else []
    except ValueError:
        tables = []
    if not tables or module.check_mode:
        return tables[0] if tables else None
    rc, _out, err = module.run_command([nft, "-f", "-"], data=render_delete(tables[0]), binary_data=True)
    if rc != 0:
        module.fail_json(msg="job %s: cannot delete nftables table %s on %s: %s"
                             % (job_id, tables[0], socket.gethostname(), err.strip()))
    return tables[0]
