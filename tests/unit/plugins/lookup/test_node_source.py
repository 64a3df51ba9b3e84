"""Lookup node_source: the text of a module_utils/_node file, as roles/train/tasks/fabric.yml writes the fabric
check's probe onto the nodes (the file the Slurm launcher's module writes from the same source)."""
import pytest
import yaml
from ansible.errors import AnsibleLookupError

from ansible_collections.multinode.training.plugins.lookup import node_source
from ansible_collections.multinode.training.plugins.lookup.node_source import LookupModule
from ansible_collections.multinode.training.plugins.module_utils._launch import slurm_job
from tests.unit.conftest import ROOT

LOOKUP = LookupModule()


def test_the_probe_is_its_file_text_as_the_slurm_launcher_writes_it():
    text = (ROOT / "plugins" / "module_utils" / "_node" / "fabric_probe.py").read_text()
    assert LOOKUP.run(["fabric_probe"], variables={}) == [text]
    assert slurm_job.helpers(True)["fabric_probe.py"] == text
    assert "fabric_probe.py" not in slurm_job.helpers(False)


@pytest.mark.parametrize("name, said", [
    ("no_such_file", "module_utils/_node has no no_such_file.py"),
    ("fabric_probe.py", "'fabric_probe.py' is not the name of a file of module_utils/_node"),
    ("../_nccl/fabric", "is not the name of a file of module_utils/_node"),
])
def test_a_name_that_is_not_a_node_file_is_refused(name, said):
    with pytest.raises(AnsibleLookupError, match=said.replace(".", r"\.").replace("(", r"\(")):
        LOOKUP.run([name], variables={})


def test_its_documentation_is_yaml():
    """ansible-core reads it when it loads the plugin: a YAML error there fails the task that calls it."""
    assert yaml.safe_load(node_source.DOCUMENTATION)["name"] == "node_source"
    assert yaml.safe_load(node_source.EXAMPLES)[0]["ansible.builtin.copy"]["content"].startswith("{{ lookup(")
    assert "_raw" in yaml.safe_load(node_source.RETURN)
