"""One uid for the job's account on every node (_train.account)."""
from __future__ import annotations

import pytest

from ansible_collections.multinode.training.plugins.module_utils._train import account as a

# /etc/login.defs of Debian 12 (shadow 4.13), its SYS_UID lines commented as shipped; RHEL 9 sets them
DEBIAN_LOGIN_DEFS = "#SYS_UID_MIN\t\t  100\n#SYS_UID_MAX\t\t  999\nUID_MIN\t\t\t 1000\n"
RHEL_LOGIN_DEFS = "UID_MIN                  1000\nSYS_UID_MIN               201\nSYS_UID_MAX               999\n"


def test_the_system_uid_range_from_login_defs_else_useradds_own():
    assert a.sys_uid_range(DEBIAN_LOGIN_DEFS) == (101, 999)
    assert a.sys_uid_range(RHEL_LOGIN_DEFS) == (201, 999)
    assert a.sys_uid_range("") == (101, 999)


def test_account_facts_name_the_account_its_uid_and_the_system_uids_others_hold():
    entries = [("root", 0), ("messagebus", 100), ("systemd-network", 998), ("mtrain", 997), ("alice", 1000),
               ("nobody", 65534)]
    assert a.account_facts("", entries, DEBIAN_LOGIN_DEFS) == {
        "name": "mtrain", "uid": 997, "used": [998], "sys_uid_min": 101, "sys_uid_max": 999}
    assert a.account_facts("trainer", entries, RHEL_LOGIN_DEFS)["uid"] is None


def facts(uid, used=()):
    return {"name": "mtrain", "uid": uid, "used": list(used), "sys_uid_min": 101, "sys_uid_max": 999}


@pytest.mark.parametrize("accounts, create, expected", [
    # nowhere yet: the highest system uid free on every node (as useradd -r picks on one)
    ({"n1": facts(None, [999]), "n2": facts(None, [998])}, True, {"uid": 997, "error": ""}),
    # on some nodes: theirs, where it is free
    ({"n1": facts(996), "n2": facts(None, [999]), "n3": facts(996)}, True, {"uid": 996, "error": ""}),
    # everywhere with one uid: nothing to create
    ({"n1": facts(996), "n2": facts(996)}, True, {"uid": 996, "error": ""}),
    # an account the role does not create (train_user): only the same uid wherever it exists
    ({"n1": facts(1500), "n2": facts(None)}, False, {"uid": 1500, "error": ""}),
    # nodes without the fact (a play that did not gather it): nothing to decide
    ({"n1": {}, "n2": {}}, True, {"uid": None, "error": ""}),
])
def test_one_uid_for_the_account_on_every_node(accounts, create, expected):
    assert a.decide_uid(accounts, create) == expected


def test_uids_that_differ_are_refused_naming_the_nodes():
    out = a.decide_uid({"n1": facts(997), "n2": facts(997), "n3": facts(998)}, True)
    assert out["uid"] is None
    assert out["error"].startswith("train_user=mtrain: its uid differs between the nodes (uid 997 on n1, "
                                   "n2; uid 998 on n3): ")
    assert "; valid: the same uid on every node (usermod -u on the others), or train_user=" in out["error"]


def test_its_uid_taken_by_another_account_where_it_would_be_created_is_refused():
    out = a.decide_uid({"n1": facts(997), "n2": facts(None, [997])}, True)
    assert out == {"uid": None, "error": "train_user=mtrain: has uid 997 on n1, which another account holds on n2, "
                   "where the role would create it; valid: the uid free on those nodes, or train_user=<an existing "
                   "account with one uid everywhere>"}


def test_no_free_system_uid_anywhere_is_refused():
    narrow = dict(facts(None, [101, 102]), sys_uid_min=101, sys_uid_max=102)
    assert a.decide_uid({"n1": narrow}, True)["error"].startswith("train_user=mtrain: no system uid (101-102) is free")
