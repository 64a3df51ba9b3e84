"""deepspeed_build (gcc_plan)'s probe of what the role would change (plugins/module_utils/_build/gcc_plan.py)."""
from ansible_collections.multinode.training.plugins.module_utils._build import gcc_plan


class FakeModule:
    def __init__(self, answers, bins):
        self.answers, self.bins, self.commands = answers, bins, []

    def run_command(self, argv):
        self.commands.append(argv)
        return self.answers.get(argv[0], (1, "", "unknown"))

    def get_bin_path(self, name, required=False):
        return self.bins.get(name)


def test_missing_packages_and_compiler_versions_of_gcc_12():
    module = FakeModule({"dpkg-query": (0, "gcc-12 install ok installed\ng++-12 deinstall ok config-files\n", ""),
                         "/usr/bin/gcc-12": (0, "12.2.0\n", "")},
                        {"gcc-12": "/usr/bin/gcc-12"})
    p = dict(extra_packages=["make"], set_default=False, priority=60)
    found = gcc_plan.probe_installed(module, 12, p)
    assert found["packages"] == ["gcc-12", "g++-12", "make"]
    assert found["missing"] == ["g++-12", "make"]
    assert found["selected"] is True  # not asked: set_default is off
    assert found["compiler_versions"] == {"gcc-12": "12.2.0", "g++-12": None}
    assert module.commands[0][:3] == ["dpkg-query", "-W", "-f"]
