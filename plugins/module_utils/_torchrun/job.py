# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The torchrun module: start, wait for, follow, stop one job on this node. The one file that holds the module.

plugins/modules/torchrun.py is its documentation plus ``run_module(AnsibleModule(ARGUMENT_SPEC))``; the action
plugin (plugins/action/torchrun.py) calls that module. Every call of the module (its options, check mode,
no_log values, run_command, get_bin_path, warn, exit_json and fail_json) is here, and this file reads top to
bottom as what the module does: ``run_module`` picks what O(state) asks for; ``start`` is the start sequence
(check, plan, account, firewall, job directory, spawn: ``launch``), then the wait (``follow``, ``wait``,
``finish``) or the stop (``stop``). The decisions are plain functions of the files beside this one, which never
see the module and raise JobError (_torchrun.errors) with the message the module fails with:

- start.py: what a start refuses, the job's environment and argv, the account, job.json's record, the spawns;
  jobdir.py: the job directory; firewall.py: the job's firewall guard; proc.py: the job's processes;
- wait.py: wait for the end (or one long poll of it), what a finished job means (``verdict``), the stop's record;
- collect.py: what the job left in its directory; follow.py: the watcher's files, status and progress.

They are tested on their own and on recorded job directories (tests/fixtures/torchrun/jobs/); the node side
(supervisor, keeper, /proc scan) is _node/supervisor.py, shipped into the job directory as ``supervisor.py``.
"""
from __future__ import annotations

import os
import socket
import time

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    LOG_DIR,
    STOP_GRACE,
    VENV,
    TorchrunError,
    secret_values,
    validate_job_id,
)
from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import (
    FAIL_GRACE,
    HANG_TIMEOUT,
    HEARTBEAT,
    LOST_AFTER,
    NO_PROGRESS_RESTARTS,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.bounded import POLL_SLACK
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import INLINE_MAX, TAIL_LINES, read_json
from ansible_collections.multinode.training.plugins.module_utils._torchrun.errors import JobError
from ansible_collections.multinode.training.plugins.module_utils._torchrun.firewall import (
    TTL as FIREWALL_TTL,
    check_applied,
    guard_rules,
    job_table,
    not_deleted,
    rdzv_port,
    start_keeper,
    usable_nft,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import POLL, status, stop_watcher, stream_ranks
from ansible_collections.multinode.training.plugins.module_utils._torchrun.jobdir import new_job_dir, write_json
from ansible_collections.multinode.training.plugins.module_utils._torchrun.live import PROGRESS_SPEC
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import describe, find_job_processes, job_alive, stop_job
from ansible_collections.multinode.training.plugins.module_utils._torchrun.start import (
    check_start,
    check_state,
    gpu_count,
    job_env,
    job_record,
    plan_argv,
    resolve_account,
    spawn_supervisor,
    spawn_watcher,
    started_again,
    stop_stale_listener,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.wait import (
    barrier_grace,
    ended_here,
    long_poll,
    pack,
    record_stop,
    survived,
    verdict,
    wait,
)
from ansible_collections.multinode.training.plugins.module_utils._train.security import render_delete, table_name

ARGUMENT_SPEC = dict(
    state=dict(type="str", default="finished", choices=["started", "finished", "stopped", "status"]),
    script=dict(type="path"),
    module=dict(type="str"),
    args=dict(type="raw", default=[]),
    local_rank_arg=dict(type="bool", default=False),
    nnodes=dict(type="str", default="1"),
    nproc_per_node=dict(type="str", default="auto"),
    cpu_nproc=dict(type="int"),
    node_rank=dict(type="int"),
    rdzv_backend=dict(type="str", default="c10d"),
    rdzv_endpoint=dict(type="str"),
    rdzv_id=dict(type="str"),
    job_id=dict(type="str"),
    rdzv_conf=dict(type="dict", default={}),
    max_restarts=dict(type="int", default=0),
    max_no_progress_restarts=dict(type="int", default=NO_PROGRESS_RESTARTS),
    hang_timeout=dict(type="int", default=HANG_TIMEOUT),
    local_addr=dict(type="str"),
    env=dict(type="dict", default={}),
    env_files=dict(type="list", elements="path", default=[]),
    venv=dict(type="path", default=VENV),
    python=dict(type="path"),
    chdir=dict(type="path"),
    log_dir=dict(type="path", default=LOG_DIR),
    tee=dict(type="bool", default=False),
    timeout=dict(type="int", default=0),
    stop_grace=dict(type="int", default=STOP_GRACE),
    tail_lines=dict(type="int", default=TAIL_LINES),
    exit_barrier_grace=dict(type="int"),
    user=dict(type="str"),
    group=dict(type="str"),
    firewall_allow=dict(type="list", elements="str", default=[]),
    firewall_ttl=dict(type="int", default=FIREWALL_TTL),
    # follow/poll are the action plugin's (plugins/action/torchrun.py); watch: _torchrun.follow.
    follow=dict(type="bool", default=False),
    poll=dict(type="int", default=POLL),
    poll_slack=dict(type="int", default=POLL_SLACK),
    **PROGRESS_SPEC,
    # Set by the action for each long poll of a followed wait, and where the job directory's archive
    # goes when it is too big to travel in the result.
    follow_limit=dict(type="float", default=0),
    # The output of these ranks travels with each long poll (the action's stream_ranks); where the last
    # poll left off in each rank log, and where a log the controller has not seen starts (an attach).
    stream_ranks=dict(type="list", elements="str", default=[]),
    stream_offsets=dict(type="dict", default={}),
    stream_tail=dict(type="int", default=0),
    archive=dict(type="path"),
    archive_inline_max=dict(type="int", default=INLINE_MAX),
    watch=dict(type="dict", options=dict(
        hub=dict(type="bool", default=False),
        hub_addr=dict(type="str"),
        hub_node=dict(type="str"),
        port=dict(type="int"),
        node=dict(type="str"),
        nodes=dict(type="list", elements="str", default=[]),
        token=dict(type="str", no_log=True),
        lost=dict(type="int", default=LOST_AFTER),
        lease=dict(type="int", default=0),
        start_grace=dict(type="int"),
        fail_grace=dict(type="int", default=FAIL_GRACE),
        interval=dict(type="float", default=HEARTBEAT),
    )),
)
MUTUALLY_EXCLUSIVE = [("script", "module")]


def run_module(module):
    p = module.params
    host = socket.gethostname()
    for value in secret_values(p["env"]):
        module.no_log_values.add(value)
    try:
        job_id = validate_job_id(p["job_id"] or p["rdzv_id"], "job_id" if p["job_id"] else "rdzv_id")
        stream_ranks(p["stream_ranks"])
    except (TorchrunError, ValueError) as exc:
        module.fail_json(msg="%s (on %s)" % (exc, host))
    job_dir = os.path.join(p["log_dir"], job_id)
    result = dict(changed=False, job_id=job_id, job_dir=job_dir)
    try:
        run_state(module, job_id, job_dir, result, host)
    except JobError as exc:
        module.fail_json(msg=str(exc), **result)


def run_state(module, job_id, job_dir, result, host):
    """What O(state) asks for, on the job this node has (job.json) or none: stop it, report its status, start it,
    wait for it (a long poll of it with O(follow_limit)). A refusal raises JobError (``run_module`` fails)."""
    p = module.params
    job_file = os.path.join(job_dir, "job.json")
    job = read_json(job_file)
    if p["state"] == "stopped":
        stop(module, job_id, job_dir, job, result, host)
    check_state(p["state"], job, bool(p["script"] or p["module"]), p["follow_limit"], job_id, job_file, host)
    if p["state"] == "status":
        result.update(status(job_id, job_dir, job, renew=not module.check_mode))
        module.exit_json(**result)

    wait_only = p["state"] == "finished" and job is not None
    if job is None:
        job = start(module, job_id, job_dir, job_file, host)
        result["changed"] = True
    elif p["state"] == "started":
        result.update(cmd=job.get("cmd"), pid=job.get("pid"), pgid=job.get("pgid"),
                      nproc_per_node=job.get("nproc_per_node"))
        module.exit_json(msg=started_again(job_id, job_dir, host, job_alive(job.get("pid"), job_id, job_dir)),
                         **result)
    result.update(cmd=job.get("cmd"), pid=job.get("pid"), pgid=job.get("pgid"),
                  nproc_per_node=job.get("nproc_per_node"), user=job.get("user"),
                  firewall_table=job.get("firewall_table"))
    if "gpu_count" in job:
        result["gpu_count"] = job["gpu_count"]
    if module.check_mode or p["state"] == "started":
        module.exit_json(**result)
    if wait_only:
        result["changed"] = False
    if wait_only and p["follow_limit"]:
        follow(module, job_id, job_dir, job, result, host)
    finish(module, job_id, job_dir, job, result, host, *wait(p, job_id, job_dir, job))


# ------------------------------------------------------------------ the start


def start(module, job_id, job_dir, job_file, host):
    """Start the job here -> its job.json record (only planned, nothing started, in check mode)."""
    p = module.params
    python, chdir = check_start(p, host)
    env, secrets = job_env(p, job_id, job_dir, host)
    gpus = count_gpus(module) if p["nproc_per_node"] == "auto" else None
    argv, nproc = plan_argv(p, python, job_id, job_dir, env, gpus, host)
    for value in secrets:
        module.no_log_values.add(value)
    account = resolve_account(p["user"], p["group"], host)
    if account:
        env.update(HOME=account["home"], USER=account["name"], LOGNAME=account["name"])
    job = job_record(p, job_id, host, argv, secrets, nproc, gpus, account)
    nft = usable_nft(module.get_bin_path("nft"), host, os.geteuid()) if p["firewall_allow"] else None
    if nft:
        job["firewall_table"] = table_name(job_id)
    if module.check_mode:
        return job
    ports = open_firewall(module, nft, job["firewall_table"], argv, host) if nft else None
    launch(module, job, job_dir, job_file, (python, chdir, argv, env), account)
    if nft:
        start_keeper(nft, job["pid"], job_dir, job["firewall_table"], ports, p["firewall_ttl"])
    return job


def count_gpus(module):
    """The node's GPUs: ``nvidia-smi -L`` where it is found, else the driver's (start.py's gpu_count)."""
    smi = module.get_bin_path("nvidia-smi")
    smi_rc, smi_out = module.run_command([smi, "-L"])[:2] if smi else (None, "")
    return gpu_count(smi_rc, smi_out)


def open_firewall(module, nft, table, argv, host):
    """The job's nftables table: only O(firewall_allow) reach the guarded ports -> those ports."""
    rules, ports = guard_rules(table, argv, module.params, host)
    rc, _out, err = module.run_command([nft, "-f", "-"], data=rules, binary_data=True)
    check_applied(rc, err, host)
    return ports


def launch(module, job, job_dir, job_file, command, account):
    """The job directory made and filled, the supervisor (``command``: python, chdir, torchrun's argv, the
    environment) and the watcher started, detached; job.json written with their pids (``job`` updated).
    Where one of them fails, the firewall guard goes too."""
    p = module.params
    owner = (account["uid"], account["gid"]) if account else None
    try:
        dir_fd, log_fd, watch_fd = new_job_dir(job_dir, p, job["job_id"], job["host"], owner)
        # Preflight's listener (first node) must not hold the rendezvous port any more.
        stop_stale_listener(rdzv_port(p["rdzv_endpoint"]))
        pid = spawn_supervisor(job, job_dir, command, (log_fd, watch_fd), account, p["timeout"], p["stop_grace"])
        job.update(pid=pid, pgid=pid, start=time.time())
        write_json(job_file, job, 0o640, owner, dir_fd)
        spawn_watcher(job, job_dir, command, watch_fd, account)
    except JobError:
        remove_firewall(module, job["job_id"], job["host"])
        raise
    # Still the account's (the watcher, running as the account, reads the supervisor's pid here).
    write_json(job_file, job, 0o640, owner, dir_fd)
    os.close(dir_fd)


def remove_firewall(module, job_id, host):
    """Delete the job's nftables table when it exists; its name, or None."""
    nft = module.get_bin_path("nft")
    if not nft or os.geteuid() != 0:
        return None
    rc, out, _err = module.run_command([nft, "-j", "list", "tables"])
    table = job_table(rc, out, job_id)
    if not table or module.check_mode:
        return table
    rc, _out, err = module.run_command([nft, "-f", "-"], data=render_delete(table), binary_data=True)
    if rc != 0:
        module.fail_json(msg=not_deleted(job_id, table, host, err))
    return table


# ------------------------------------------------------------------ the wait and the stop


def follow(module, job_id, job_dir, job, result, host):
    """A followed wait's long poll (wait.py's long_poll): the progress while the job still runs, else ``finish``."""
    ended = long_poll(module.params, job_id, job_dir, job, result)
    if ended is None:
        module.exit_json(**result)
    finish(module, job_id, job_dir, job, result, host, *ended)


def finish(module, job_id, job_dir, job, result, host, gave_up, abandoned, timeout, grace):
    """The job ended on this node: its result, what the watchers decided, leftovers stopped, the firewall guard
    removed, the job directory packed for the controller (O(archive)), the verdict."""
    p = module.params
    data, survivors = ended_here(job_id, job_dir, job, result, p["tail_lines"], host, grace)
    result["firewall_table"] = remove_firewall(module, job_id, host) or result.get("firewall_table")
    if p["archive"]:
        # The job's logs travel with this result (or, when big, wait in O(archive) for a fetch).
        result["archive"] = pack(job_dir, p["archive"], p["archive_inline_max"])
    if survivors:
        raise JobError(survived(job_id, host, result["survivors"]))
    failed, msg, warning = verdict(dict(job, job_id=job_id), host, job_dir, result, data, gave_up, abandoned,
                                   timeout, barrier_grace(p["exit_barrier_grace"], job_dir))
    if warning:
        module.warn(warning)
    if failed:
        raise JobError(msg)
    module.exit_json(**result)


def stop(module, job_id, job_dir, job, result, host):
    """O(state=stopped): the job's processes stopped (SIGTERM, SIGKILL after O(stop_grace)), its watcher and
    firewall guard too, result.json recorded where the supervisor wrote none."""
    p = module.params
    pgid = job.get("pgid") if job else None
    pids = find_job_processes(job_id, job_dir=job_dir)
    result["cmd"] = job.get("cmd") if job else None
    if module.check_mode:
        result.update(changed=bool(pids), killed=pids, survivors=[], firewall_table=None)
        module.exit_json(**result)
    killed, survivors = stop_job(job_id, pgid=pgid if pids else None, grace=p["stop_grace"], job_dir=job_dir)
    stop_watcher(job)
    result["firewall_table"] = remove_firewall(module, job_id, host)
    record_stop(job, job_dir, killed)
    result.update(changed=bool(killed) or bool(result["firewall_table"]), killed=killed,
                  survivors=describe(survivors), stopped=bool(killed))
    if survivors:
        raise JobError(survived(job_id, host, describe(survivors)))
    module.exit_json(**result)
