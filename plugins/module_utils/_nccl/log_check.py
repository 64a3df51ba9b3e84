# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module nccl_log_check's work: read NCCL_DEBUG=INFO logs, say which transport each host used, and
fail (or warn) on a socket fallback where InfiniBand/RoCE ports are active. Parsing is log.py's."""
from __future__ import annotations

import socket

from ansible_collections.multinode.training.plugins.module_utils._nccl.log import (
    parse,
    socket_fallbacks,
    summary,
)

ARGUMENT_SPEC = dict(
    paths=dict(type="list", elements="path", default=[]),
    content=dict(type="str", default=""),
    active_ib=dict(type="bool", default=False),
    fail_on_fallback=dict(type="bool", default=True),
    require_info=dict(type="bool", default=False),
    node_name=dict(type="str"),
)
REQUIRED_ONE_OF = [("paths", "content")]


def read_logs(module, node):
    """The text of every path in O(paths), then O(content); a path that cannot be read fails naming it."""
    texts = []
    for path in module.params["paths"]:
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as handle:
                texts.append(handle.read())
        except OSError as exc:
            module.fail_json(msg="%s: cannot read NCCL log %s: %s" % (node, path, exc))
    texts.append(module.params["content"] or "")
    return "\n".join(texts)


def fallback_message(node, fallbacks):
    """One line naming every host and its ranks that used sockets, and NCCL's reason."""
    return "%s has active InfiniBand/RoCE ports but NCCL used sockets: %s" % (node, "; ".join(
        "host %s ranks %s: %s" % (f["host"], ",".join(str(r) for r in f["ranks"]) or "?", f["reason"])
        for f in fallbacks))


def run_module(module):
    """The module nccl_log_check."""
    params = module.params
    node = params["node_name"] or socket.gethostname()
    parsed = parse(read_logs(module, node))
    fallbacks = socket_fallbacks(parsed, params["active_ib"])
    result = dict(
        changed=False,
        hosts=parsed["hosts"],
        ranks={str(rank): info for rank, info in parsed["ranks"].items()},
        transports=sorted({t for host in parsed["hosts"].values() for t in host["transports"]}),
        summary=summary(parsed),
        fallback=bool(fallbacks),
        fallbacks=fallbacks,
        lines=parsed["lines"],
        files=params["paths"],
    )
    if parsed["lines"] == 0:
        message = "%s: no NCCL INFO line in %s; run the job with NCCL_DEBUG=INFO to see its transport" % (
            node, ", ".join(params["paths"]) or "the given content")
        if params["require_info"]:
            module.fail_json(msg=message, **result)
        module.warn(message)
    if fallbacks:
        message = "SOCKET FALLBACK: " + fallback_message(node, fallbacks)
        if params["fail_on_fallback"]:
            module.fail_json(msg=message, **result)
        module.warn(message)
    module.exit_json(**result)
