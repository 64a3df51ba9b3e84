# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: the root cause of a failed job across its nodes (train_root_cause.yml), the play's report of a
finished job (train_report.yml), whether a launch ended the usual way (train_all_home.yml) and the nodes an
elastic job finished without (train_elastic_lost.yml); the logic is
plugins/module_utils/_node/torchrun.py."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import all_home, cross_node_root_cause, elastic_lost, job_report
from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import LOST_AFTER


def train_root_cause(results, node_errors=None):
    """{node: torchrun result} + {failed node: error line} -> {root, line}."""
    if not isinstance(results, dict) or not isinstance(node_errors or {}, dict):
        raise AnsibleFilterError("train_root_cause expects {node: result} and {node: error line}, got %s and %s"
                                 % (type(results).__name__, type(node_errors).__name__))
    return cross_node_root_cause(results, node_errors)


def train_report(results, hosts, failed_nodes=None, node_errors=None, job_id="", endpoint="", runs_dir="", log_dir="",
                 lost_timeout=LOST_AFTER, nnodes=""):
    """{node: torchrun result} + the play's hosts -> {lines, root_line, rank0_log, lost}."""
    if not isinstance(results, dict) or not isinstance(hosts, (list, tuple)) or \
            not isinstance(node_errors or {}, dict):
        raise AnsibleFilterError("train_report expects {node: result}, a list of hosts and {node: error line}, "
                                 "got %s, %s and %s" % (type(results).__name__, type(hosts).__name__,
                                                        type(node_errors).__name__))
    return job_report(results, list(hosts), failed_nodes or [], node_errors or {}, job_id, endpoint, runs_dir,
                      log_dir, lost_timeout, nnodes)


def train_all_home(results, hosts, failed_nodes=None):
    """{node: torchrun result} + the play's hosts + the failed nodes -> True when no node failed and every
    node's logs came home with the wait."""
    if not isinstance(results, dict) or not isinstance(hosts, (list, tuple)) or \
            not isinstance(failed_nodes or [], (list, tuple)):
        raise AnsibleFilterError("train_all_home expects {node: result}, a list of hosts and a list of failed "
                                 "nodes, got %s, %s and %s" % (type(results).__name__, type(hosts).__name__,
                                                               type(failed_nodes).__name__))
    return all_home(results, hosts, failed_nodes or [])


def train_elastic_lost(results, hosts, failed_nodes=None):
    """{node: torchrun result} + the play's hosts + the failed nodes -> the failed nodes an elastic job
    finished without ([] when that is not what happened)."""
    if not isinstance(results, dict) or not isinstance(hosts, (list, tuple)) or \
            not isinstance(failed_nodes or [], (list, tuple)):
        raise AnsibleFilterError("train_elastic_lost expects {node: result}, a list of hosts and a list of failed "
                                 "nodes, got %s, %s and %s" % (type(results).__name__, type(hosts).__name__,
                                                               type(failed_nodes).__name__))
    return elastic_lost(results, list(hosts), list(failed_nodes or []))


class FilterModule:
    """multinode.training job report filter."""

    def filters(self):
        return {"train_root_cause": train_root_cause, "train_report": train_report, "train_all_home": train_all_home,
                "train_elastic_lost": train_elastic_lost}
