# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for multinode.training.torchrun: with follow=true and state=finished, poll until the job ended.

Each poll is one module call (O(state=status)) on the node: it renews the job's controller lease
(``<job dir>/lease``, watched by the node's watcher) and returns the node's progress, which the
controller prints: running ranks, restarts, seconds since the start, the last line of local rank 0.
When the job has ended on the node, one O(state=finished) call returns the full result. If the
controller goes away, the polls stop and the nodes stop the job when the lease runs out. One task
for any job length: no include recursion, no retry messages.
"""
from __future__ import annotations

import os
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        follow = args.pop("follow", False)
        poll = float(args.pop("poll", 10) or 10)
        module = "multinode.training.torchrun"
        if not (follow and args.get("state", "finished") == "finished") or self._task.check_mode:
            result.update(self._execute_module(module_name=module, module_args=args, task_vars=task_vars))
            return result
        host = task_vars.get("inventory_hostname") if task_vars else None
        status_args = {"state": "status", "job_id": args.get("job_id") or args.get("rdzv_id"),
                       "log_dir": args.get("log_dir") or "/var/log/multinode-training"}
        parent = os.getppid()
        try:
            last_print = 0.0
            while True:
                if os.getppid() != parent:
                    # ansible-playbook is gone (killed): stop renewing the lease, the nodes end the job.
                    result.update(failed=True, msg="the controller (ansible-playbook) went away")
                    return result
                polled = self._execute_module(module_name=module, module_args=status_args, task_vars=task_vars)
                if polled.get("failed"):
                    result.update(polled)
                    return result
                if polled.get("done"):
                    break
                now = time.time()
                if now - last_print >= poll - 0.5:
                    display.display("[%s] %s" % (host, polled.get("progress")))
                    last_print = now
                # Poll faster than the progress lines: a stop is seen within seconds.
                time.sleep(min(poll, 3.0))
            result.update(self._execute_module(module_name=module, module_args=args, task_vars=task_vars))
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
