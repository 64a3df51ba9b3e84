"""Unit tests for plugins/module_utils/_nccl/interfaces.py and the filters of plugins/filter/interfaces.py.

tests/fixtures/facts/network_vlan_bond_ib.json: ansible_facts (network subset) recorded with
ansible-core's setup module from a bookworm container whose extra interfaces (veth pairs)
are named eth0.100, bond0, ens1f0, ib0 and ib-0: the fact keys keep '.', spell '-' as '_'
(ib-0 -> ib_0), and each entry names its interface in `device`.
"""
from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.filter import interfaces as filters
from ansible_collections.multinode.training.plugins.module_utils._nccl import interfaces as ifaces
from tests.unit.conftest import FIXTURES

FACTS = json.loads((FIXTURES / "facts" / "network_vlan_bond_ib.json").read_text())
HOSTVARS = {"ansible_" + key: value for key, value in FACTS.items()}


@pytest.mark.parametrize("name, key", [
    ("eth0", "eth0"), ("ens1f0", "ens1f0"), ("eth0.100", "eth0.100"), ("bond0", "bond0"), ("ib0", "ib0"),
    ("ib-0", "ib_0"), ("eth0:1", "eth0_1"),
])
def test_fact_key(name, key):
    assert ifaces.fact_key(name) == key


@pytest.mark.parametrize("name, address", [
    ("eth0", "172.17.0.16"), ("ens1f0", "10.2.0.5"), ("eth0.100", "10.100.0.5"), ("bond0", "10.1.0.5"),
    ("ib0", "10.4.0.5"), ("ib-0", "10.3.0.5"),
])
@pytest.mark.parametrize("facts", [FACTS, HOSTVARS], ids=["ansible_facts", "hostvars"])
def test_interface_address_of_recorded_facts(facts, name, address):
    assert ifaces.interface_address(facts, name) == address
    assert filters.interface_address(facts, name) == address
    assert filters.interface_facts(facts, name)["device"] == name


@pytest.mark.parametrize("name", ["eth0_100", "eth9", "", None, "p1"])
def test_no_address_for_unknown_names_or_interfaces_without_one(name):
    # eth0_100 is not how Ansible spells eth0.100: no stand-in
    assert ifaces.interface_address(FACTS, name) == ""
    if name in ("eth0_100", "eth9", "", None):
        assert ifaces.interface_facts(FACTS, name) == {}


def test_an_entry_for_another_device_is_not_taken():
    facts = {"eth0_100": {"device": "eth0_100", "ipv4": {"address": "10.9.9.9"}}}
    assert ifaces.interface_facts(facts, "eth0.100") == {}
    assert ifaces.interface_address(facts, "eth0_100") == "10.9.9.9"


def test_global_ipv6():
    addresses = [{"address": "fe80::1", "scope": "link"}, {"address": "fd00::11", "scope": "global"}]
    facts = {"ib0": {"device": "ib0", "ipv6": addresses}}
    assert ifaces.interface_address(facts, "ib0", 6) == "fd00::11"
    assert ifaces.interface_address(facts, "ib0", "6") == "fd00::11"
    assert ifaces.interface_address(facts, "ib0", 4) == ""
    assert ifaces.interface_address(FACTS, "eth0", 6) == ""


def test_interfaces_with_address():
    assert ifaces.interfaces_with_address(FACTS, "10.100.0.5") == ["eth0.100"]
    assert filters.interfaces_with_address(HOSTVARS, "10.3.0.5") == ["ib-0"]
    assert ifaces.interfaces_with_address(FACTS, "192.0.2.1") == []
    assert ifaces.interfaces_with_address(FACTS, "") == []
    secondary = {"interfaces": ["bond0"], "bond0": {"device": "bond0", "ipv4": {"address": "10.0.0.1"},
                                                    "ipv4_secondaries": [{"address": "10.0.0.2"}]}}
    assert ifaces.interfaces_with_address(secondary, "10.0.0.2") == ["bond0"]


def test_filters_refuse_what_is_not_facts():
    with pytest.raises(AnsibleFilterError, match="interface_address expects"):
        filters.interface_address("eth0", "eth0")
    assert set(filters.FilterModule().filters()) == {"interface_facts", "interface_address", "interfaces_with_address"}
