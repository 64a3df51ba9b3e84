"""node_facts' interpreter discovery: Ansible's own (ansible.executor.interpreter_discovery), run where
a module call would run it first, so that the launch's calls can be light ones from the first."""
from ansible_collections.multinode.training.plugins.action.node_facts import discover_python


class _Node(object):
    """What discovery asks of the action: one shell command on the node."""

    def __init__(self, found):
        self.found = found
        self.commands = []

    def _low_level_execute_command(self, cmd, sudoable=True, **_kw):
        self.commands.append((cmd, sudoable))
        return {"rc": 0, "stdout": "FOUND\n%s\nENDFOUND\n" % "\n".join(self.found), "stderr": ""}


def test_discovery_runs_ansible_s_own_probe_and_takes_the_first_python_found():
    node = _Node(["/usr/bin/python3.11", "/usr/bin/python3"])
    assert discover_python(node, {"inventory_hostname": "n1"}) == "/usr/bin/python3.11"
    (cmd, sudoable), = node.commands
    assert cmd.startswith("echo FOUND;") and "command -v" in cmd and not sudoable


def test_nothing_is_discovered_where_the_python_is_known_already():
    node = _Node(["/usr/bin/python3"])
    assert discover_python(node, {"ansible_python_interpreter": "/opt/py/bin/python"}) is None
    assert discover_python(
        node, {"ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3"}}) is None
    assert node.commands == []


def test_a_node_without_python_gets_ansible_s_fallback():
    assert discover_python(_Node([]), {"inventory_hostname": "n1"}) == "/usr/bin/python3"


def test_an_interpreter_set_to_auto_is_discovered_as_ansible_does():
    node = _Node(["/usr/bin/python3"])
    assert discover_python(node, {"ansible_python_interpreter": "auto_silent"}) == "/usr/bin/python3"
