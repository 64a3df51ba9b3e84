#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: data_sync
short_description: Datasets and model files the same on every node - verified by sha256, sent once, node to node
version_added: 0.1.0
description:
  - The steps of role P(multinode.training.train#role)'s C(train_data_sync); each task gives exactly one step, as the
    option of that name.
  - O(manifest) (on the controller, once) lists every file of every C({src, dest}) item with its size, mode and sha256;
    a file whose size and mtime match the controller's cache (C(~/.cache/multinode-training/data/)) is not hashed again.
  - O(check) (every node) says which files the node lacks or holds with other content; a file whose size and mtime
    match the node's record (C(.<name>.multinode-training-data.json) beside the destination) is not hashed again. A
    correct file with the wrong owner or mode is fixed in place.
  - O(transfer) (every node at once, one task) brings each node what it lacks by the plan of filter
    P(multinode.training.data_sync_plan#filter) - the files no node has from the controller, once, to one node; every
    other copy from a node that has it, over the nodes' own network (HTTP on O(transfer.port), with a token made for
    the run), as a doubling tree - printing each node's progress every O(transfer.poll) seconds. Each file is checked
    against its size and sha256 in a staging directory beside its destination, then renamed into place.
  - O(stop) ends the node's transfer process and removes its state and staging directories (run it after O(transfer),
    whatever happened).
  - O(start) and O(poll) are O(transfer)'s calls on the node; a play does not use them.
author: multinode.training maintainers (@multinode)
options:
  manifest:
    description:
      - The items of C(train_data_sync) - dicts with C(src) (a file or directory on the controller) and C(dest) (its path on
        the nodes; a directory's files go below it). Runs on the controller.
    type: list
    elements: dict
  check:
    description: What this node lacks.
    type: dict
    suboptions:
      items:
        description: RV(manifest) of O(manifest).
        type: list
        elements: dict
        required: true
      owner:
        description: The account that owns the files (train_user); empty - the module's user.
        type: str
        default: ''
      group:
        description: Their group; empty - the account's own.
        type: str
        default: ''
  transfer:
    description: Bring this node what it lacks and serve what it holds, by the plan.
    type: dict
    suboptions:
      items:
        description: RV(manifest) of O(manifest).
        type: list
        elements: dict
        required: true
      plan:
        description: This node's part of the plan (filter P(multinode.training.data_sync_plan#filter)) - C(upload), C(pull), C(serve).
        type: dict
        required: true
      bind:
        description: This node's job address, where it serves.
        type: str
        required: true
      port:
        description: The port every node serves on (train_rdzv_port + 2).
        type: int
        required: true
      token:
        description: The run's token; a peer without it gets nothing.
        type: str
        required: true
      node:
        description: This node's name (progress lines, messages).
        type: str
        required: true
      owner:
        description: The account that owns the files; empty - the module's user.
        type: str
        default: ''
      group:
        description: Their group; empty - the account's own.
        type: str
        default: ''
      poll:
        description: Seconds between progress lines.
        type: float
        default: 15
      poll_slack:
        description:
          - How long one call on the node may take (a poll waits at most 30 s for the transfer's end) before the
            node counts as not answering (frozen, or the module stuck on it) - the transfer fails naming it.
        type: int
        default: 300
  start:
    description: O(transfer)'s first call on the node - start the node's transfer process (detached).
    type: dict
    suboptions:
      config:
        description: What the process does (items, upload, pull, serve, bind, port, node, owner, group).
        type: dict
        required: true
      token:
        description: The run's token (O(transfer.token)).
        type: str
        required: true
  poll:
    description: O(transfer)'s next calls - the transfer's progress, waiting up to O(poll.wait) seconds for its end.
    type: dict
    suboptions:
      port:
        description: The port of O(transfer.port).
        type: int
        required: true
      wait:
        description: Seconds to wait for the end.
        type: float
        default: 0
      abort:
        description: The controller's copy to this node failed, for this reason - the transfer fails, and tells its peers.
        type: str
        default: ''
  stop:
    description: End the node's transfer process, remove its state and the staging directories.
    type: dict
    suboptions:
      port:
        description: The port of O(transfer.port).
        type: int
        required: true
      items:
        description: RV(manifest) of O(manifest) (their staging directories are removed).
        type: list
        elements: dict
        default: []
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.action
  - multinode.training.attributes.platform
attributes:
  action:
    support: full
    details: O(manifest) runs on the controller; O(transfer) is the action's loop of O(start) and O(poll) calls.
  check_mode:
    support: partial
    details: O(check) reports what it would fix and fixes nothing; O(transfer) does nothing in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A second run finds nothing to send and hashes nothing whose size and mtime are recorded.
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: The controller's manifest
  multinode.training.data_sync:
    manifest:
      - {src: /srv/datasets/tokenized/, dest: /data/tokenized}
  run_once: true
  register: listed

- name: What each node lacks
  multinode.training.data_sync:
    check:
      items: "{{ listed.manifest }}"
      owner: mtrain
  register: lacks
"""

RETURN = r"""
manifest:
  description: O(manifest) - every item with C(src), C(dest), C(kind) (V(file) or V(dir)) and C(files) (C({rel - {size, mode, sha256}})).
  returned: manifest
  type: list
  elements: dict
bytes:
  description: O(manifest) - the bytes of all items.
  returned: manifest
  type: int
hashed:
  description: Bytes hashed now (the rest was known by size and mtime).
  returned: manifest, check
  type: int
need:
  description: O(check) - C([item, rel]) of every file this node lacks or holds wrong.
  returned: check
  type: list
  elements: list
differs:
  description: O(check) - paths of files this node holds with other content (repaired by O(transfer)).
  returned: check
  type: list
  elements: str
fixed:
  description: O(check) - paths whose owner or mode was fixed.
  returned: check
  type: list
  elements: str
placed:
  description: O(transfer) - paths written on this node.
  returned: transfer
  type: list
  elements: str
received:
  description: O(transfer) - bytes received per source (C(controller) or a node).
  returned: transfer
  type: dict
served:
  description: O(transfer), O(stop) - bytes this node sent per peer (O(stop) - in the whole transfer).
  returned: transfer, stop
  type: dict
seconds:
  description: O(transfer) - seconds from the start to this node's last file.
  returned: transfer
  type: float
stopped:
  description: O(stop) - whether a transfer process was running.
  returned: stop
  type: bool
status:
  description: O(poll) - the transfer's state (C(state), C(bytes_done), C(bytes_total), C(from), C(served), C(error)).
  returned: poll
  type: dict
"""

import grp
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._data import sync
from ansible_collections.multinode.training.plugins.module_utils._torchrun.bounded import POLL_SLACK


def _ids(module, owner, group):
    """(uid, gid) of the account and group, (None, None) when unset."""
    uid = gid = None
    try:
        if owner:
            entry = pwd.getpwnam(owner)
            uid, gid = entry.pw_uid, entry.pw_gid
        if group:
            gid = grp.getgrnam(group).gr_gid
    except KeyError as exc:
        module.fail_json(msg="data: no such account or group on this node: %s" % exc)
    return uid, gid


def main():
    module = AnsibleModule(
        argument_spec=dict(
            manifest=dict(type="list", elements="dict"),
            check=dict(type="dict", options=dict(items=dict(type="list", elements="dict", required=True),
                                                 owner=dict(type="str", default=""),
                                                 group=dict(type="str", default=""))),
            transfer=dict(type="dict", options=dict(
                items=dict(type="list", elements="dict", required=True), plan=dict(type="dict", required=True),
                bind=dict(type="str", required=True), port=dict(type="int", required=True),
                token=dict(type="str", required=True, no_log=True), node=dict(type="str", required=True),
                owner=dict(type="str", default=""), group=dict(type="str", default=""),
                poll=dict(type="float", default=15), poll_slack=dict(type="int", default=POLL_SLACK))),
            start=dict(type="dict", options=dict(config=dict(type="dict", required=True),
                                                 token=dict(type="str", required=True, no_log=True))),
            poll=dict(type="dict", options=dict(port=dict(type="int", required=True),
                                                wait=dict(type="float", default=0),
                                                abort=dict(type="str", default=""))),
            stop=dict(type="dict", options=dict(port=dict(type="int", required=True),
                                                items=dict(type="list", elements="dict", default=[]))),
        ),
        mutually_exclusive=[["manifest", "check", "transfer", "start", "poll", "stop"]],
        required_one_of=[["manifest", "check", "transfer", "start", "poll", "stop"]],
        supports_check_mode=True,
    )
    params = module.params
    if params["manifest"] is not None or params["transfer"] is not None:
        module.fail_json(msg="data_sync: steps manifest and transfer run through the action on the controller")
    if params["check"] is not None:
        args = params["check"]
        uid, gid = _ids(module, args["owner"], args["group"])
        found = sync.check(args["items"], uid, gid, fix=not module.check_mode)
        module.exit_json(changed=bool(found["fixed"]), **found)
    if params["start"] is not None:
        config = dict(params["start"]["config"], token=params["start"]["token"])
        config["uid"], config["gid"] = _ids(module, config.pop("owner", ""), config.pop("group", ""))
        directory = sync.start(config)
        module.exit_json(changed=False, state_dir=directory)
    if params["poll"] is not None:
        if params["poll"]["abort"]:
            sync.abort(params["poll"]["port"], params["poll"]["abort"])
        status = sync.read_status(params["poll"]["port"], params["poll"]["wait"])
        module.exit_json(changed=False, status=status)
    args = params["stop"]
    was, last = sync.stop(args["port"], args["items"])
    module.exit_json(changed=False, stopped=was, served=last.get("served", {}))


if __name__ == "__main__":
    main()
