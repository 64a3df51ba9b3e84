"""Split a build_deepspeed.yml run's time into compile, downloads and everything else.

Reads the log of a run made with the profile_tasks callback listing every task
(ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks PROFILE_TASKS_TASK_OUTPUT_LIMIT=all)
and prints the sum per phase. A task is "compile" or "download" by its name (the roles'
task names, old and new); everything else, fact gathering and module round trips included,
is the overhead the cold-build target is about. Asserts nothing.

  python benchmarks/profile_phases.py run.log
"""
from __future__ import annotations

import re
import sys

PHASES = (
    ("compile", re.compile(r"Build the wheel with ops")),
    ("download", re.compile(r"Install torch and DeepSpeed's build requirements|Download deepspeed==|"
                            r"Download torch and the wheel's dependencies|Fetch it into dist/wheelhouse|"
                            r"Install the compilers of gcc|Install the packages|Install python3|"
                            r"Refresh the package index")),
)
LINE = re.compile(r"^(?P<name>.+?) -+ (?P<seconds>\d+\.\d+)s$")


def phases(text):
    recap = text.split("TASKS RECAP", 1)[-1]
    totals = {"compile": 0.0, "download": 0.0, "other": 0.0}
    for line in recap.splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        seconds = float(match.group("seconds"))
        phase = next((label for label, pattern in PHASES if pattern.search(match.group("name"))), "other")
        totals[phase] += seconds
    return totals


def main():
    with open(sys.argv[1]) as handle:
        totals = phases(handle.read())
    total = sum(totals.values())
    for label in ("compile", "download", "other"):
        print("%-9s %8.1f s" % (label, totals[label]))
    print("%-9s %8.1f s  (sum of task times; 'other' is the time outside the compile step and the downloads)"
          % ("total", total))


if __name__ == "__main__":
    main()
