# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a start of one torchrun job on this node decides (O(state=started), or O(state=finished) for a job not
started yet), and its two detached spawns. job.py runs them in order, with the module's calls between them:

the refusals of O(state) (``check_state``, ``started_again``), the inputs checked on the node (``check_start``),
the job's environment (``job_env``, ``build_env``), torchrun's argv (``plan_argv``), the account
(``resolve_account``), the record (``job_record``); after the job directory (_torchrun.jobdir) the supervisor
(``spawn_supervisor``) and the watcher (``spawn_watcher``). A refusal raises JobError with the module's message.
"""
from __future__ import annotations

import grp
import os
import pwd

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
from ansible_collections.multinode.training.plugins.module_utils._torchrun.errors import JobError
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import RANK_WRAPPER, WATCHER, watcher_env
from ansible_collections.multinode.training.plugins.module_utils._torchrun.jobdir import supervisor_argv
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import spawn, stop_job
from ansible_collections.multinode.training.plugins.module_utils._train.listener import stop_stale


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


def check_state(state, job, has_code, follow_limit, job_id, job_file, host):
    """The refusals of O(state) before anything is done: a status or a long poll (``follow_limit``) of a job this
    node has no job.json of (``job`` None), and a wait for such a job with nothing to start (``has_code``:
    O(script) or O(module) set)."""
    if job is None and (state == "status" or (state == "finished" and follow_limit)):
        raise JobError("job_id=%s: no such job on %s (no %s); valid: the id of a job started on this node"
                       % (job_id, host, job_file))
    if job is None and state == "finished" and not has_code:
        raise JobError("job %s was never started on %s and neither script nor module is set" % (job_id, host))


def started_again(job_id, job_dir, host, alive):
    """O(state=started) of a job id this node has a job.json of -> the message when its supervisor still runs
    (``alive``: nothing changes); JobError when it ended: a rendezvous id is never reused."""
    if alive:
        return "job %s is running already" % job_id
    raise JobError("job id %s was used before on %s (%s): rendezvous ids must not be reused, pick a new one"
                   % (job_id, host, job_dir))


def resolve_account(user, group, host):
    """O(user)/O(group) -> uid, gid, supplementary groups and home; None when the job runs as the module's user."""
    if not user:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise JobError("user=%s (train_user) does not exist on %s" % (user, host))
    gid = entry.pw_gid
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise JobError("group=%s (train_group) does not exist on %s" % (group, host))
    if entry.pw_uid == os.geteuid() and gid == os.getegid():
        return None
    if os.geteuid() != 0:
        raise JobError("user=%s (train_user) on %s: the module runs as uid %d and cannot switch; run it "
                       "with become" % (user, host, os.geteuid()))
    groups = sorted(set(os.getgrouplist(entry.pw_name, gid)))
    return {"name": entry.pw_name, "uid": entry.pw_uid, "gid": gid, "groups": groups, "home": entry.pw_dir}


def check_start(params, host):
    """The job's python, O(chdir), O(script) and O(args), checked on this node -> (python, chdir)."""
    p = params
    python = p["python"] or os.path.join(p["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        raise JobError("python %s not found or not executable on %s: is the venv there (role "
                       "multinode.training.wheel_distribute, variable venv/python)?" % (python, host))
    chdir = p["chdir"]
    if chdir and not os.path.isdir(chdir):
        raise JobError("chdir %s is not a directory on %s" % (chdir, host))
    if p["script"]:
        script = p["script"] if os.path.isabs(p["script"]) or not chdir else os.path.join(chdir, p["script"])
        if not os.path.isfile(script):
            raise JobError("script %s does not exist on %s" % (script, host))
    if not isinstance(p["args"], list):
        raise JobError("args=%r on %s: must be a list; each item reaches the script as one argument"
                       % (p["args"], host))
    return python, chdir


def job_env(params, job_id, job_dir, host):
    """The job's environment from the module's own (``build_env``) -> (environment, its secret values)."""
    try:
        return build_env(params["env_files"], params["env"], job_id, job_dir, os.environ,
                         max_restarts=params["max_restarts"])
    except TorchrunError as exc:
        raise JobError("%s (on %s)" % (exc, host))


def plan_argv(params, python, job_id, job_dir, env, gpus, host):
    """torchrun's argv -> (argv, nproc_per_node). ``gpus``: the node's GPU count (``gpu_count``) for
    O(nproc_per_node=auto), else None."""
    p = params
    try:
        # auto: one rank per GPU the ranks see - nvidia-smi lists every GPU of the node, whatever
        # CUDA_VISIBLE_DEVICES the job's environment (env, env_files) sets.
        nproc = resolve_nproc(p["nproc_per_node"], visible_gpus(gpus, env.get("CUDA_VISIBLE_DEVICES")),
                              p["cpu_nproc"])
        opts = dict(p, nproc_per_node=nproc, log_dir=os.path.join(job_dir, "ranks"), rdzv_id=p["rdzv_id"] or job_id,
                    wrapper=os.path.join(job_dir, RANK_WRAPPER))
        return build_argv(python, opts), nproc
    except TorchrunError as exc:
        raise JobError("%s (on %s)" % (exc, host))


def job_record(params, job_id, host, argv, secrets, nproc, gpus, account):
    """What job.json records of the start (its pids come with the spawns): the command with the secrets
    masked, the ranks, the limits, the account."""
    job = {"job_id": job_id, "cmd": mask(argv, secrets), "nproc_per_node": nproc, "timeout": params["timeout"],
           "stop_grace": params["stop_grace"], "host": host,
           "user": account["name"] if account else pwd.getpwuid(os.geteuid()).pw_name}
    if gpus is not None:
        job["gpu_count"] = gpus
    return job


def spawn_supervisor(job, job_dir, command, fds, account, timeout, grace):
    """Detached on purpose (run_command waits): the supervisor leads a new session as the job's user, stdin
    is /dev/null, stdout and stderr go to torchrun.log (``fds``: its descriptor, watch.log's) -> its pid."""
    python, chdir, argv, env = command
    log_fd, watch_fd = fds
    try:
        return spawn(supervisor_argv(python, job_dir, job["job_id"], timeout, grace, chdir, argv), env, log_fd,
                     account)
    except OSError as exc:
        os.close(watch_fd)
        raise JobError("cannot start the job on %s as %s: %s" % (job["host"], job["user"], exc))
    finally:
        os.close(log_fd)


def spawn_watcher(job, job_dir, command, watch_fd, account):
    """The watcher (mt_watch.py): every node's watches its ranks, the first node's hears the others; they
    stop the job everywhere on the first failure or a lost node (_torchrun.follow) -> job["watch_pid"]."""
    python, _chdir, _argv, env = command
    try:
        # The supervisor's pid in argv too: the watcher must never take it for a leftover.
        job["watch_pid"] = spawn([python, os.path.join(job_dir, WATCHER), job_dir, str(job["pid"])],
                                 watcher_env(env, job["job_id"], (JOB_ENV, JOB_DIR_ENV)), watch_fd, account)
    except OSError as exc:
        stop_job(job["job_id"], pgid=job["pid"], grace=1, job_dir=job_dir)
        raise JobError("cannot start the job's watcher on %s: %s" % (job["host"], exc))
    finally:
        os.close(watch_fd)
