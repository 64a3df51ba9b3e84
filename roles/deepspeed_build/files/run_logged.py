"""Run a command with its output going to a log file; on failure print the log's tail.

Usage: python run_logged.py <log file> -- <argv...>
The build's thousands of lines of compiler output belong in a file on the build
host, not in Ansible's result; the tail is what a person needs when it fails.
Exits with the command's return code.
"""
import collections
import subprocess
import sys

log_path = sys.argv[1]
argv = sys.argv[sys.argv.index("--") + 1:]
with open(log_path, "wb") as log:
    rc = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
if rc != 0:
    errors = []
    with open(log_path, "rb") as log:
        tail = collections.deque(maxlen=20)
        for line in log:
            tail.append(line)
            # Compiler and setuptools errors, which a Python traceback's tail hides.
            if (b"error" in line.lower() and b"Werror" not in line and len(errors) < 12) or b"fatal" in line:
                errors.append(line)
    sys.stderr.write("command failed with rc=%d; see %s\n" % (rc, log_path))
    if errors:
        sys.stderr.write("error lines:\n" + b"".join(errors).decode("utf-8", "replace"))
    sys.stderr.write("last lines:\n" + b"".join(tail).decode("utf-8", "replace"))
sys.exit(rc)
