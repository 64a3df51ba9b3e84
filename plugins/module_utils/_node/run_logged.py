# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command with its output going to a log file; on failure print the log's tail.

Usage: python run_logged.py <log file> -- <argv...>
The build's thousands of lines of compiler output belong in a file on the build
host, not in Ansible's result; the tail is what a person needs when it fails.
Exits with the command's return code. Standard library only: module deepspeed_build (stage)
writes this file's source into the build's work folder (the build runs it there).
"""
from __future__ import annotations

import collections
import subprocess
import sys


def error_lines(log_path, keep=20, most=12):
    """(error lines, last lines) of a log: compiler and setuptools errors, which a Python traceback's tail hides."""
    errors = []
    with open(log_path, "rb") as log:
        tail = collections.deque(maxlen=keep)
        for line in log:
            tail.append(line)
            if (b"error" in line.lower() and b"Werror" not in line and len(errors) < most) or b"fatal" in line:
                errors.append(line)
    return errors, list(tail)


def main(args):
    log_path = args[0]
    argv = args[args.index("--") + 1:]
    with open(log_path, "wb") as log:
        rc = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        errors, tail = error_lines(log_path)
        sys.stderr.write("command failed with rc=%d; see %s\n" % (rc, log_path))
        if errors:
            sys.stderr.write("error lines:\n" + b"".join(errors).decode("utf-8", "replace"))
        sys.stderr.write("last lines:\n" + b"".join(tail).decode("utf-8", "replace"))
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
