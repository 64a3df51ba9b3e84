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


def run_plan(monkeypatch, params, bins, answers, gcc_paths, apt_lists=True):
    """gcc_plan.run_module on a FakeModule; the exit_json/fail_json result."""
    import glob as _glob

    class Exit(Exception):
        pass

    class Module(FakeModule):
        def __init__(self):
            FakeModule.__init__(self, answers, bins)
            self.params = dict(requested="auto", cxx_standard="auto", deepspeed_version="0.19.8",
                               torch_version="2.13.0", nvcc="none", available=None, require_available=True,
                               probe=True, extra_packages=[], set_default=True, priority=60)
            self.params.update(params)

        def exit_json(self, **kw):
            raise Exit(dict(kw, failed=False))

        def fail_json(self, **kw):
            raise Exit(dict(kw, failed=True))

    def fake_glob(pattern):
        if pattern.startswith("/var/lib/apt/lists"):
            return ["/var/lib/apt/lists/x_Packages"] if apt_lists else []
        return [p for p in gcc_paths if _glob.fnmatch.fnmatch(p, pattern)]

    monkeypatch.setattr(gcc_plan.glob, "glob", fake_glob)
    module = Module()
    try:
        gcc_plan.run_module(module)
    except Exit as done:
        return done.args[0], module.commands
    raise AssertionError("run_module returned without exit_json")


def test_default_left_alone_keeps_the_fitting_default_without_the_archive(monkeypatch):
    result, commands = run_plan(
        monkeypatch, dict(set_default=False),
        {"gcc": "/usr/bin/gcc", "gcc-12": "/usr/bin/gcc-12", "g++-12": "/usr/bin/g++-12"},
        {"/usr/bin/gcc": (0, "12\n", ""), "dpkg-query": (0, "gcc-12 install ok installed\ng++-12 install ok installed\n", ""),
         "/usr/bin/gcc-12": (0, "12.2.0\n", ""), "/usr/bin/g++-12": (0, "12.2.0\n", "")},
        ["/usr/bin/gcc-12", "/usr/bin/g++-12", "/usr/bin/gcc-11"], apt_lists=False)
    assert not result["failed"] and result["index_missing"] is False and result["available"] is None
    assert (result["version"], result["installed"], result["default_gcc"]) == (12, [12], 12)
    assert result["missing"] == [] and result["selected"] is True
    assert result["compiler_versions"] == {"gcc-12": "12.2.0", "g++-12": "12.2.0"}
    # neither apt-cache nor update-alternatives was asked
    assert not [c for c in commands if c[0] in ("apt-cache", "update-alternatives")]


def test_default_left_alone_without_a_fitting_gcc_reads_the_archive(monkeypatch):
    result, commands = run_plan(
        monkeypatch, dict(set_default=False),
        {"gcc": "/usr/bin/gcc", "apt-cache": "/usr/bin/apt-cache"},
        {"/usr/bin/gcc": (0, "9\n", ""), "/usr/bin/apt-cache": (0, "gcc-9\ng++-9\ngcc-12\ng++-12\n", ""),
         "dpkg-query": (0, "", "")},
        ["/usr/bin/gcc-9", "/usr/bin/g++-9"])
    assert (result["version"], result["default_gcc"]) == (12, 9)
    assert result["missing"] == ["gcc-12", "g++-12"]
    assert ["/usr/bin/apt-cache", "pkgnames", "g"] in commands
