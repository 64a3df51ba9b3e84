# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network interfaces in Ansible's facts: the one rule from an interface name to its facts.

Ansible's network facts hold one entry per interface, under a key derived from its name:
``:`` becomes ``_`` (the Linux collector) and ``-`` becomes ``_`` (the fact namespace), while
``.`` stays (recorded from ansible-core's setup on veth interfaces named ``eth0.100``,
``ib-0``, ``bond0``, ``ens1f0``, ``ib0``: tests/fixtures/facts/). Each entry names its
interface in ``device``. Used by roles train and nccl_tuning through the filters of
plugins/filter/interfaces.py.
"""
from __future__ import annotations


def fact_key(name):
    """Interface name -> its key in ansible_facts (``eth0.100`` -> ``eth0.100``, ``ib-0`` -> ``ib_0``)."""
    return str(name).replace(":", "_").replace("-", "_")


def interface_facts(facts, name):
    """The facts of interface ``name`` ({} when the node has no such interface).

    ``facts`` is a host's ansible_facts (keys without the ``ansible_`` prefix) or its hostvars
    (keys with it). The entry found must name the interface in ``device`` (``:`` and ``-``
    spelled ``_`` there too for aliases), so ``eth0_100`` never stands in for ``eth0.100``.
    """
    if not name or not isinstance(facts, dict):
        return {}
    key = fact_key(name)
    for candidate in (key, "ansible_" + key):
        entry = facts.get(candidate)
        if isinstance(entry, dict) and fact_key(entry.get("device", "")) == key:
            return entry
    return {}


def global_ipv6(entry):
    return [a.get("address") for a in entry.get("ipv6") or [] if a.get("scope") == "global" and a.get("address")]


def interface_address(facts, name, version=4):
    """The interface's IPv4 address, or its first global IPv6 address with ``version=6``; '' when none."""
    entry = interface_facts(facts, name)
    if int(version) == 6:
        addresses = global_ipv6(entry)
        return addresses[0] if addresses else ""
    return (entry.get("ipv4") or {}).get("address") or ""


def interfaces_with_address(facts, address):
    """Names of the interfaces whose IPv4 address (primary or secondary) is ``address``, sorted."""
    if not address or not isinstance(facts, dict):
        return []
    names = facts.get("interfaces") if "interfaces" in facts else facts.get("ansible_interfaces")
    found = []
    for name in names or []:
        entry = interface_facts(facts, name)
        addresses = [(entry.get("ipv4") or {}).get("address")] + [
            a.get("address") for a in entry.get("ipv4_secondaries") or []]
        if address in addresses:
            found.append(entry.get("device") or name)
    return sorted(found)
