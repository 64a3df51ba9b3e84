# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job directory on this node (``<log_dir>/<job id>/``): made by root, filled through its descriptor, then
handed to the job's account; files replaced atomically (``write_json``). Used by the start and the stop
(_torchrun.job)."""
from __future__ import annotations

import errno
import json
import os
import stat

from ansible_collections.multinode.training.plugins.module_utils._torchrun.errors import JobError
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import new_file, write_watch_files
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import supervisor_source

SUPERVISOR_FILE = "supervisor.py"


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


def real_directory(path):
    """``path``'s lstat where it is a directory itself, not a link to one (the job's account may
    have replaced its job directory with a link to one of root's), else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISDIR(st.st_mode) else None


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


def new_job_dir(job_dir, params, job_id, host, owner):
    """The job directory made (``make_job_dir``) and filled (``fill_job_dir``) -> (its descriptor, torchrun.log's,
    watch.log's); JobError when either fails (a reused job id: the directory exists)."""
    try:
        dir_fd = make_job_dir(job_dir)
    except OSError as exc:
        raise JobError("cannot create job directory %s on %s: %s (a reused job id?)" % (job_dir, host, exc))
    try:
        log_fd, watch_fd = fill_job_dir(dir_fd, params, job_id, host, owner)
    except OSError as exc:
        os.close(dir_fd)
        raise JobError("cannot write the job's files into %s on %s: %s" % (job_dir, host, exc))
    return dir_fd, log_fd, watch_fd


def supervisor_argv(python, job_dir, job_id, timeout, grace, cwd, argv):
    """The supervisor's command line: the job's python runs supervisor.py of the job directory."""
    return [python, os.path.join(job_dir, SUPERVISOR_FILE), job_dir, job_id, str(timeout), str(grace),
            cwd or job_dir, "--"] + list(argv)
