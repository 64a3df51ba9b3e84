"""Disk space for the copy and the install, checked on the node before any copy (_wheel.space)."""
from __future__ import annotations

import os
import zipfile

import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import dist as _wheel_dist
from ansible_collections.multinode.training.plugins.module_utils._wheel import space

GIB = 1 << 30


def _wheel(path, members):
    with zipfile.ZipFile(str(path), "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, size in members.items():
            archive.writestr(name, b"\0" * size)
    return path


def test_unpacked_size_is_the_members_and_their_bytecode_not_the_file_size(tmp_path):
    wheel = _wheel(tmp_path / "six-1.17.0-py2.py3-none-any.whl", {"six.py": 300000, "six-1.17.0.dist-info/RECORD": 100})
    assert space.unpacked_size(str(wheel)) == 300100 + 450000  # six.py, RECORD, the .pyc pip compiles
    assert os.path.getsize(str(wheel)) < 10000  # zeros compress: the copy is small, the install is not
    (tmp_path / "notes.txt").write_text("x")
    assert space.unpacked_size(str(tmp_path / "notes.txt")) is None


def test_the_controller_entry_and_its_cache_carry_a_wheels_unpacked_size(tmp_path):
    wheel = _wheel(tmp_path / "six-1.17.0-py2.py3-none-any.whl", {"six.so": 5000})
    cache = {}
    assert _wheel_dist.file_entry(str(wheel), cache)["unpacked"] == 5000
    assert cache[str(wheel)][3] == 5000
    cache[str(wheel)][3] = 7  # answered from the cache while size and mtime hold
    assert _wheel_dist.file_entry(str(wheel), cache)["unpacked"] == 7
    # an entry of an older cache (no unpacked size): read once more
    cache[str(wheel)] = cache[str(wheel)][:3]
    assert _wheel_dist.file_entry(str(wheel), cache)["unpacked"] == 5000
    manifest = tmp_path / "x.manifest.json"
    manifest.write_text("{}")
    assert "unpacked" not in _wheel_dist.file_entry(str(manifest), cache)


def test_wheel_file_names_give_the_package_as_pip_compares_it():
    assert space.wheel_package("wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl") == (
        "torch", "2.13.0+cpu")
    assert space.wheel_package("wheelhouse/typing_extensions-4.16.0-py3-none-any.whl") == (
        "typing-extensions", "4.16.0")
    assert space.wheel_package("dist/deepspeed-0.19.8-1build-cp311-cp311-linux_x86_64.whl") == ("deepspeed", "0.19.8")
    assert space.wheel_package("dist/x.manifest.json") is None
    assert space.installed_set(["typing_extensions==4.16.0", "Jinja2==3.1.6"]) == {
        ("typing-extensions", "4.16.0"), ("jinja2", "3.1.6")}


def test_copy_counts_what_the_node_lacks_install_what_it_does_not_hold(tmp_path):
    (tmp_path / "wheelhouse").mkdir()
    (tmp_path / "wheelhouse" / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"x" * 10)
    expected = {"wheelhouse/six-1.17.0-py2.py3-none-any.whl": {"size": 10},  # there already
                "wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": {"size": 190 << 20},
                "dist/x.manifest.json": {"size": 2000}}
    assert space.copy_bytes(str(tmp_path), expected) == (190 << 20) + 2000
    unpacked = {"wheelhouse/six-1.17.0-py2.py3-none-any.whl": 50000,
                "wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": 700 << 20}
    assert space.install_bytes(unpacked, []) == int(((700 << 20) + 50000) * space.ON_DISK)
    assert space.install_bytes(unpacked, ["torch==2.13.0+cpu"]) == int(50000 * space.ON_DISK)
    assert space.install_bytes(unpacked, ["torch==2.12.0"]) == int(((700 << 20) + 50000) * space.ON_DISK)


def test_needs_on_one_filesystem_add_up_and_name_paths_free_and_need():
    fs = {"/var/cache/multinode-training": ("sda1", 3 * GIB), "/opt/multinode-training/venv.releases": ("sda1", 3 * GIB),
          "/data/venv.releases": ("sdb1", 100 * GIB)}
    needs = [("/var/cache/multinode-training", 2 * GIB, "of wheels to copy"),
             ("/opt/multinode-training/venv.releases", int(1.5 * GIB), "unpacked")]
    assert space.space_problems("node2", needs, fs.get) == [
        "node2: not enough disk space: 2.0 GiB of wheels to copy in /var/cache/multinode-training and 1.5 GiB "
        "unpacked in /opt/multinode-training/venv.releases needs 3.5 GiB, its filesystem has 3.0 GiB free; valid: "
        "free 512.0 MiB there, or wheel_distribute_venv on a filesystem with room"]
    # the venv on another filesystem: each fits
    needs[1] = ("/data/venv.releases", int(1.5 * GIB), "unpacked")
    assert space.space_problems("node2", needs, fs.get) == []
    assert space.space_problems("node2", [("/data/venv.releases", 0, "unpacked")], fs.get) == []


def test_the_filesystem_of_a_path_not_made_yet_is_its_nearest_existing_ancestors(tmp_path):
    device, free = space.filesystem(str(tmp_path / "a" / "b"))
    assert device == os.stat(str(tmp_path)).st_dev and free > 0


@pytest.mark.parametrize("written, name", [
    ("Foo_Bar", "foo-bar"), ("typing_extensions", "typing-extensions"), ("zope.interface", "zope-interface"),
    ("A__b..c._d", "a-b-c-d"), ("Jinja2", "jinja2"), ("hf_xet", "hf-xet"),
])
def test_one_project_name_rule_for_the_lock_the_package_sets_and_the_space_check(written, name):
    """PEP 503's rule is _node/preflight.canonicalize_name, read by the lock's requirements (and through
    them sdist and seed), the package-set comparison and the space check's wheel and venv sets; it says what
    packaging.utils.canonicalize_name says."""
    from packaging.utils import canonicalize_name as packaging_rule

    from ansible_collections.multinode.training.plugins.module_utils._node import preflight
    from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs

    assert preflight.canonicalize_name(written) == name == packaging_rule(written)
    assert reqs.canonicalize_name is preflight.canonicalize_name
    assert preflight.parse_set([written + "==1.0"]) == {name: "1.0"}
    assert space.installed_set([written + "==1.0"]) == {(name, "1.0")}
    wheel = "wheelhouse/%s-1.0-py3-none-any.whl" % written
    assert space.wheel_package(wheel) == reqs.wheel_name_version(wheel.split("/")[-1]) == (name, "1.0")
