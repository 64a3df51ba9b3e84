# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one error of the torchrun module's decisions (start.py, firewall.py, jobdir.py, wait.py)."""
from __future__ import annotations


class JobError(Exception):
    """What the module fails with: its message, whole (it names the node). job.py, where the module is, returns
    it as ``msg`` beside the result gathered so far (job id, job directory, what the start or the wait found)."""
