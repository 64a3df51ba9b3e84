# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for multinode.training.data_sync: step manifest runs here, on the controller; step transfer is
this node's transfer - start the node's worker, send it the controller's archive when the plan says so
(ansible.builtin.copy, which handles become and checks the copy), then poll the node and print its
progress every O(transfer.poll) seconds until its files are placed; every other step is the module's.
The work is _data.sync (manifest, plan, the node's calls) and _data.worker (the node's process)."""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.multinode.training.plugins.module_utils._data import sync
from ansible_collections.multinode.training.plugins.module_utils._torchrun.bounded import POLL_SLACK, PollTimeout, bounded

display = Display()
MODULE = "multinode.training.data_sync"
# Longest single poll: a progress line is due every O(transfer.poll) seconds anyway.
LONGEST_WINDOW = 30.0


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("manifest") is not None:
            return self._manifest(args["manifest"], result)
        if args.get("transfer") is not None:
            return self._transfer(args["transfer"], result, task_vars)
        result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        return result

    @staticmethod
    def _manifest(items, result):
        started = time.time()
        try:
            listed, hashed = sync.manifest(items)
        except sync.ManifestError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(changed=False, manifest=listed, bytes=sync.sizes(listed), hashed=hashed,
                      seconds=round(time.time() - started, 2))
        return result

    def _transfer(self, args, result, task_vars):
        node = args["node"]
        plan = args["plan"]
        self._slack = int(args.get("poll_slack") or POLL_SLACK)
        result.update(changed=False, placed=[], received={}, served={}, seconds=0.0)
        if not (plan.get("upload") or plan.get("pull") or plan.get("serve")):
            return result
        if self._play_context.check_mode:
            result.update(changed=bool(plan.get("upload") or plan.get("pull")), msg="check mode: nothing sent")
            return result
        items = args["items"]
        config = {"items": items, "upload": plan.get("upload", []), "pull": plan.get("pull", []),
                  "serve": bool(plan.get("serve")), "bind": args["bind"], "port": int(args["port"]),
                  "node": node, "owner": args.get("owner", ""), "group": args.get("group", "")}
        if config["upload"]:  # at least 10 minutes, and a second per MB (1 MB/s at worst)
            config["upload_wait"] = 600 + sum(items[i]["files"][rel]["size"] for i, rel in config["upload"]) // 10 ** 6
        started = self._call({"start": {"config": config, "token": args["token"]}}, task_vars)
        if started.get("failed"):
            result.update(failed=True, msg="%s: data: the transfer did not start: %s" % (node, started.get("msg")))
            return result
        begin = time.time()
        poll = max(1.0, float(args.get("poll") or 15))
        if config["upload"]:
            failure = self._upload(items, config["upload"], started["state_dir"], node, task_vars)
            if failure:
                # the worker fails too, and tells the peers that wait for these files at once
                self._call({"poll": {"port": config["port"], "abort": failure}}, task_vars)
                result.update(failed=True, msg=failure)
                return result
        next_print = time.time() + poll
        while True:
            window = min(poll, LONGEST_WINDOW)
            polled = self._call({"poll": {"port": config["port"], "wait": window}}, task_vars, window)
            if polled.get("failed"):
                result.update(failed=True, msg="%s: data: %s" % (node, polled.get("msg")))
                return result
            status = polled["status"]
            if status.get("state") == "done":
                break
            if status.get("state") == "failed":
                result.update(failed=True, msg="%s: data: %s" % (node, status.get("error")), status=status)
                return result
            if time.time() >= next_print - 0.5 and status.get("bytes_total"):
                display.display("[%s] %s" % (node, progress_line(status, time.time() - begin)))
                next_print = time.time() + poll
        seconds = round((status.get("ended") or time.time()) - status.get("started", begin), 2)
        placed = [sync.target_of(items, i, rel) for i, rel in status.get("placed", [])]
        if status.get("bytes_total"):
            display.display("[%s] %s" % (node, done_line(status, seconds)))
        result.update(changed=bool(placed), placed=placed, received=status.get("from", {}),
                      served=status.get("served", {}), seconds=seconds)
        return result

    def _call(self, module_args, task_vars, window=0.0):
        """One call on the node, bounded by its ``window`` (a poll's wait) plus O(transfer.poll_slack) (POLL_SLACK
        when unset)."""
        limit = int(window + (getattr(self, "_slack", None) or POLL_SLACK))
        try:
            return bounded(lambda: self._execute_module(module_name=MODULE, module_args=module_args,
                                                        task_vars=task_vars), limit)
        except PollTimeout:
            return {"failed": True, "msg": "no answer within %d s (frozen, or the module stuck on the node)" % limit}
        except AnsibleConnectionFailure as exc:
            return {"failed": True, "msg": "lost the connection: %s" % exc}

    def _upload(self, items, upload, state_dir, node, task_vars):
        """The files no node has, from the controller, as one tar -> None, or the failure's message."""
        local_dir = tempfile.mkdtemp(prefix="multinode-training-data-")
        try:
            local = os.path.join(local_dir, "upload.tar")
            # dereference: the manifest lists a symlink to a file as that file (os.walk, os.stat)
            with tarfile.open(local, "w", format=tarfile.PAX_FORMAT, dereference=True) as tar:
                for index, rel in upload:
                    src = items[index]["src"]
                    tar.add(src if rel == "" else os.path.join(src, rel), arcname="%d/%s" % (index, rel or "."),
                            recursive=False)
            size = os.path.getsize(local)
            display.display("[%s] data: %s from the controller" % (node, sync.human(size)))
            task = self._task.copy()
            task.args = {"src": local, "dest": os.path.join(state_dir, "upload.tar"), "mode": "0600"}
            copy = self._shared_loader_obj.action_loader.get(
                "ansible.builtin.copy", task=task, connection=self._connection, play_context=self._play_context,
                loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj)
            copied = copy.run(task_vars=task_vars)
            if copied.get("failed"):
                return "%s: data: the copy from the controller failed: %s" % (node, copied.get("msg"))
            return None
        except (IOError, OSError, tarfile.TarError) as exc:
            return "%s: data: cannot pack the controller's files: %s" % (node, exc)
        finally:
            shutil.rmtree(local_dir, ignore_errors=True)


def _rate(count, seconds):
    return "%s/s" % sync.human(count / seconds) if seconds > 0 else "-"


def progress_line(status, elapsed):
    done, total = status.get("bytes_done", 0), status.get("bytes_total", 0)
    line = "data: %s of %s (%d%%), %s" % (sync.human(done), sync.human(total), 100 * done // max(total, 1),
                                          _rate(done, elapsed))
    if status.get("waiting_for"):
        line += ", waiting for %s" % status["waiting_for"]
    return line


def done_line(status, seconds):
    sources = ", ".join("%s from %s" % (sync.human(count), name)
                        for name, count in sorted(status.get("from", {}).items()))
    total = status.get("bytes_total", 0)
    line = "data: %s in %.1f s (%s): %s" % (sync.human(total), seconds, _rate(total, seconds), sources or "-")
    if status.get("served"):
        sent = ["%s to %s" % (sync.human(count), peer) for peer, count in sorted(status["served"].items())]
        line += "; sent %s" % ", ".join(sent)
    return line
