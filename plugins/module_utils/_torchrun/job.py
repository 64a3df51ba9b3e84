# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The torchrun module's job logic: start, wait, stop one job on this node.

plugins/modules/torchrun.py is its documentation plus ``run_module(AnsibleModule(ARGUMENT_SPEC))``.
The decisions are plain functions tested on recorded job directories
(tests/fixtures/torchrun/jobs/): the job's environment (``build_env``), whether the job is
still alive (``job_alive``), the GPU count (``gpu_count``), what a finished job means
(``verdict``); the node side (supervisor, keeper, /proc scan) is _node/supervisor.py,
shipped into the job directory as ``supervisor.py``.
"""
from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import socket
import stat
import sys
import time

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    JOB_DIR_ENV,
    JOB_ENV,
    TorchrunError,
    build_argv,
    check_env,
    count_gpus_nvidia_smi,
    local_workers_succeeded,
    mask,
    parse_env_file,
    resolve_nproc,
    secret_values,
    validate_job_id,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import (
    INLINE_MAX,
    collect,
    pack_job_dir,
    read_json,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import (
    RANK_WRAPPER,
    WATCHER,
    add_watch_state,
    new_file,
    renew_lease,
    status,
    stop_watcher,
    watcher_env,
    write_watch_files,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import (
    alive,
    describe,
    find_job_processes,
    stop_job,
    supervisor_source,
)
from ansible_collections.multinode.training.plugins.module_utils._node.watch import follow_window, job_done, read_tail
from ansible_collections.multinode.training.plugins.module_utils._train.listener import stop_stale
from ansible_collections.multinode.training.plugins.module_utils._train.security import (
    SecurityError,
    job_tables,
    parse_tables,
    render_delete,
    render_refresh,
    render_table,
    table_name,
)

ARGUMENT_SPEC = dict(
    state=dict(type="str", default="finished", choices=["started", "finished", "stopped", "status"]),
    script=dict(type="path"),
    module=dict(type="str"),
    args=dict(type="raw", default=[]),
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
    local_addr=dict(type="str"),
    env=dict(type="dict", default={}),
    env_files=dict(type="list", elements="path", default=[]),
    venv=dict(type="path", default="/opt/multinode-training/venv"),
    python=dict(type="path"),
    chdir=dict(type="path"),
    log_dir=dict(type="path", default="/var/log/multinode-training"),
    tee=dict(type="bool", default=False),
    timeout=dict(type="int", default=0),
    stop_grace=dict(type="int", default=15),
    tail_lines=dict(type="int", default=30),
    exit_barrier_grace=dict(type="int", default=30),
    user=dict(type="str"),
    group=dict(type="str"),
    firewall_allow=dict(type="list", elements="str", default=[]),
    firewall_ttl=dict(type="int", default=60),
    # follow/poll are the action plugin's (plugins/action/torchrun.py); watch: _torchrun.follow.
    follow=dict(type="bool", default=False),
    poll=dict(type="int", default=10),
    # Set by the action for each long poll of a followed wait, and where the job directory's archive
    # goes when it is too big to travel in the result.
    follow_limit=dict(type="float", default=0),
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
        lost=dict(type="int", default=10),
        lease=dict(type="int", default=0),
        fail_grace=dict(type="int", default=5),
        interval=dict(type="float", default=0.5),
    )),
)
MUTUALLY_EXCLUSIVE = [("script", "module")]
# Right after the spawn /proc may still show the pre-exec environment, without the job
# marker: within these seconds a live supervisor pid is taken as the supervisor.
SPAWN_SETTLE = 10.0
SUPERVISOR_FILE = "supervisor.py"


# ------------------------------------------------------------------ files

def write_json(path, data, mode=0o640, owner=None, dir_fd=None):
    """Replace ``path`` atomically; ``mode`` and ``owner`` (uid, gid) are set before the rename, so no
    reader ever sees the file with other permissions (the job's account must read job.json).

    Root writes here into a directory of the job's account, which may have put anything there: the
    temporary file gets a new random name and is created exclusively (a name planted beforehand, a
    link to a file of root's among them, is never opened), its mode and owner are set through the
    open file (never through a name that could have been replaced since), and the rename replaces
    ``path`` itself (a link there too), never what a link points to. All of it happens relative to
    the directory's descriptor: ``dir_fd`` (the job directory the module created,
    ``make_job_dir``) or the directory opened without following a link, so that a job directory
    the account replaced with a link to one of root's gets nothing (OSError)."""
    directory, name = os.path.split(path)
    own = dir_fd is None
    if own:
        dir_fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for _attempt in range(100):
            tmp = ".%s.%s" % (name, os.urandom(6).hex())
            try:
                fd = new_file(dir_fd, tmp, mode, owner)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError("no free temporary name beside %s" % path)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(data, handle, indent=1, sort_keys=True)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    finally:
        if own:
            os.close(dir_fd)


def make_job_dir(job_dir):
    """Create the job directory -> a descriptor of it, for every file the module puts there.

    The job's account owns the directory above (``log_dir``) and may rename or replace
    ``job_dir`` at any moment, a link to one of root's directories among what it can put there:
    had root then created the job's files, or handed them to the account (chown), through the
    name, it would do so in root's directory. So the directory is created 0700 (nobody but root
    enters it while its files are made), opened at once without following a link, and taken only
    where that is the directory just made (root's, empty); its files, their owner and its own
    owner and mode are set through descriptors (``new_file``, ``write_json``), never through a
    name. Raises OSError (a reused job id: EEXIST)."""
    parent = os.path.dirname(job_dir.rstrip("/"))
    if parent:
        os.makedirs(parent, exist_ok=True)
    os.mkdir(job_dir, 0o700)
    fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077 or os.listdir(fd):
        os.close(fd)
        raise OSError(errno.EEXIST, "replaced while it was created (owner uid %d, mode %o)"
                      % (st.st_uid, stat.S_IMODE(st.st_mode)), job_dir)
    return fd


def _real_directory(path):
    """``path``'s lstat where it is a directory itself, not a link to one (the job's account may
    have replaced its job directory with a link to one of root's), else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISDIR(st.st_mode) else None


# ------------------------------------------------------------------ decisions

def gpu_count(smi_rc, smi_out, proc_gpus="/proc/driver/nvidia/gpus"):
    """GPUs of this node: ``nvidia-smi -L`` when it ran (rc 0), else the driver's /proc entries, else 0."""
    if smi_rc == 0:
        return count_gpus_nvidia_smi(smi_out)
    try:
        return len(os.listdir(proc_gpus))
    except OSError:
        return 0


def job_alive(pid, job_id, job_dir, started=None, proc="/proc", now=None):
    """The supervisor still runs (and the pid was not reused by something else)."""
    if not alive(pid, proc):
        return False
    if started and (now or time.time()) - started < SPAWN_SETTLE:
        return True
    return pid in find_job_processes(job_id, proc=proc, job_dir=job_dir)


def build_env(env_files, env, job_id, job_dir, base_env, max_restarts=0):
    """The job's environment -> (environment, secret values).

    ``base_env`` (the module's environment), then the env files in order, then ``env``; the job
    markers, LOGLEVEL=INFO unless set, unbuffered output and torchrun's error file on top.
    A job torchrun may restart (``max_restarts`` > 0) gets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
    unless set: with the rendezvous store shared with the ranks (torch's default since 2.5), a
    restarted group reads the previous group's keys from it (the ranks' addresses, NCCL's
    unique id) and connects to dead peers (pytorch #135712; seen here as gloo's "Connection
    refused" to a rank of the lost attempt); unshared, every rendezvous round gets a new store.
    Raises TorchrunError naming the file or the key.
    """
    own = {}
    for path in env_files:
        if not os.path.isfile(path):
            raise TorchrunError("env_files: %s does not exist (for the NCCL file: apply role "
                                "multinode.training.nccl_tuning first)" % path)
        try:
            # The operator's file (a link is fine: a mounted secret often is one), not the job's:
            # read_text would refuse a link.
            with open(path, "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
            own.update(parse_env_file(text, path))
        except OSError as exc:
            raise TorchrunError("env_files: %s cannot be read: %s" % (path, exc))
        except TorchrunError as exc:
            raise TorchrunError("env_files: %s" % exc)
    check_env(env)
    for key, value in (env or {}).items():
        own[str(key)] = "" if value is None else str(value)
    full = dict(base_env)
    full.update(own)
    full.setdefault("LOGLEVEL", "INFO")
    full["PYTHONUNBUFFERED"] = full.get("PYTHONUNBUFFERED", "1")
    full[JOB_ENV] = job_id
    full[JOB_DIR_ENV] = job_dir
    full["TORCHELASTIC_ERROR_FILE"] = os.path.join(job_dir, "torchrun_error.json")
    if max_restarts and int(max_restarts) > 0:
        full.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    return full, secret_values(own)


def rdzv_port(endpoint):
    """The port of a rendezvous endpoint (``host:port``, ``[v6]:port``) -> int, or None."""
    try:
        return int(str(endpoint or "").rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def stop_stale_listener(port):
    """Stop preflight's listener on ``port`` if one still runs -> the pids stopped."""
    return stop_stale(port) if port else []


def supervisor_argv(python, job_dir, job_id, timeout, grace, cwd, argv):
    """The supervisor's command line: the job's python runs supervisor.py of the job directory."""
    return [python, os.path.join(job_dir, SUPERVISOR_FILE), job_dir, job_id, str(timeout), str(grace),
            cwd or job_dir, "--"] + list(argv)


def keeper_argv(python, nft, pid, result_file, ttl, refresh, delete):
    """The firewall keeper's command line. It runs as root: its code comes from the module
    (``-c``), never from the job directory, which the job's user may write; isolated (``-I``): no
    current directory or PYTHON* variable decides what it imports."""
    return [python, "-I", "-c", supervisor_source(), "keep", nft, str(pid), result_file, str(ttl), refresh,
            delete]


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


def verdict(job, host, job_dir, result, data, gave_up, barrier_abandoned, timeout, barrier_grace):
    """What a finished wait means -> (failed, message, warning); updates ``result``.

    ``job`` is job.json; ``result`` holds what collect() read; ``data`` is result.json (None when the supervisor
    never wrote it); ``gave_up``: the module stopped the job after its deadline;
    ``barrier_abandoned``: this node's ranks succeeded and torchrun was stopped in its exit barrier.
    """
    job_id = job.get("job_id")
    if gave_up:
        result["timed_out"] = True
    result["exit_barrier_abandoned"] = barrier_abandoned
    if barrier_abandoned and not result["failures"]:
        result.update(rc=0, stopped=False, root_cause=None, root_cause_line=None)
        for entry in result["ranks"]:
            entry.update(exitcode=0, state="succeeded")
        return False, None, ("job %s: the ranks on %s succeeded; torchrun's exit barrier was abandoned after %ss "
                             "(another node did not finish)" % (job_id, host, barrier_grace))
    if data is None and not gave_up:
        return True, ("job %s on %s: the supervisor (pid %s) ended without recording a result; see %s/torchrun.log"
                      % (job_id, host, job.get("pid"), job_dir)), None
    if result["timed_out"]:
        return True, "job %s timed out after %ss on %s and was stopped" % (job_id, timeout, host), None
    if result["rc"] != 0:
        stop = result.get("stop") or {}
        if result.get("stop_line") and stop.get("reason") != "failure":
            return True, "job %s stopped on %s: %s" % (job_id, host, result["stop_line"]), None
        if result["stopped"] and not result["failures"] and not result.get("stop_line"):
            return True, "job %s was stopped on %s (rc %s)" % (job_id, host, result["rc"]), None
        return True, "job %s failed on %s: %s" % (job_id, host, result["root_cause_line"]), None
    return False, None, None


# ------------------------------------------------------------------ acting

def run_module(module):
    p = module.params
    host = socket.gethostname()
    for value in secret_values(p["env"]):
        module.no_log_values.add(value)
    try:
        job_id = validate_job_id(p["job_id"] or p["rdzv_id"], "job_id" if p["job_id"] else "rdzv_id")
    except TorchrunError as exc:
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


def stop(module, job_id, job_dir, job, result, host):
    p = module.params
    pgid = job.get("pgid") if job else None
    pids = find_job_processes(job_id, job_dir=job_dir)
    result["cmd"] = job.get("cmd") if job else None
    if module.check_mode:
        result.update(changed=bool(pids), killed=pids, survivors=[], firewall_table=None)
        module.exit_json(**result)
    killed, survivors = stop_job(job_id, pgid=pgid if pids else None, grace=p["stop_grace"], job_dir=job_dir)
    stop_watcher(job)
    result["firewall_table"] = remove_firewall(module, job_id)
    directory = _real_directory(job_dir)
    if job and directory and not os.path.lexists(os.path.join(job_dir, "result.json")):
        # Like the job's other files: the job's user's, not world-readable (owner set before the
        # rename: no chown through a name the account could have replaced with a link since).
        try:
            write_json(os.path.join(job_dir, "result.json"),
                       {"rc": None, "start": job.get("start"), "end": time.time(), "timed_out": False,
                        "stopped": True, "leftovers_killed": killed}, 0o640, (directory.st_uid, directory.st_gid))
        except OSError:
            pass  # the directory became a link since (write_json opens no link): no record there
    result.update(changed=bool(killed) or bool(result["firewall_table"]), killed=killed,
                  survivors=describe(survivors), stopped=bool(killed))
    if survivors:
        module.fail_json(msg="job %s: %d process(es) survived SIGKILL on %s: %s"
                             % (job_id, len(survivors), host, describe(survivors)), **result)
    module.exit_json(**result)


def start(module, job_id, job_dir, job_file, result, host):
    p = module.params
    python = p["python"] or os.path.join(p["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        module.fail_json(msg="python %s not found or not executable on %s: is the venv there (role "
                             "multinode.training.wheel_distribute, variable venv/python)?" % (python, host), **result)
    chdir = p["chdir"]
    if chdir and not os.path.isdir(chdir):
        module.fail_json(msg="chdir %s is not a directory on %s" % (chdir, host), **result)
    if p["script"]:
        script = p["script"] if os.path.isabs(p["script"]) or not chdir else os.path.join(chdir, p["script"])
        if not os.path.isfile(script):
            module.fail_json(msg="script %s does not exist on %s" % (script, host), **result)
    if not isinstance(p["args"], list):
        module.fail_json(msg="args=%r on %s: must be a list; each item reaches the script as one argument"
                             % (p["args"], host), **result)
    gpus = None
    try:
        if p["nproc_per_node"] == "auto":
            smi = module.get_bin_path("nvidia-smi")
            smi_rc, smi_out = module.run_command([smi, "-L"])[:2] if smi else (None, "")
            gpus = gpu_count(smi_rc, smi_out)
        nproc = resolve_nproc(p["nproc_per_node"], gpus, p["cpu_nproc"])
        opts = dict(p, nproc_per_node=nproc, log_dir=os.path.join(job_dir, "ranks"), rdzv_id=p["rdzv_id"] or job_id,
                    wrapper=os.path.join(job_dir, RANK_WRAPPER))
        argv = build_argv(python, opts)
        env, secrets = build_env(p["env_files"], p["env"], job_id, job_dir, os.environ,
                                 max_restarts=p["max_restarts"])
    except TorchrunError as exc:
        module.fail_json(msg="%s (on %s)" % (exc, host), **result)
    for value in secrets:
        module.no_log_values.add(value)
    account = resolve_account(module, host, result)
    if account:
        env.update(HOME=account["home"], USER=account["name"], LOGNAME=account["name"])
    job = {"job_id": job_id, "cmd": mask(argv, secrets), "nproc_per_node": nproc, "timeout": p["timeout"],
           "stop_grace": p["stop_grace"], "host": host,
           "user": account["name"] if account else pwd.getpwuid(os.geteuid()).pw_name}
    if gpus is not None:
        job["gpu_count"] = gpus
    nft = None
    if p["firewall_allow"]:
        nft = module.get_bin_path("nft")
        if not nft or os.geteuid() != 0:
            module.fail_json(msg="firewall_allow (train_firewall) on %s: needs nft (package nftables) and root; "
                                 "found nft=%s, uid %d" % (host, nft, os.geteuid()), **result)
        job["firewall_table"] = table_name(job_id)
    if module.check_mode:
        return job
    port = None
    if nft:
        port = guarded_ports(argv, p["watch"])
        try:
            rules = render_table(job["firewall_table"], port, p["firewall_allow"], p["firewall_ttl"])
        except (SecurityError, TypeError) as exc:
            module.fail_json(msg="firewall_allow on %s: %s (rdzv_endpoint %s)" % (host, exc, p["rdzv_endpoint"]),
                             **result)
        rc, _out, err = module.run_command([nft, "-f", "-"], data=rules, binary_data=True)
        if rc != 0:
            module.fail_json(msg="train_firewall on %s: nft refused the rule: %s" % (host, err.strip()), **result)
    owner = (account["uid"], account["gid"]) if account else None
    try:
        dir_fd = make_job_dir(job_dir)
    except OSError as exc:
        remove_firewall(module, job_id)
        module.fail_json(msg="cannot create job directory %s on %s: %s (a reused job id?)" % (job_dir, host, exc),
                         **result)
    try:
        log_fd, watch_fd = fill_job_dir(dir_fd, p, job_id, host, owner)
    except OSError as exc:
        os.close(dir_fd)
        remove_firewall(module, job_id)
        module.fail_json(msg="cannot write the job's files into %s on %s: %s" % (job_dir, host, exc), **result)
    # Preflight's listener (first node) must not hold the rendezvous port any more.
    stop_stale_listener(rdzv_port(p["rdzv_endpoint"]))
    # Detached on purpose (run_command waits): the supervisor leads a new session as the job's
    # user, stdin is /dev/null, stdout and stderr go to torchrun.log.
    try:
        pid = spawn(supervisor_argv(python, job_dir, job_id, p["timeout"], p["stop_grace"], chdir, argv),
                    env, log_fd, account)
    except OSError as exc:
        os.close(watch_fd)
        remove_firewall(module, job_id)
        module.fail_json(msg="cannot start the job on %s as %s: %s" % (host, job["user"], exc), **result)
    finally:
        os.close(log_fd)
    job.update(pid=pid, pgid=pid, start=time.time())
    write_json(job_file, job, 0o640, owner, dir_fd)
    # The watcher (mt_watch.py): every node's watches its ranks, the first node's hears the others;
    # they stop the job everywhere on the first failure or a lost node (_torchrun.follow).
    try:
        # The supervisor's pid in argv too: the watcher must never take it for a leftover.
        job["watch_pid"] = spawn([python, os.path.join(job_dir, WATCHER), job_dir, str(pid)],
                                 watcher_env(env, job_id, (JOB_ENV, JOB_DIR_ENV)), watch_fd, account)
    except OSError as exc:
        stop_job(job_id, pgid=pid, grace=1, job_dir=job_dir)
        remove_firewall(module, job_id)
        module.fail_json(msg="cannot start the job's watcher on %s: %s" % (host, exc), **result)
    finally:
        os.close(watch_fd)
    # Still the account's (the watcher, running as the account, reads the supervisor's pid here).
    write_json(job_file, job, 0o640, owner, dir_fd)
    os.close(dir_fd)
    if nft:
        with open(os.devnull, "wb") as null:
            spawn(keeper_argv(sys.executable, nft, pid, os.path.join(job_dir, "result.json"), p["firewall_ttl"],
                              render_refresh(job["firewall_table"], port, p["firewall_ttl"]),
                              render_delete(job["firewall_table"])),
                  {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}, null.fileno(), None)
    return job


def fill_job_dir(dir_fd, params, job_id, host, owner):
    """The job's files into the new job directory (``make_job_dir``'s descriptor), then the
    directory to the job's account (``owner``: uid, gid; None: it stays the module's user's), 0750
    -> the open descriptors of torchrun.log and watch.log (the supervisor's and the watcher's output).

    Every file goes through the directory's descriptor and is created before the account gets the
    directory: root never creates, writes or hands over a file through a name."""
    log_fd = new_file(dir_fd, "torchrun.log", 0o640, owner, flags=os.O_APPEND)
    watch_fd = new_file(dir_fd, "watch.log", 0o640, owner, flags=os.O_APPEND)
    # The supervisor outlives this module (whose files Ansible deletes): its source goes into the
    # job directory, where the job's python (the account can run it; preflight checks that) runs it.
    new_file(dir_fd, SUPERVISOR_FILE, 0o640, owner, supervisor_source())
    write_watch_files(params, dir_fd, job_id, host, owner)
    os.fchmod(dir_fd, 0o750)
    if owner is not None:
        os.fchown(dir_fd, owner[0], owner[1])
    return log_fd, watch_fd


def spawn(argv, env, out_fd, account, umask=0o027):
    """Start argv detached: new session, stdin /dev/null, stdout+stderr to out_fd, as ``account``
    (uid, gid, supplementary groups) when given, umask 027; returns its pid. Nobody waits for it."""
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only async-signal-safe work until exec
        try:
            os.close(err_r)
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.set_inheritable(err_w, False)
            os.closerange(3, err_w)
            os.closerange(err_w + 1, 65536)
            if account:
                os.setgroups(account["groups"])
                os.setgid(account["gid"])
                os.setuid(account["uid"])
            os.umask(umask)
            os.execve(argv[0], argv, env)
        except OSError as exc:
            os.write(err_w, str(exc).encode("utf-8", "replace"))
        finally:
            os._exit(127)
    os.close(err_w)
    # The pipe closes on exec (close-on-exec); anything written means the child never got there.
    message = os.read(err_r, 4096)
    os.close(err_r)
    if message:
        os.waitpid(pid, 0)
        raise OSError(message.decode("utf-8", "replace"))
    return pid


def resolve_account(module, host, result):
    """O(user)/O(group) -> uid, gid, supplementary groups and home; None when the job runs as the module's user."""
    p = module.params
    if not p["user"]:
        return None
    try:
        entry = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg="user=%s (train_user) does not exist on %s" % (p["user"], host), **result)
    gid = entry.pw_gid
    if p["group"]:
        try:
            gid = grp.getgrnam(p["group"]).gr_gid
        except KeyError:
            module.fail_json(msg="group=%s (train_group) does not exist on %s" % (p["group"], host), **result)
    if entry.pw_uid == os.geteuid() and gid == os.getegid():
        return None
    if os.geteuid() != 0:
        module.fail_json(msg="user=%s (train_user) on %s: the module runs as uid %d and cannot switch; run it "
                             "with become" % (p["user"], host, os.geteuid()), **result)
    groups = sorted(set(os.getgrouplist(entry.pw_name, gid)))
    return {"name": entry.pw_name, "uid": entry.pw_uid, "gid": gid, "groups": groups, "home": entry.pw_dir}


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


def wait_for_end(job_id, job_dir, job, timeout, grace, barrier_grace, poll=0.5):
    """Block until result.json exists, the supervisor is gone, the deadline passed (the job is
    stopped: ``gave_up``) or this node's ranks succeeded and torchrun sat in its exit barrier for
    ``barrier_grace`` s (stopped: ``barrier_abandoned``) -> (gave_up, barrier_abandoned)."""
    result_file = os.path.join(job_dir, "result.json")
    log_file = os.path.join(job_dir, "torchrun.log")
    deadline = job["start"] + timeout + grace + 30 if timeout else None
    local_done = None
    while not os.path.exists(result_file):
        if not job_alive(job.get("pid"), job_id, job_dir, job.get("start")):
            time.sleep(poll)
            if not os.path.exists(result_file):
                break
        if deadline and time.time() > deadline:
            stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
            return True, False
        # This node's ranks all succeeded and torchrun only waits in its exit barrier for
        # the other agents; an agent that failed never arrives (torch waits 300 s).
        if local_done is None and local_workers_succeeded(read_tail(log_file)):
            local_done = time.time()
        if local_done and time.time() - local_done > barrier_grace:
            stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
            return False, True
        time.sleep(poll)
    return False, False


def follow_until(job_id, job_dir, job, limit, timeout, grace, barrier_grace, poll=0.1, check_every=1.0,
                 gone_after=3, clock=time.time, sleep=time.sleep):
    """One long poll of a followed wait: block at most ``limit`` s -> (ended, gave_up, barrier_abandoned).

    Ended at once (checked every ``poll`` s) when the job ended on this node the way O(state=status)
    says ``done`` (result.json and the watcher is done), also when a stop of the watchers ended it;
    the supervisor's liveness, the deadline and the exit barrier (as in ``wait_for_end``) are checked
    every ``check_every`` s (they scan /proc). (False, False, False): still running, poll again.
    """
    result_file = os.path.join(job_dir, "result.json")
    state_file = os.path.join(job_dir, "watch_state.json")
    log_file = os.path.join(job_dir, "torchrun.log")
    deadline = job["start"] + timeout + grace + 30 if timeout and job.get("start") else None
    end_by = clock() + limit
    next_check = 0.0
    missed = 0
    while True:
        now = clock()
        ended = read_json(result_file) if os.path.exists(result_file) else None
        if ended is not None and job_done(job, ended, read_json(state_file), now):
            return True, False, False
        if now >= next_check:
            next_check = now + check_every
            # The supervisor is taken for gone (without a result) only when ``gone_after`` checks in a
            # row miss it: one /proc read that fails under load must not end a running job's wait.
            gone = ended is None and not job_alive(job.get("pid"), job_id, job_dir, job.get("start"))
            missed = missed + 1 if gone else 0
            if missed >= gone_after:
                sleep(poll)
                if not os.path.exists(result_file):
                    return True, False, False
            if deadline and now > deadline:
                stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
                return True, True, False
            # The node's ranks succeeded and torchrun waits in its exit barrier for the other agents;
            # the log's last write is when that began (no line is logged while it waits).
            if ended is None and local_workers_succeeded(read_tail(log_file)):
                try:
                    since = os.path.getmtime(log_file)
                except OSError:
                    since = now
                if now - since > barrier_grace:
                    stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
                    return True, False, True
        if now >= end_by:
            return False, False, False
        sleep(min(poll, max(0.0, end_by - now)))


def follow(module, job_id, job_dir, job, result, host):
    """A followed wait's long poll: renew the lease, wait up to follow_limit s; the progress when the job
    still runs (RV(done) false), else the finished result (``finish``) with RV(done) true."""
    p = module.params
    renew_lease(job_dir)
    conf = read_json(os.path.join(job_dir, "watch.json")) or {}
    limit = follow_window(p["follow_limit"], conf.get("lease"))
    timeout = p["timeout"] or job.get("timeout") or 0
    grace = job.get("stop_grace", p["stop_grace"])
    ended, gave_up, abandoned = follow_until(job_id, job_dir, job, limit, timeout, grace, p["exit_barrier_grace"])
    if not ended:
        result.update(status(job_id, job_dir, job, renew=False))
        # The controller's next polls run the watcher file with this python (``mt_watch.py follow``).
        result.update(done=False, interpreter=sys.executable)
        module.exit_json(**result)
    result["done"] = True
    finish(module, job_id, job_dir, job, result, host, gave_up, abandoned, timeout, grace)


def wait(module, job_id, job_dir, job, result, host):
    p = module.params
    timeout = p["timeout"] or job.get("timeout") or 0
    grace = job.get("stop_grace", p["stop_grace"])
    gave_up, abandoned = wait_for_end(job_id, job_dir, job, timeout, grace, p["exit_barrier_grace"])
    finish(module, job_id, job_dir, job, result, host, gave_up, abandoned, timeout, grace)


def finish(module, job_id, job_dir, job, result, host, gave_up, abandoned, timeout, grace):
    """The job ended on this node: its result, what the watchers decided, leftovers stopped, the job
    directory packed for the controller (O(archive)), the verdict."""
    p = module.params
    data = read_json(os.path.join(job_dir, "result.json"))
    result.update(collect(job_dir, job, data, p["tail_lines"], host))
    add_watch_state(job_dir, result)
    # Nothing of the job may outlive it on this node: what the supervisor's SIGTERM left is stopped
    # here (SIGKILL after the grace), so the play needs no separate stop round trip.
    killed, survivors = stop_job(job_id, grace=grace, job_dir=job_dir)
    result.update(killed=killed, survivors=describe(survivors),
                  firewall_table=remove_firewall(module, job_id) or result.get("firewall_table"))
    if p["archive"]:
        # The job's logs travel with this result (or, when big, wait in O(archive) for a fetch).
        try:
            packed = pack_job_dir(job_dir, p["archive"], p["archive_inline_max"])
        except (IOError, OSError) as exc:
            packed = {"inline": None, "path": None, "error": "cannot pack %s: %s" % (job_dir, exc)}
        result["archive"] = packed
    if survivors:
        module.fail_json(msg="job %s: %d process(es) survived SIGKILL on %s: %s"
                             % (job_id, len(survivors), host, result["survivors"]), **result)
    failed, msg, warning = verdict(dict(job, job_id=job_id), host, job_dir, result, data, gave_up, abandoned,
                                   timeout, p["exit_barrier_grace"])
    if warning:
        module.warn(warning)
    if failed:
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)
