# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job report's entry (the action train_job_report): check the arguments, build the model from the
collected job directories, write ``<run dir>/report.html``, and return what the play prints."""
from __future__ import annotations

import copy
import os

from ansible_collections.multinode.training.plugins.module_utils._report import html, steps, straggler, timeline


# The action's options: plugins/action/train_job_report.py validates the task's arguments against them,
# plugins/modules/train_job_report.py documents them.
ARGUMENT_SPEC = dict(
    run_dir=dict(type="path", required=True),
    hosts=dict(type="list", elements="str", default=[]),
    pattern=dict(type="str", default=""),
    ratio=dict(type="float", default=straggler.RATIO),
    header=dict(type="dict", default={}),
    dest=dict(type="path", default=""),
    elastic_lost=dict(type="list", elements="str", default=[]),
)


class ReportError(Exception):
    pass


def check(args):
    """The arguments with defaults, or ReportError naming the bad one."""
    out = {name: copy.deepcopy(spec["default"]) for name, spec in ARGUMENT_SPEC.items() if "default" in spec}
    out.update({k: v for k, v in args.items() if v is not None})
    if not out.get("run_dir") or not os.path.isdir(out["run_dir"]):
        raise ReportError("run_dir %r is not a directory (the collected job)" % out.get("run_dir"))
    if out["pattern"] and steps.pattern_problem(out["pattern"]):
        raise ReportError("pattern %r %s" % (out["pattern"], steps.pattern_problem(out["pattern"])))
    if float(out["ratio"]) <= 1:
        raise ReportError("ratio %r must be over 1" % out["ratio"])
    out["ratio"] = float(out["ratio"])
    out["dest"] = out["dest"] or os.path.join(out["run_dir"], "report.html")
    return out


def failure_line(model):
    failure = model["first_failure"]
    if not failure:
        return ""
    return "first failure: rank %s on %s (exit code %s): %s" % (
        failure["rank"], failure["host"], failure["exitcode"], failure["message"])


def elastic_warnings(lost, hosts):
    """The nodes an elastic job finished without (``lost``) -> the play's warning naming them."""
    lost = list(lost or [])
    if not lost:
        return []
    rest = [host for host in hosts if host not in lost]
    return ["node(s) %s lost during the job: the elastic job finished without them%s (the report lists them)"
            % (", ".join(lost), " on " + ", ".join(rest) if rest else "")]


def report(args):
    """Write the report; {path, size, straggler_line, stragglers, failure_line, sampler_cost, lost},
    and ``warnings`` naming the nodes an elastic job finished without (``elastic_lost``)."""
    args = check(args)
    model = timeline.build(args["run_dir"], args["hosts"], args["pattern"] or None, args["ratio"])
    size = html.write(model, args["dest"], args["header"])
    verdict = model["straggler"]
    out = {"path": args["dest"], "size": size, "straggler_line": verdict["line"],
           "stragglers": [{"node": node, "ratio": ratio} for node, ratio in verdict["stragglers"]],
           "failure_line": failure_line(model), "sampler_cost": model["sampler_cost"], "lost": model["lost"]}
    warnings = elastic_warnings(args["elastic_lost"], args["hosts"])
    if warnings:
        out["warnings"] = warnings
    return out
