# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: an interface's facts and address by its name (see interface_facts.yml, interface_address.yml,
interfaces_with_address.yml); the rule is plugins/module_utils/_nccl/interfaces.py."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._nccl import interfaces as _interfaces


def _facts(facts, name):
    if not isinstance(facts, dict):
        raise AnsibleFilterError("%s expects a host's ansible_facts or hostvars (a dict), got %s"
                                 % (name, type(facts).__name__))
    return facts


def interface_facts(facts, name):
    """ansible_facts (or hostvars) + interface name -> that interface's facts, {} when there is none."""
    return _interfaces.interface_facts(_facts(facts, "interface_facts"), name)


def interface_address(facts, name, version=4):
    """ansible_facts (or hostvars) + interface name -> its IPv4 (or global IPv6) address, '' when none."""
    return _interfaces.interface_address(_facts(facts, "interface_address"), name, version)


def interfaces_with_address(facts, address):
    """ansible_facts (or hostvars) + IPv4 address -> names of the interfaces that hold it."""
    return _interfaces.interfaces_with_address(_facts(facts, "interfaces_with_address"), address)


class FilterModule:
    """multinode.training interface filters."""

    def filters(self):
        return {"interface_facts": interface_facts, "interface_address": interface_address,
                "interfaces_with_address": interfaces_with_address}
