"""Where a CUDA op build finds its headers: the toolkit first, then the CUDA torch's nvidia-* wheels."""
from ansible_collections.multinode.training.plugins.module_utils._build import nvcc


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")


def test_pip_assembled_toolkit_takes_library_headers_from_the_wheels(tmp_path):
    # The layout of this build host: toolkit without cuBLAS/cuSPARSE/cuSOLVER/cuRAND headers,
    # PyPI's CUDA 13 torch with them under site-packages/nvidia/cu13/include.
    cuda, site = tmp_path / "cuda-13.0", tmp_path / "site-packages"
    touch(cuda / "include" / "cuda_runtime.h")
    for header in ("cublas_v2.h", "cusparse.h", "cusolverDn.h", "curand.h", "cuda_runtime.h"):
        touch(site / "nvidia" / "cu13" / "include" / header)
    extra, missing, searched = nvcc.cuda_include_dirs(str(cuda), str(site))
    assert extra == [str(site / "nvidia" / "cu13" / "include")] and missing == []
    assert searched[0] == str(cuda / "include")


def test_cuda12_wheel_layout_and_missing_header(tmp_path):
    cuda, site = tmp_path / "cuda", tmp_path / "site"
    touch(cuda / "targets" / "x86_64-linux" / "include" / "cuda_runtime.h")
    touch(cuda / "targets" / "x86_64-linux" / "include" / "curand.h")
    touch(site / "nvidia" / "cublas" / "include" / "cublas_v2.h")
    touch(site / "nvidia" / "cusparse" / "include" / "cusparse.h")
    extra, missing, _searched = nvcc.cuda_include_dirs(str(cuda), str(site))
    assert extra == [str(site / "nvidia" / "cublas" / "include"), str(site / "nvidia" / "cusparse" / "include")]
    assert missing == ["cusolverDn.h"]


def test_full_toolkit_needs_nothing_extra(tmp_path):
    for header in nvcc.CUDA_HEADERS:
        touch(tmp_path / "include" / header)
    assert nvcc.cuda_include_dirs(str(tmp_path), None)[:2] == ([], [])


class _Module:
    def __init__(self, on_path):
        self.on_path = on_path

    def get_bin_path(self, name):
        return self.on_path


def nvcc_at(base):
    path = base / "bin" / "nvcc"
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_cuda_home_of_the_build_env_wins_over_path(tmp_path):
    # deepspeed_build_env: {CUDA_HOME: /usr/local/cuda-12.4} with CUDA 13's nvcc first on PATH: setup.py
    # compiles with 12.4, so the plan must judge 12.4.
    cuda12, cuda13 = nvcc_at(tmp_path / "cuda-12.4"), nvcc_at(tmp_path / "cuda-13.0")
    module = _Module(cuda13)
    assert nvcc.find_nvcc(module, "", {"CUDA_HOME": str(tmp_path / "cuda-12.4")}) == cuda12
    assert nvcc.find_nvcc(module, "", {}) == cuda13
    assert nvcc.find_nvcc(module, "", None) == cuda13


def test_cuda_home_without_nvcc_is_no_nvcc_not_another(tmp_path):
    cuda13 = nvcc_at(tmp_path / "cuda-13.0")
    (tmp_path / "cuda-12.4").mkdir()
    assert nvcc.find_nvcc(_Module(cuda13), "", {"CUDA_HOME": str(tmp_path / "cuda-12.4")}) is None
    # an explicit nvcc still comes first
    assert nvcc.find_nvcc(_Module(None), cuda13, {"CUDA_HOME": str(tmp_path / "cuda-12.4")}) == cuda13
