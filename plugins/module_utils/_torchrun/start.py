# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start one torchrun job on this node (O(state=started), or O(state=finished) for a job not started yet).

In order: the inputs checked on the node (``check_start``), torchrun's argv and the job's environment
(``plan_start``, ``build_env``), the account (``resolve_account``), the firewall guard (_torchrun.firewall),
then ``launch``: the job directory (_torchrun.jobdir), the detached supervisor, the watcher, job.json.
"""
from __future__ import annotations

import grp
import os
import pwd
import time

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    JOB_DIR_ENV,
    JOB_ENV,
    TorchrunError,
    build_argv,
    check_env,
    recorder_env,
    count_gpus_nvidia_smi,
    mask,
    parse_env_file,
    resolve_nproc,
    secret_values,
    visible_gpus,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.firewall import (
    firewall_tool,
    open_firewall,
    rdzv_port,
    remove_firewall,
    start_keeper,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import RANK_WRAPPER, WATCHER, watcher_env
from ansible_collections.multinode.training.plugins.module_utils._torchrun.jobdir import fill_job_dir, make_job_dir, supervisor_argv, write_json
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import spawn, stop_job
from ansible_collections.multinode.training.plugins.module_utils._train.listener import stop_stale
from ansible_collections.multinode.training.plugins.module_utils._train.security import table_name


def gpu_count(smi_rc, smi_out, proc_gpus="/proc/driver/nvidia/gpus"):
    """GPUs of this node: ``nvidia-smi -L`` when it ran (rc 0), else the driver's /proc entries, else 0."""
    if smi_rc == 0:
        return count_gpus_nvidia_smi(smi_out)
    try:
        return len(os.listdir(proc_gpus))
    except OSError:
        return 0


def build_env(env_files, env, job_id, job_dir, base_env, max_restarts=0):
    """The job's environment -> (environment, secret values).

    ``base_env`` (the module's environment), then the env files in order, then ``env``; the job
    markers, LOGLEVEL=INFO unless set, unbuffered output and torchrun's error file on top.
    A job torchrun may restart (``max_restarts`` > 0) gets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
    unless set: with the rendezvous store shared with the ranks (torch's default since 2.5), a
    restarted group reads the previous group's keys from it (the ranks' addresses, NCCL's
    unique id) and connects to dead peers (pytorch #135712; seen here as gloo's "Connection
    refused" to a rank of the lost attempt); unshared, every rendezvous round gets a new store.
    Every job gets torch's flight recorder (_node.torchrun.recorder_env: TORCH_FR_BUFFER_SIZE=2000 unless
    set), whose entries the rank's sampler reads (_node.sampler): the straggler rule's blocks of collectives,
    and in a hang the collective a rank waits in.
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
    recorder_env(full)
    return full, secret_values(own)


def stop_stale_listener(port):
    """Stop preflight's listener on ``port`` if one still runs -> the pids stopped."""
    return stop_stale(port) if port else []


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


def check_start(module, host, result):
    """The job's python, O(chdir), O(script) and O(args), checked on this node -> (python, chdir)."""
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
    return python, chdir


def plan_start(module, python, job_id, job_dir, host, result):
    """-> (torchrun's argv, the job's environment, its secret values, nproc_per_node, the GPU count or None)."""
    p = module.params
    gpus = None
    try:
        env, secrets = build_env(p["env_files"], p["env"], job_id, job_dir, os.environ,
                                 max_restarts=p["max_restarts"])
        if p["nproc_per_node"] == "auto":
            smi = module.get_bin_path("nvidia-smi")
            smi_rc, smi_out = module.run_command([smi, "-L"])[:2] if smi else (None, "")
            gpus = gpu_count(smi_rc, smi_out)
        # auto: one rank per GPU the ranks see - nvidia-smi lists every GPU of the node, whatever
        # CUDA_VISIBLE_DEVICES the job's environment (env, env_files) sets.
        nproc = resolve_nproc(p["nproc_per_node"], visible_gpus(gpus, env.get("CUDA_VISIBLE_DEVICES")),
                              p["cpu_nproc"])
        opts = dict(p, nproc_per_node=nproc, log_dir=os.path.join(job_dir, "ranks"), rdzv_id=p["rdzv_id"] or job_id,
                    wrapper=os.path.join(job_dir, RANK_WRAPPER))
        argv = build_argv(python, opts)
    except TorchrunError as exc:
        module.fail_json(msg="%s (on %s)" % (exc, host), **result)
    return argv, env, secrets, nproc, gpus


def start(module, job_id, job_dir, job_file, result, host):
    """Start the job here -> its job.json record (only planned, nothing started, in check mode)."""
    p = module.params
    python, chdir = check_start(module, host, result)
    argv, env, secrets, nproc, gpus = plan_start(module, python, job_id, job_dir, host, result)
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
    nft = firewall_tool(module, host, result)
    if nft:
        job["firewall_table"] = table_name(job_id)
    if module.check_mode:
        return job
    ports = open_firewall(module, nft, job["firewall_table"], argv, host, result) if nft else None
    launch(module, job, job_dir, job_file, (python, chdir, argv, env), account, result)
    if nft:
        start_keeper(nft, job["pid"], job_dir, job["firewall_table"], ports, p["firewall_ttl"])
    return job


def launch(module, job, job_dir, job_file, command, account, result):
    """The job directory made and filled, the supervisor (``command``: python, chdir, torchrun's argv, the
    environment) and the watcher started, detached; job.json written with their pids (``job`` updated)."""
    p = module.params
    job_id, host = job["job_id"], job["host"]
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
    pid = spawn_supervisor(module, job, job_dir, command, (log_fd, watch_fd), account, result)
    job.update(pid=pid, pgid=pid, start=time.time())
    write_json(job_file, job, 0o640, owner, dir_fd)
    spawn_watcher(module, job, job_dir, command, watch_fd, account, result)
    # Still the account's (the watcher, running as the account, reads the supervisor's pid here).
    write_json(job_file, job, 0o640, owner, dir_fd)
    os.close(dir_fd)


def spawn_supervisor(module, job, job_dir, command, fds, account, result):
    """Detached on purpose (run_command waits): the supervisor leads a new session as the job's user, stdin
    is /dev/null, stdout and stderr go to torchrun.log (``fds``: its descriptor, watch.log's) -> its pid."""
    python, chdir, argv, env = command
    log_fd, watch_fd = fds
    p = module.params
    try:
        return spawn(supervisor_argv(python, job_dir, job["job_id"], p["timeout"], p["stop_grace"], chdir, argv),
                     env, log_fd, account)
    except OSError as exc:
        os.close(watch_fd)
        remove_firewall(module, job["job_id"])
        module.fail_json(msg="cannot start the job on %s as %s: %s" % (job["host"], job["user"], exc), **result)
    finally:
        os.close(log_fd)


def spawn_watcher(module, job, job_dir, command, watch_fd, account, result):
    """The watcher (mt_watch.py): every node's watches its ranks, the first node's hears the others; they
    stop the job everywhere on the first failure or a lost node (_torchrun.follow) -> job["watch_pid"]."""
    python, _chdir, _argv, env = command
    try:
        # The supervisor's pid in argv too: the watcher must never take it for a leftover.
        job["watch_pid"] = spawn([python, os.path.join(job_dir, WATCHER), job_dir, str(job["pid"])],
                                 watcher_env(env, job["job_id"], (JOB_ENV, JOB_DIR_ENV)), watch_fd, account)
    except OSError as exc:
        stop_job(job["job_id"], pgid=job["pid"], grace=1, job_dir=job_dir)
        remove_firewall(module, job["job_id"])
        module.fail_json(msg="cannot start the job's watcher on %s: %s" % (job["host"], exc), **result)
    finally:
        os.close(watch_fd)
