"""CPU flags a -march=native build assumes, from recorded compiler output and /proc/cpuinfo."""
from ansible_collections.multinode.training.plugins.module_utils._build import cpu_isa as c
from tests.unit.conftest import FIXTURES


def read(name):
    return (FIXTURES / "gcc" / name).read_text()


def test_avx512_build_host():
    flags = c.flags_from_macros(read("native-znver3-avx512.macros"))
    assert {"avx2", "avx512f", "avx512bw", "fma", "bmi2"} <= set(flags)
    assert c.simd_width(flags) == "AVX512"
    assert c.march_from_help(read("native-help-target.txt")) == "znver3"


def test_haswell_is_avx2_only():
    flags = c.flags_from_macros(read("haswell.macros"))
    assert "avx2" in flags and "fma" in flags
    assert not [f for f in flags if f.startswith("avx512")]
    assert c.simd_width(flags) == "AVX256"


def test_avx512_wheel_on_avx2_node_is_missing_flags():
    avx512 = c.flags_from_macros(read("native-znver3-avx512.macros"))
    haswell_cpuinfo = "processor\t: 0\nflags\t\t: " + " ".join(c.flags_from_macros(read("haswell.macros"))) + "\n"
    missing = c.missing_flags(avx512, haswell_cpuinfo)
    assert "avx512f" in missing and "avx2" not in missing


def test_build_host_cpuinfo_parses():
    flags = c.cpuinfo_flags(read("cpuinfo-build-host.txt"))
    assert "avx2" in flags and "sse4_2" in flags
    assert c.simd_width([]) == "SCALAR"
