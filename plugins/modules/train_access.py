#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_access
short_description: Check, before a job starts, that its user can run it and its port can be guarded
version_added: 0.1.0
description:
  - One read-only round trip per node for the security preflight of role multinode.training.train.
  - Resolves the job's account (uid, primary and supplementary groups, home), then checks as that
    account - in a child process that switched to its uid, gid and groups - that it can execute,
    read, enter or write the given paths (the venv's python, the training code, the log directory).
    A path that does not exist for the module's own user is left out (preflight reports it as missing).
  - Finds C(nft) and C(iptables), tries the job's nftables rule in nft's check mode (C(nft -c)), and decides whether this node guards the rendezvous port
    (O(firewall)); refuses a rendezvous port that is one of ssh's ports (C(Port) lines of
    O(sshd_config), 22 when there are none, and O(ssh_ports)).
  - Every problem is returned in RV(problems), one line naming the variable, the value and what is valid;
    the module itself fails only on unusable options.
author:
  - multinode.training maintainers (@multinode)
options:
  user:
    description:
      - The job's account (train_user). It must exist.
      - Unset - only the port and firewall checks (before the account is created).
    type: str
  group:
    description: Primary group (train_group); unset - the account's own.
    type: str
  checks:
    description:
      - What the account must be able to do - dicts with C(var) (the variable, for messages), C(path) and
        C(need) - V(x) execute, V(r) read, V(rx) enter a directory, V(w) write.
    type: list
    elements: dict
    default: []
  port:
    description: The rendezvous port (train_rdzv_port).
    type: int
    required: true
  ssh_ports:
    description: More ports that ssh uses on this node (for example the connection's C(ansible_port)).
    type: list
    elements: int
    default: []
  sshd_config:
    description: sshd configuration whose C(Port) lines name ssh's ports.
    type: path
    default: /etc/ssh/sshd_config
  firewall:
    description: train_firewall - V(auto), V(true) or V(false).
    type: str
    default: auto
extends_documentation_fragment:
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: May mtrain run the job here, and can this node guard the rendezvous port?
  multinode.training.train_access:
    user: mtrain
    checks:
      - {var: train_python, path: /opt/multinode-training/venv/bin/python, need: x}
      - {var: train_script, path: /opt/multinode-training/code/smoke_train.py, need: r}
    port: 29400
    ssh_ports: [22]
    firewall: auto
  register: access

- name: Fail naming node and variable
  ansible.builtin.assert:
    that: access.problems | length == 0
    fail_msg: "{{ inventory_hostname }}: {{ access.problems | join('; ') }}"
"""

RETURN = r"""
account:
  description: The account - C(name), C(uid), C(gid), C(groups) (supplementary gids), C(group_names), C(home).
  returned: when the account exists
  type: dict
access:
  description: Per check - C(var), C(path), C(need), C(ok), C(error).
  returned: always
  type: list
  elements: dict
nft:
  description: Path of nft, or null.
  returned: always
  type: str
iptables:
  description: Path of iptables, or null.
  returned: always
  type: str
firewall:
  description: C(enabled) (this node can guard the port) and C(note) (what that means).
  returned: always
  type: dict
ssh_ports:
  description: Ports ssh uses here.
  returned: always
  type: list
  elements: int
problems:
  description: One line per problem, naming variable, value and what is valid; empty when all is well.
  returned: always
  type: list
  elements: str
"""

import grp
import json
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._train_security import (
    SecurityError,
    check_access,
    decide_firewall,
    parse_sshd_ports,
    port_problem,
    render_table,
    table_name,
)

_MODES = {"x": os.X_OK, "r": os.R_OK, "rx": os.R_OK | os.X_OK, "w": os.W_OK}


def _why(path):
    """Why a path cannot be used (as the current process): the error of stat, or None."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.strerror
    return None


def _probe(checks):
    return [(os.access(c["path"], _MODES[c["need"]]), _why(c["path"])) for c in checks]


def access_as(account, checks):
    """Run os.access for every check in a child that switched to the account; [(ok, error)]."""
    if os.geteuid() == account["uid"] or os.geteuid() != 0:
        return _probe(checks)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        try:
            os.setgroups(account["groups"])
            os.setgid(account["gid"])
            os.setuid(account["uid"])
            out = _probe(checks)
            os.write(write_fd, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    data = b"".join(chunks)
    return json.loads(data) if data else [(False, "check failed") for _c in checks]


def resolve(user, group, problems):
    """The account's uid, gid, supplementary groups and home; None (and a problem) when it does not exist."""
    try:
        entry = pwd.getpwnam(user)
        gid = grp.getgrnam(group).gr_gid if group else entry.pw_gid
    except KeyError:
        problems.append("train_user=%s (train_group=%s): no such account or group on this node; valid: an "
                        "existing account (empty train_user: the role creates mtrain)" % (user, group or ""))
        return None
    groups = sorted(set(os.getgrouplist(entry.pw_name, gid)))
    return {"name": entry.pw_name, "uid": entry.pw_uid, "gid": gid, "groups": groups,
            "group_names": sorted(g.gr_name for g in grp.getgrall() if g.gr_gid in groups), "home": entry.pw_dir}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            user=dict(type="str"),
            group=dict(type="str"),
            checks=dict(type="list", elements="dict", default=[]),
            port=dict(type="int", required=True),
            ssh_ports=dict(type="list", elements="int", default=[]),
            sshd_config=dict(type="path", default="/etc/ssh/sshd_config"),
            firewall=dict(type="str", default="auto"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problems = []
    result = dict(changed=False, access=[], problems=problems)
    for check in p["checks"]:
        if not isinstance(check, dict) or check.get("need") not in _MODES or not check.get("path"):
            module.fail_json(msg="checks: %r: expected {var, path, need: x|r|rx|w}" % (check,))
    if p["user"]:
        account = resolve(p["user"], p["group"], problems)
        if account:
            result["account"] = account
            # A path that does not exist at all is preflight's to report (it names what is missing);
            # here only what exists but the account cannot use.
            present = [c for c in p["checks"] if os.path.exists(c["path"])]
            outcome = access_as(account, present)
            for check, (ok, error) in zip(present, outcome):
                result["access"].append(dict(var=check.get("var", "path"), path=check["path"], need=check["need"],
                                             ok=bool(ok), error=error))
            problems.extend("train_user=%s: %s; valid: paths the account can reach (group or mode)"
                            % (p["user"], line) for line in check_access(result["access"]))
    text = ""
    try:
        with open(p["sshd_config"]) as handle:
            text = handle.read()
    except (IOError, OSError):
        pass
    ssh = sorted(parse_sshd_ports(text) | set(p["ssh_ports"]))
    result["ssh_ports"] = ssh
    collision = port_problem(p["port"], ssh)
    if collision:
        problems.append(collision)
    result["nft"] = module.get_bin_path("nft")
    result["iptables"] = module.get_bin_path("iptables")
    nft_error = None
    if result["nft"] and os.geteuid() == 0:
        # The job's rule in nft's check mode: parsed and tried by the kernel, never applied.
        rc, _out, err = module.run_command([result["nft"], "-c", "-f", "-"], binary_data=True,
                                           data=render_table(table_name("preflight"), p["port"], ["127.0.0.1"], 60))
        nft_error = (err.strip().splitlines() or ["rc %d" % rc])[-1] if rc != 0 else None
    try:
        result["firewall"] = decide_firewall(p["firewall"], result["nft"], result["iptables"], os.geteuid() == 0,
                                             nft_error)
    except SecurityError as exc:
        result["firewall"] = {"enabled": False, "note": str(exc)}
        problems.append(str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
