"""platform_env's host test (plugins/module_utils/_launch/platform_env.py): binding decides, not the name."""
from ansible_collections.multinode.training.plugins.module_utils._launch import platform_env


def test_only_a_local_address_is_owned():
    assert platform_env.owns_address("127.0.0.1") is True
    assert platform_env.owns_address("192.0.2.1") is False  # TEST-NET-1: on no interface here
    assert platform_env.owns_address("no-such-host.invalid") is False
