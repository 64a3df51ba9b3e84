# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for multinode.training.slurm_job: with follow=true, poll the module until the job has left the queue.

Each poll is one module call on the submit host (it waits up to ``wait`` seconds and touches the
controller heartbeat the submit host's guard watches); between polls the controller prints the
job's state, nodes and elapsed time, and once the ranks print steps the latest step and the slowest node
so far (_torchrun.live.ClusterLive); with ``stream_ranks``, the lines those ranks printed, as
``<node>:<rank> <line>``, as they come (a poll returns about a second after they printed). One task
for any job length: no include recursion (which
exhausts Python's stack after a few hundred polls), no retry messages.
"""
from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.multinode.training.plugins.module_utils._torchrun.bounded import POLL_SLACK, PollTimeout, bounded
from ansible_collections.multinode.training.plugins.module_utils._torchrun.live import ClusterLive, ratio_of

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        follow = args.pop("follow", False)
        module = "multinode.training.slurm_job"
        if not (follow and args.get("state", "status") == "status"):
            result.update(self._execute_module(module_name=module, module_args=args, task_vars=task_vars))
            return result
        host = task_vars.get("inventory_hostname") if task_vars else None
        # each node's latest step and the slowest node so far, from the samples of the nodes' ranks
        live = ClusterLive(args.get("step_pattern"), ratio_of(args.get("straggler_ratio")))
        try:
            while True:
                polled = self._poll(module, args, task_vars, host)  # a host that does not answer: failed
                # the streamed ranks' new lines, as the torchrun action prints them
                for node, rank, text in polled.pop("stream", None) or []:
                    display.display("%s:%s %s" % (node, rank, text))
                args["stream_offsets"] = polled.pop("stream_offsets", None) or args.get("stream_offsets") or {}
                if polled.get("failed") or polled.get("done"):
                    result.update(polled)
                    return result
                for notice in live.notices(polled.get("live")):
                    display.display("[%s] %s" % (host, notice))
                display.display("[%s] %s%s" % (host, polled.get("progress"), live.line(polled.get("live"))))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _poll(self, module, args, task_vars, host):
        """One poll of the submit host, bounded by its window (``wait``) plus O(poll_slack) (POLL_SLACK when unset)
        -> its answer, or a failure naming the host that did not answer."""
        limit = int(args.get("wait") or 10) + int(args.get("poll_slack") or POLL_SLACK)  # the window, then the slack
        try:
            return bounded(lambda: self._execute_module(module_name=module, module_args=args, task_vars=task_vars),
                           limit)
        except PollTimeout:
            return {"failed": True, "msg": "the submit host %s did not answer a poll within %d s (frozen, or the "
                    "module stuck on it)" % (host, limit)}
