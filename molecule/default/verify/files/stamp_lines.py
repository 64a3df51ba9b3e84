# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command; print each line of its output (stdout and stderr together) as it arrives, prefixed with
the controller's clock at its arrival: ``<unix time> <line>``. Exits with the command's status.

The observer of a promise about time (a rank's line reaches the terminal within about 5 s) must not be
the thing that makes it: this reads the pipe of ansible-playbook as a terminal would."""
import subprocess
import sys
import time


def main(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for raw in iter(proc.stdout.readline, b""):
        sys.stdout.write("%.3f %s" % (time.time(), raw.decode("utf-8", "replace")))
        sys.stdout.flush()
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
