# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command; print its output (stdout and stderr together) as it arrives, and create FILE once a line
matches PATTERN (a Python regular expression). Exits with the command's status.

    release_on_line.py PATTERN FILE -- COMMAND...

A job held until FILE exists (the smoke job's --hold-file, on storage the nodes share with the
controller) then ends only after the command - a play that follows it - has printed that line: "the
play saw the job run" holds by construction, not because the job was long enough for a busy host."""
import re
import subprocess
import sys


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: release_on_line.py PATTERN FILE -- COMMAND...\n")
        return 2
    pattern, path, command = re.compile(argv[0]), argv[1], argv[3:]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    released = False
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode("utf-8", "replace")
        sys.stdout.write(line)
        sys.stdout.flush()
        if not released and pattern.search(line):
            with open(path, "w") as handle:
                handle.write(line)
            released = True
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
