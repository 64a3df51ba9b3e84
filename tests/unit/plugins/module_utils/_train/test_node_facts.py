"""Unit tests for module node_facts (plugins/module_utils/_train/node_facts.py): the facts train.yml reads,
built from ``ip -j`` output, must equal what ``setup`` (gather_subset network, user) gathers.

tests/fixtures/facts/netns/ was recorded in one network namespace holding veth interfaces named
eth0.100 (two IPv4 addresses: a primary and a secondary), ib-0, ib0, bond0, ens1f0 (IPv6 only) and
their peers p1-p5, with a default route through bond0: ``ip -j -d addr show`` (ip_addr.json), ``ip -j
-4 route get 8.8.8.8`` (route4.json; the IPv6 one failed: no route), and ansible-core 2.19's setup
there (setup.json: its network and user facts).
"""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.multinode.training.plugins.module_utils._nccl import interfaces as _interfaces
from ansible_collections.multinode.training.plugins.module_utils._train import node_facts as nf

NETNS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "facts", "netns")


def _read(name):
    with open(os.path.join(NETNS, name)) as handle:
        return handle.read()


@pytest.fixture(name="facts")
def _facts():
    return nf.network_facts(_read("ip_addr.json"), _read("route4.json"), None)


def test_every_network_fact_equals_setups_but_the_link_speed(facts):
    setup = json.loads(_read("setup.json"))
    for key, value in facts.items():
        if key in ("ansible_interfaces", "ansible_all_ipv4_addresses", "ansible_all_ipv6_addresses"):
            assert sorted(value) == sorted(setup[key]), key
        elif isinstance(value, dict) and "device" in value:
            assert value == {k: v for k, v in setup[key].items() if k != "speed"}, key
        else:
            assert value == setup[key], key
    # every interface setup found is here, under the same fact key
    assert {k for k in setup if not k.startswith(("ansible_user", "ansible_real", "ansible_effective"))} == set(facts)


def test_the_interface_rule_finds_vlan_bond_ib_names_in_these_facts(facts):
    """The one interface rule (_interfaces) reads these facts as it reads setup's."""
    assert _interfaces.interface_address(facts, "eth0.100") == "10.10.0.5"
    assert _interfaces.interface_address(facts, "ib-0") == "10.20.0.7"
    assert _interfaces.interface_address(facts, "ib0") == "10.30.0.8"
    assert _interfaces.interface_address(facts, "bond0") == "192.168.50.2"
    assert _interfaces.interface_address(facts, "bond0", 6) == "2001:db8::7"
    assert _interfaces.interface_address(facts, "ens1f0", 6) == "fd00::5"
    assert _interfaces.interface_address(facts, "ens1f0") == ""
    assert _interfaces.interfaces_with_address(facts, "10.10.0.6") == ["eth0.100"]  # the secondary


def test_default_route_and_no_ipv6_route(facts):
    assert facts["ansible_default_ipv4"]["interface"] == "bond0"
    assert facts["ansible_default_ipv4"]["gateway"] == "192.168.0.1"
    assert facts["ansible_default_ipv4"]["netmask"] == "255.255.0.0"
    assert facts["ansible_default_ipv6"] == {}


def test_loopback_is_not_in_all_addresses(facts):
    assert "127.0.0.1" not in facts["ansible_all_ipv4_addresses"]
    assert "::1" not in facts["ansible_all_ipv6_addresses"]
    assert facts["ansible_lo"]["type"] == "loopback" and "macaddress" not in facts["ansible_lo"]


def test_bond_and_bridge_kinds_name_the_type():
    link = {"ifname": "bond0", "flags": ["UP"], "mtu": 9000, "link_type": "ether", "address": "aa:bb:cc:dd:ee:ff",
            "linkinfo": {"info_kind": "bond"}, "addr_info": []}
    assert nf.interface_facts(link)[1]["type"] == "bonding"
    link["linkinfo"]["info_kind"] = "bridge"
    assert nf.interface_facts(link)[1]["type"] == "bridge"
    link = {"ifname": "ib0", "flags": [], "mtu": 2044, "link_type": "infiniband", "address": "00:00:10:29", "addr_info": []}
    assert nf.interface_facts(link)[1] == {"device": "ib0", "active": False, "mtu": 2044, "promisc": False,
                                           "type": "infiniband", "macaddress": "00:00:10:29"}


@pytest.mark.parametrize("text", ["", "not json", "{}", "[1]", '[{"flags": []}]'])
def test_output_that_cannot_be_read_is_refused(text):
    with pytest.raises(nf.NodeFactsError):
        nf.network_facts(text)


def test_user_facts_are_this_process():
    facts = nf.user_facts()
    assert facts["ansible_effective_user_id"] == os.geteuid() and facts["ansible_real_group_id"] == os.getgid()
    assert facts["ansible_user_id"]


class _IpModule(object):
    """The members run_module uses: ip's answers from the recorded netns, or no ip at all."""

    def __init__(self, ip="/usr/sbin/ip", addr_rc=0, account=None):
        self.ip, self.addr_rc, self.calls, self.result = ip, addr_rc, [], None
        self.params = {"account": account}

    def get_bin_path(self, name):
        return self.ip

    def run_command(self, argv):
        self.calls.append(argv)
        if argv[-2:] == ["addr", "show"]:
            return self.addr_rc, _read("ip_addr.json"), ""
        return (0, _read("route4.json"), "") if argv[2] == "-4" else (2, "", "no route")

    def exit_json(self, **result):
        self.result = result
        raise SystemExit(0)


def test_run_module_takes_ip_s_facts_and_says_so(monkeypatch):
    monkeypatch.setattr(nf, "setup_facts", lambda module: pytest.fail("setup's collectors ran"))
    module = _IpModule()
    with pytest.raises(SystemExit):
        nf.run_module(module)
    assert module.result["facts_source"] == "ip"
    assert module.result["ansible_facts"] == dict(nf.network_facts(_read("ip_addr.json"), _read("route4.json"), None),
                                                  multinode_training_platform=nf.platform_facts(), **nf.user_facts())
    assert len(module.calls) == 3


@pytest.mark.parametrize("module", [_IpModule(ip=None), _IpModule(addr_rc=1)])
def test_run_module_falls_back_to_setup_without_ip_or_when_it_fails(monkeypatch, module):
    monkeypatch.setattr(nf, "setup_facts", lambda module: {"ansible_user_id": "from setup"})
    with pytest.raises(SystemExit):
        nf.run_module(module)
    assert module.result == {"changed": False, "facts_source": "setup", "ansible_facts": {
        "ansible_user_id": "from setup", "multinode_training_platform": nf.platform_facts()}}


def test_the_platform_is_this_machines_arch_and_glibc():
    """What role wheel_distribute resolves job requirements for (_wheel/node_platform.py), no subprocess."""
    import platform
    assert nf.platform_facts() == {"machine": platform.machine(),
                                   "glibc": platform.libc_ver()[1] if platform.libc_ver()[0] == "glibc" else None}


def test_the_job_accounts_facts_with_account(monkeypatch):
    """With O(account), the account's facts beside the network and user facts (this host's own passwd: root's
    uid 0, a system range from its login.defs)."""
    monkeypatch.setattr(nf, "setup_facts", lambda module: pytest.fail("setup's collectors ran"))
    module = _IpModule(account="root")
    with pytest.raises(SystemExit):
        nf.run_module(module)
    account = module.result["ansible_facts"]["multinode_training_account"]
    assert account["name"] == "root" and account["uid"] == 0
    assert account["sys_uid_min"] <= account["sys_uid_max"]
    assert all(account["sys_uid_min"] <= uid <= account["sys_uid_max"] for uid in account["used"])
