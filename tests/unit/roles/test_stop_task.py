"""roles/train/tasks/launch.yml's stop after a failure: its failed_when, evaluated as Ansible does (Jinja2 on the
registered result), fails the task when the stop module failed for any reason, not only for survivors."""
import jinja2
import yaml

from tests.unit.conftest import ROOT


def _stop_task():
    tasks = yaml.safe_load((ROOT / "roles" / "train" / "tasks" / "launch.yml").read_text())
    [task] = [t for t in tasks if t.get("name") == "Launch | stop the job on every node after a failure anywhere"]
    return task


def _fails(result):
    expression = jinja2.Environment().compile_expression(_stop_task()["failed_when"].strip())
    return bool(expression(__train_stop_all=result))


def test_the_stop_task_fails_when_the_stop_module_fails_whatever_the_reason():
    assert _fails({"failed": True, "msg": "MODULE FAILURE\nSee stdout/stderr for the exact error", "rc": 1})
    assert _fails({"failed": True, "survivors": ["4242 python3 train.py"], "msg": "1 process survived"})
    assert _fails({"failed": False, "survivors": ["4242 python3 train.py"]})
    assert not _fails({"failed": False, "changed": True, "killed": [4242], "survivors": []})
    assert not _fails({"skipped": True})
