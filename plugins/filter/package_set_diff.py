# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: packages whose version differs between the nodes' venvs, and the nodes whose venv is not the
job requirements' (see package_set_diff.yml, package_lock_problems.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._node.preflight import differences, probe_packages
from ansible_collections.multinode.training.plugins.module_utils._wheel.requirements import lock_problems, requirement_groups


def package_set_diff(sets):
    """{node: [name==version]} -> ['pkg: pkg==1 on node2; not installed on node1', ...]."""
    if not isinstance(sets, dict):
        raise AnsibleFilterError("package_set_diff expects a dict {node: [name==version]}, got %s"
                                 % type(sets).__name__)
    return differences({str(node): [str(s) for s in specs or []] for node, specs in sets.items()})


def _read(path):
    """A requirements file a ``-r <path>`` item includes, read on the controller (where filters run)."""
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        raise AnsibleFilterError("package_lock_problems: requirements: -r %s: cannot be read on the controller: %s"
                                 % (path, exc))


def package_lock_problems(probes, venv="", lock=None, requirements=None):
    """{node: train_node (probe) result} -> ['node1: the venv ... does not hold ...: pkg: ...', ...]."""
    if not isinstance(probes, dict):
        raise AnsibleFilterError("package_lock_problems expects {node: train_node (probe) result}, got %s"
                                 % type(probes).__name__)
    packages = probe_packages(probes)
    lines = [line for _source, group in requirement_groups([str(s) for s in requirements or []], "requirements", _read)
             for line in group]
    return lock_problems(packages, venv, [str(s) for s in lock or []], lines)


class FilterModule:
    """multinode.training package set filters."""

    def filters(self):
        return {"package_set_diff": package_set_diff, "package_lock_problems": package_lock_problems}
