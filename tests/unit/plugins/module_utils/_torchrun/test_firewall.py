"""Unit tests for the job's firewall guard's decisions (plugins/module_utils/_torchrun/firewall.py): what the nft
calls of job.py are given and what their answers mean."""
from __future__ import annotations

import json

import pytest

from ansible_collections.multinode.training.plugins.module_utils._torchrun import firewall
from ansible_collections.multinode.training.plugins.module_utils._torchrun.errors import JobError
from ansible_collections.multinode.training.plugins.module_utils._train.security import table_name

ARGV = ["py", "-m", "torch.distributed.run", "--rdzv_endpoint", "10.0.0.1:29400", "train.py"]


def _refusal(call, *args):
    with pytest.raises(JobError) as refused:
        call(*args)
    return str(refused.value)


def test_usable_nft_needs_the_tool_and_root():
    assert firewall.usable_nft("/usr/sbin/nft", "n1", 0) == "/usr/sbin/nft"
    assert _refusal(firewall.usable_nft, None, "n1", 0) == (
        "firewall_allow (train_firewall) on n1: needs nft (package nftables) and root; found nft=None, uid 0")
    assert _refusal(firewall.usable_nft, "/usr/sbin/nft", "n1", 1000) == (
        "firewall_allow (train_firewall) on n1: needs nft (package nftables) and root; found nft=/usr/sbin/nft, "
        "uid 1000")


def test_guard_rules_let_the_members_reach_the_rendezvous_and_hub_ports():
    params = {"watch": {"hub": True, "port": 29401}, "firewall_allow": ["10.0.0.2", "10.0.0.1"], "firewall_ttl": 60,
              "rdzv_endpoint": "10.0.0.1:29400"}
    rules, ports = firewall.guard_rules("mt_j1", ARGV, params, "n1")
    assert ports == [29400, 29401]
    assert rules.startswith("add table inet mt_j1\n")
    assert "elements = { 10.0.0.1, 10.0.0.2 }" in rules and "29400 timeout 60s, 29401 timeout 60s" in rules


def test_guard_rules_name_a_member_that_is_no_address():
    params = {"watch": None, "firewall_allow": ["node-b"], "firewall_ttl": 60, "rdzv_endpoint": "10.0.0.1:29400"}
    assert _refusal(firewall.guard_rules, "mt_j1", ARGV, params, "n1") == (
        "firewall_allow on n1: firewall member 'node-b': not an IP address; valid: the nodes' addresses "
        "(rdzv_endpoint 10.0.0.1:29400)")


def test_check_applied_passes_nfts_error_on():
    assert firewall.check_applied(0, "", "n1") is None
    assert _refusal(firewall.check_applied, 1, "Error: Could not process rule\n", "n1") == (
        "train_firewall on n1: nft refused the rule: Error: Could not process rule")


def test_job_table_finds_the_jobs_own_table_only():
    mine, other = table_name("j1"), table_name("j2")
    listed = json.dumps({"nftables": [{"metainfo": {}}, {"table": {"family": "inet", "name": other}},
                                      {"table": {"family": "ip", "name": mine}},
                                      {"table": {"family": "inet", "name": mine}}]})
    assert firewall.job_table(0, listed, "j1") == mine
    assert firewall.job_table(0, listed, "j3") is None
    assert firewall.job_table(1, listed, "j1") is None  # nft failed: nothing to delete
    assert firewall.job_table(0, "not json", "j1") is None
    assert firewall.not_deleted("j1", mine, "n1", "Error: busy\n") == (
        "job j1: cannot delete nftables table %s on n1: Error: busy" % mine)
