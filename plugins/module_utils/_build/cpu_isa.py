# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CPU instruction-set extensions: what a `-march=native` build assumed, in /proc/cpuinfo terms.

DeepSpeed compiles its CPU ops with `-march=native`, so a wheel silently requires
every extension the build host's compiler enabled. The build records them (from
the compiler's predefined macros) under the names /proc/cpuinfo uses, so that a
target node can be checked with a plain set comparison before anything is installed.
"""
from __future__ import annotations

# gcc/clang predefined macro -> /proc/cpuinfo flag. Only extensions that change
# generated code are listed (SSE/SSE2 are x86-64 baseline and omitted).
MACRO_TO_FLAG = {
    "__SSE3__": "pni",
    "__SSSE3__": "ssse3",
    "__SSE4_1__": "sse4_1",
    "__SSE4_2__": "sse4_2",
    "__SSE4A__": "sse4a",
    "__POPCNT__": "popcnt",
    "__LZCNT__": "abm",
    "__MOVBE__": "movbe",
    "__AES__": "aes",
    "__PCLMUL__": "pclmulqdq",
    "__AVX__": "avx",
    "__AVX2__": "avx2",
    "__FMA__": "fma",
    "__F16C__": "f16c",
    "__BMI__": "bmi1",
    "__BMI2__": "bmi2",
    "__ADX__": "adx",
    "__RDSEED__": "rdseed",
    "__SHA__": "sha_ni",
    "__GFNI__": "gfni",
    "__VAES__": "vaes",
    "__VPCLMULQDQ__": "vpclmulqdq",
    "__AVXVNNI__": "avx_vnni",
    "__AVX512F__": "avx512f",
    "__AVX512CD__": "avx512cd",
    "__AVX512BW__": "avx512bw",
    "__AVX512DQ__": "avx512dq",
    "__AVX512VL__": "avx512vl",
    "__AVX512IFMA__": "avx512ifma",
    "__AVX512VBMI__": "avx512vbmi",
    "__AVX512VBMI2__": "avx512_vbmi2",
    "__AVX512VNNI__": "avx512_vnni",
    "__AVX512BITALG__": "avx512_bitalg",
    "__AVX512VPOPCNTDQ__": "avx512_vpopcntdq",
    "__AVX512BF16__": "avx512_bf16",
    "__AVX512FP16__": "avx512_fp16",
    "__AVX512VP2INTERSECT__": "avx512_vp2intersect",
    "__AMX_TILE__": "amx_tile",
    "__AMX_INT8__": "amx_int8",
    "__AMX_BF16__": "amx_bf16",
}


def flags_from_macros(macro_dump):
    """Flags enabled by a compiler, from `gcc -march=native -dM -E - </dev/null` output."""
    found = set()
    for line in macro_dump.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "#define" and parts[1] in MACRO_TO_FLAG:
            found.add(MACRO_TO_FLAG[parts[1]])
    return sorted(found)


def march_from_help(help_text):
    """The -march value gcc resolved `native` to, from `gcc -march=native -Q --help=target`."""
    for line in help_text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "-march=":
            return parts[1]
        if len(parts) == 1 and parts[0].startswith("-march="):
            return parts[0].split("=", 1)[1] or None
    return None


def simd_width(flags):
    """The SIMD path DeepSpeed's CPU ops select (-D__AVX512__ / -D__AVX256__ / scalar)."""
    flags = set(flags)
    if "avx512f" in flags:
        return "AVX512"
    if "avx2" in flags:
        return "AVX256"
    return "SCALAR"


def cpuinfo_flags(cpuinfo_text):
    """Union of the `flags` lines of /proc/cpuinfo (x86) or `Features` (arm)."""
    flags = set()
    for line in cpuinfo_text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def missing_flags(required, cpuinfo_text):
    """Flags the build assumed that this CPU lacks, sorted; empty when compatible."""
    have = cpuinfo_flags(cpuinfo_text)
    return sorted(set(required) - have)
