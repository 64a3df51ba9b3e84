# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The facts train.yml reads (module multinode.training.node_facts), from three ``ip -j`` calls.

Ansible's ``setup`` with the network subset runs ``ip addr show`` twice per interface, ethtool per
interface and reads sysfs per interface: on a GPU node with IB ports, bridges and veths that is
dozens of processes. The roles of train.yml read only the addresses (train: the address on
train_interface, the default route's interface; nccl_tuning: interfaces and addresses) and the
connecting user. This builds the same facts, in the same shape and under the same names as
``setup`` (``ansible_interfaces``, ``ansible_<fact key>`` per interface with ``device``, ``ipv4``,
``ipv4_secondaries``, ``ipv6``; ``ansible_default_ipv4``/``_ipv6``, ``ansible_all_ipv4_addresses``/
``_ipv6``; the user facts), from ``ip -j -d addr show`` and ``ip -j route get`` (the targets
``setup`` uses). The interface-to-fact-key rule is _nccl.interfaces.fact_key (one rule).
Checked against ``setup`` on recorded output: tests/unit/plugins/module_utils/_train/test_node_facts.py.
"""
from __future__ import annotations

import getpass
import json
import os
import pwd

from ansible_collections.multinode.training.plugins.module_utils._nccl.interfaces import fact_key
from ansible_collections.multinode.training.plugins.module_utils._train.account import node_account_facts
from ansible_collections.multinode.training.plugins.module_utils._train.privilege import write_blockers

# What `ip route get` asks for to find the default route's interface (as setup does).
ROUTE_TARGETS = {4: "8.8.8.8", 6: "2404:6800::"}
# ip's link types -> setup's interface types (setup reads /sys/class/net/<if>/type); a bond or a
# bridge is named by its kind (setup: the bonding/ or bridge/ directory in sysfs).
LINK_TYPES = {"ether": "ether", "loopback": "loopback", "infiniband": "infiniband", "none": "unknown"}
KINDS = {"bond": "bonding", "bridge": "bridge"}


class NodeFactsError(Exception):
    """``ip -j`` output that cannot be read (the module falls back to setup's collectors)."""


def _netmask(prefix):
    bits = (0xFFFFFFFF << (32 - int(prefix))) & 0xFFFFFFFF
    return ".".join(str((bits >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def _network(address, prefix):
    parts = [int(p) for p in address.split(".")]
    value = (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]
    value &= (0xFFFFFFFF << (32 - int(prefix))) & 0xFFFFFFFF
    return ".".join(str((value >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def _ipv4(info):
    address, prefix = info.get("local"), info.get("prefixlen")
    return {"address": address, "broadcast": info.get("broadcast") or "", "netmask": _netmask(prefix),
            "network": _network(address, prefix), "prefix": str(prefix)}


def parse_json(text, what):
    try:
        data = json.loads(text or "null")
    except ValueError as exc:
        raise NodeFactsError("%s: not JSON (%s)" % (what, exc))
    return data


def interface_facts(link):
    """One entry of ``ip -j -d addr show`` -> (name, its facts as setup names them)."""
    name = link.get("ifname")
    if not name:
        raise NodeFactsError("ip -j addr: an entry without ifname")
    flags = link.get("flags") or []
    kind = ((link.get("linkinfo") or {}).get("info_kind") or "")
    entry = {"device": name, "active": "UP" in flags, "mtu": link.get("mtu"), "promisc": "PROMISC" in flags,
             "type": KINDS.get(kind) or LINK_TYPES.get(link.get("link_type"), link.get("link_type") or "unknown")}
    if link.get("link_type") != "loopback" and link.get("address"):
        entry["macaddress"] = link["address"]
    primary, secondaries, ipv6 = None, [], []
    for info in link.get("addr_info") or []:
        if info.get("family") == "inet" and info.get("local"):
            if primary is None and not info.get("secondary"):
                primary = _ipv4(info)
            else:
                secondaries.append(_ipv4(info))
        elif info.get("family") == "inet6" and info.get("local"):
            ipv6.append({"address": info["local"], "prefix": str(info.get("prefixlen")),
                         "scope": info.get("scope") or "global"})
    if primary is None and secondaries:
        primary = secondaries.pop(0)
    if primary:
        entry["ipv4"] = primary
    if secondaries:
        entry["ipv4_secondaries"] = secondaries
    if ipv6:
        entry["ipv6"] = ipv6
    return name, entry


def default_route(routes, entries, version):
    """``ip -j -<v> route get <target>`` -> setup's ``default_ipv4``/``default_ipv6`` ({} without a route)."""
    if not isinstance(routes, list) or not routes or not isinstance(routes[0], dict):
        return {}
    route = routes[0]
    device = route.get("dev")
    if not device:
        return {}
    out = {"interface": device, "address": route.get("prefsrc") or "", "alias": device}
    if route.get("gateway"):
        out["gateway"] = route["gateway"]
    entry = entries.get(device) or {}
    if version == 4:
        for candidate in [entry.get("ipv4")] + list(entry.get("ipv4_secondaries") or []):
            if candidate and candidate.get("address") == out["address"]:
                out.update({k: v for k, v in candidate.items() if k != "address"})
                break
    else:
        for candidate in entry.get("ipv6") or []:
            if candidate.get("address") == out["address"]:
                out.update(prefix=candidate.get("prefix"), scope=candidate.get("scope"))
                break
    for key in ("macaddress", "mtu", "type"):
        if key in entry:
            out[key] = entry[key]
    return out


def network_facts(addr_text, route4_text=None, route6_text=None):
    """The outputs of ``ip -j -d addr show`` and of ``ip -j -4/-6 route get`` (None or '' when the
    call failed: no such route) -> setup's network facts, keys with the ``ansible_`` prefix."""
    links = parse_json(addr_text, "ip -j addr")
    if not isinstance(links, list):
        raise NodeFactsError("ip -j addr: not a list")
    entries, names = {}, []
    for link in links:
        if not isinstance(link, dict):
            raise NodeFactsError("ip -j addr: an entry that is not an object")
        name, entry = interface_facts(link)
        names.append(name)
        entries[name] = entry
    facts = {"ansible_interfaces": names}
    all4, all6 = [], []
    for name in names:
        entry = entries[name]
        facts["ansible_" + fact_key(name)] = entry
        for address in [entry.get("ipv4")] + list(entry.get("ipv4_secondaries") or []):
            if address and not address["address"].startswith("127."):
                all4.append(address["address"])
        for address in entry.get("ipv6") or []:
            if address["address"] != "::1":
                all6.append(address["address"])
    facts["ansible_all_ipv4_addresses"] = all4
    facts["ansible_all_ipv6_addresses"] = all6
    facts["ansible_default_ipv4"] = default_route(parse_json(route4_text, "ip -j -4 route get") if route4_text
                                                  else None, entries, 4)
    facts["ansible_default_ipv6"] = default_route(parse_json(route6_text, "ip -j -6 route get") if route6_text
                                                  else None, entries, 6)
    return facts


def user_facts():
    """setup's user facts (the connecting user, as getpass names it; the real and effective ids)."""
    user = getpass.getuser()
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        entry = pwd.getpwuid(os.getuid())
    return {"ansible_user_id": user, "ansible_user_uid": entry.pw_uid, "ansible_user_gid": entry.pw_gid,
            "ansible_user_gecos": entry.pw_gecos, "ansible_user_dir": entry.pw_dir, "ansible_user_shell": entry.pw_shell,
            "ansible_real_user_id": os.getuid(), "ansible_effective_user_id": os.geteuid(),
            "ansible_real_group_id": os.getgid(), "ansible_effective_group_id": os.getegid()}


ARGUMENT_SPEC = {"account": {"type": "str"}, "writes": {"type": "list", "elements": "str"}}


def ip_facts(module):
    """The facts from three ``ip -j`` calls and the user's, or None (no ip, or output it cannot read)."""
    ip = module.get_bin_path("ip")
    if not ip:
        return None
    rc, out, _err = module.run_command([ip, "-j", "-d", "addr", "show"])
    if rc != 0:
        return None
    routes = {}
    for version, target in ROUTE_TARGETS.items():
        route_rc, route_out, _route_err = module.run_command([ip, "-j", "-%d" % version, "route", "get", target])
        routes[version] = route_out if route_rc == 0 else None
    try:
        facts = network_facts(out, routes[4], routes[6])
    except NodeFactsError:
        return None
    facts.update(user_facts())
    return facts


def setup_facts(module):
    """setup's own collectors for the network and user subsets (no ip -j on this node)."""
    from ansible.module_utils.facts import ansible_collector, default_collectors
    from ansible.module_utils.facts.namespace import PrefixFactNamespace

    collector = ansible_collector.get_ansible_collector(
        all_collector_classes=default_collectors.collectors,
        namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
        filter_spec=[], gather_subset=["!all", "!min", "network", "user"], gather_timeout=10,
        minimal_gather_subset=frozenset(["user"]))
    return collector.collect(module=module)


def platform_facts():
    """The node's machine (``uname -m``) and glibc version (None on musl), without a subprocess: the platform
    that role wheel_distribute resolves job requirements for (_wheel/node_platform.py)."""
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    except (AttributeError, ValueError, OSError, IndexError):
        glibc = None
    return {"machine": os.uname().machine, "glibc": glibc}


def run_module(module):
    """Module node_facts: ``ip -j`` where it works, else setup's collectors; says which (facts_source)."""
    facts = ip_facts(module)
    source = "ip"
    if facts is None:
        facts, source = setup_facts(module), "setup"
    facts["multinode_training_platform"] = platform_facts()
    if module.params.get("account") is not None:
        facts["multinode_training_account"] = node_account_facts(module.params["account"])
    if module.params.get("writes") is not None:
        facts["multinode_training_writes"] = write_blockers(module.params["writes"])
    module.exit_json(changed=False, ansible_facts=facts, facts_source=source)
