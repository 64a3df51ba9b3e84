# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print the suite's figures (case count, slowest case) at the end of the run."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    for line in getattr(terminalreporter.config, "badinput_summary", ()):
        terminalreporter.write_line(line)
