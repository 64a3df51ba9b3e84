# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The torchrun module's logic: start, wait for, follow, stop one job on this node.

plugins/modules/torchrun.py is its documentation plus ``run_module(AnsibleModule(ARGUMENT_SPEC))``; the action
plugin (plugins/action/torchrun.py) calls that module. ``run_module`` picks what O(state) asks for; the work is
in the files beside this one, each a concern:

- start.py: check, plan and start the job (supervisor, watcher); jobdir.py: the job directory it makes;
  firewall.py: the job's firewall guard; proc.py: the job's processes (spawn, find, stop);
- wait.py: wait for the end (or one long poll of it), what a finished job means (``verdict``), stop;
- collect.py: what the job left in its directory; follow.py: the watcher's files, status and progress.

The decisions are plain functions tested on recorded job directories (tests/fixtures/torchrun/jobs/); the
node side (supervisor, keeper, /proc scan) is _node/supervisor.py, shipped into the job directory as
``supervisor.py``.
"""
from __future__ import annotations

import os
import socket

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    LOG_DIR,
    STOP_GRACE,
    VENV,
    TorchrunError,
    secret_values,
    validate_job_id,
)
from ansible_collections.multinode.training.plugins.module_utils._node.watch import (
    FAIL_GRACE,
    HANG_TIMEOUT,
    HEARTBEAT,
    LOST_AFTER,
    NO_PROGRESS_RESTARTS,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.bounded import POLL_SLACK
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import INLINE_MAX, TAIL_LINES, read_json
from ansible_collections.multinode.training.plugins.module_utils._torchrun.firewall import TTL as FIREWALL_TTL
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import POLL, status, stream_ranks
from ansible_collections.multinode.training.plugins.module_utils._torchrun.live import PROGRESS_SPEC
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import job_alive
from ansible_collections.multinode.training.plugins.module_utils._torchrun.start import start
from ansible_collections.multinode.training.plugins.module_utils._torchrun.wait import follow, stop, wait

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
    job_file = os.path.join(job_dir, "job.json")
    result = dict(changed=False, job_id=job_id, job_dir=job_dir)
    job = read_json(job_file)

    if p["state"] == "stopped":
        stop(module, job_id, job_dir, job, result, host)
    if p["state"] == "status" or (p["state"] == "finished" and p["follow_limit"]):
        if job is None:
            module.fail_json(msg="job_id=%s: no such job on %s (no %s); valid: the id of a job started on this node"
                                 % (job_id, host, job_file), **result)
        if p["state"] == "status":
            result.update(status(job_id, job_dir, job, renew=not module.check_mode))
            module.exit_json(**result)

    wait_only = p["state"] == "finished" and job is not None
    if job is None:
        if p["state"] == "finished" and not (p["script"] or p["module"]):
            module.fail_json(msg="job %s was never started on %s and neither script nor module is set"
                                 % (job_id, host), **result)
        job = start(module, job_id, job_dir, job_file, result, host)
        result["changed"] = True
    elif p["state"] == "started":
        result.update(cmd=job.get("cmd"), pid=job.get("pid"), pgid=job.get("pgid"),
                      nproc_per_node=job.get("nproc_per_node"))
        if job_alive(job.get("pid"), job_id, job_dir):
            module.exit_json(msg="job %s is running already" % job_id, **result)
        module.fail_json(msg="job id %s was used before on %s (%s): rendezvous ids must not be reused, "
                             "pick a new one" % (job_id, host, job_dir), **result)
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
    wait(module, job_id, job_dir, job, result, host)
