# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for multinode.training.train_job_report: runs on the controller, in ansible-playbook's own
python (the one with matplotlib from requirements.txt); the work is _report.job.report."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.multinode.training.plugins.module_utils._report.job import ARGUMENT_SPEC, ReportError, report


class ActionModule(ActionBase):
    _supports_check_mode = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(ARGUMENT_SPEC)
        try:
            result.update(report(args), changed=True)
        except (ReportError, OSError, ImportError) as exc:
            result.update(failed=True, msg="job report: %s" % exc)
        return result
