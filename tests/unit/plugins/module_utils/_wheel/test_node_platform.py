"""The nodes' platform for pip (plugins/module_utils/_wheel/node_platform.py): one arch, the lowest glibc, and
every tag pip must be given (it expands no manylinux_2_X to older glibcs)."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import node_platform as np
from ansible_collections.multinode.training.plugins.module_utils._wheel.tags import _platform_ok


def test_x86_64_lists_every_glibc_down_to_2_5_with_the_legacy_names_beside_theirs():
    tags = np.platform_tags("x86_64", "2.36")
    assert tags[0] == "manylinux_2_36_x86_64" and tags[-1] == "linux_x86_64"
    assert [t for t in tags if t.startswith("manylinux_2_")] == ["manylinux_2_%d_x86_64" % m for m in range(36, 4, -1)]
    for legacy, glibc in (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5)):
        assert tags.index("%s_x86_64" % legacy) == tags.index("manylinux_2_%d_x86_64" % glibc) + 1
    assert len(tags) == 32 + 3 + 1


def test_aarch64_stops_at_manylinux2014_and_has_no_older_legacy_names():
    assert np.platform_tags("aarch64", "2.31")[-4:] == [
        "manylinux_2_18_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"]
    assert not [t for t in np.platform_tags("aarch64", "2.31") if t.startswith(("manylinux1", "manylinux2010"))]


def test_every_tag_runs_on_the_lowest_node_by_the_guards_own_rule():
    """The list and _wheel/tags.py (the guard) agree: each tag passed to pip runs on a node of that glibc,
    and the next glibc's tag does not."""
    node = {"platform": "linux_x86_64", "glibc": "2.28"}
    assert all(_platform_ok(tag, node) for tag in np.platform_tags("x86_64", "2.28"))
    assert not _platform_ok("manylinux_2_29_x86_64", node)


def test_the_lowest_glibc_and_its_nodes():
    nodes = {"n1": {"machine": "x86_64", "glibc": "2.36"}, "n2": {"machine": "x86_64", "glibc": "2.31"},
             "n3": {"machine": "x86_64", "glibc": "2.31"}}
    assert np.nodes_platform(nodes) == {"arch": "x86_64", "glibc": "2.31", "lowest": ["n2", "n3"]}
    assert np.nodes_platform({}) is None


def test_nodes_of_two_archs_or_without_glibc_are_refused_naming_them():
    with pytest.raises(np.PlatformError) as exc:
        np.nodes_platform({"a": {"machine": "x86_64", "glibc": "2.36"}, "b": {"machine": "aarch64", "glibc": "2.36"},
                           "c": {"machine": "x86_64", "glibc": None}})
    assert str(exc.value) == (
        "nodes of 2 machine archs: aarch64 on b; x86_64 on a, c; valid: job requirements resolved for one arch, "
        "every node of the play the same; no glibc version on c (none reported); valid: glibc-based Linux "
        "nodes (manylinux wheels)")


def test_platform_args_repeat_the_option():
    assert np.platform_args(["a", "b"]) == ["--platform", "a", "--platform", "b"]
