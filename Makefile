# The two commands the README promises: `make demo` and `make test`.
# Everything else here is a step of one of them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Scenarios are picked up from molecule/*/molecule.yml (`default` and `launch_diagnosis`
# are the 3-node launch cluster, each with its verify steps); override to run a subset:
#   make molecule SCENARIOS="toolchain deepspeed_build"
# Two scenarios run at once (MOLECULE_STREAMS=1 for one at a time; scripts/run_molecule.sh).
SCENARIOS ?= $(sort $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))

.PHONY: demo test venv venv-test harness host-packages images checks lint sanity unit badinput wheel cuda-build gpu-bundle gpu-check molecule clean

## demo: create .venv, then run the main job on the embedded default (this machine):
## build the DeepSpeed wheel, install it into a verified venv, launch the smoke job.
demo: venv
	$(BIN)/ansible-playbook build_deepspeed.yml
	$(BIN)/ansible-playbook train.yml

## test: everything the tests need, then all tests: checks (lint sanity unit badinput), wheel and
## the molecule scenarios in two streams, cuda-build then gpu-check beside them; `make images`
## runs beside the checks, the scenarios wait for it (scripts/run_tests.sh).
test: venv-test host-packages
	MAKE="$(MAKE)" SCENARIOS="$(SCENARIOS)" bash scripts/run_tests.sh

$(BIN)/ansible-playbook: requirements.txt
	bash scripts/bootstrap_venv.sh $(VENV) requirements.txt
	touch $@

$(BIN)/molecule: requirements.txt requirements-test.txt
	bash scripts/bootstrap_venv.sh $(VENV) requirements-test.txt
	touch $@

venv: $(BIN)/ansible-playbook
venv-test: $(BIN)/ansible-playbook $(BIN)/molecule

## harness: what the molecule scenarios need: host-packages, then images.
harness: host-packages images

## host-packages: a Docker engine (and debootstrap), headless Chromium, the ssh client: apt on this machine.
host-packages:
	bash scripts/ensure_docker.sh
	bash scripts/ensure_apt_tools.sh chromium chromium
	bash scripts/ensure_apt_tools.sh openssh-client ssh ssh-keygen

## images: the molecule base images, the Slurm cluster image and its node image with a preinstalled
## torch, the host wheelhouse; no apt on this machine (debootstrap installs into its own root), so
## it may run beside the checks.
images:
	bash scripts/base_images.sh bookworm bullseye
	bash scripts/slurm_image.sh
	PYTHON=$(PYTHON) bash scripts/wheelhouse.sh
	bash scripts/site_env_image.sh

## checks: the tests that need no container and no build; each runs even if one before failed.
checks:
	@rc=0; for step in lint sanity unit badinput; do \
	  echo "=== make $$step"; $(MAKE) --no-print-directory $$step || rc=1; done; exit $$rc

lint: venv-test
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production

sanity: venv-test
	bash scripts/sanity.sh
	bash scripts/check_collection_install.sh

unit: venv-test
	$(BIN)/python -m pytest -q tests/unit

## badinput: every case of tests/badinput/cases.yml refused before any work
## (real ansible-playbook runs on this machine; no Docker, no build, no job).
badinput: venv-test
	$(BIN)/python -m pytest -q tests/badinput

## wheel: the real build on this machine, twice: the second run must change nothing.
wheel: venv
	bash scripts/check_build_idempotent.sh

## cuda-build: fused_adam built twice, each checked from its binary: for 8.0;9.0+PTX with nvcc 13.0
## against PyPI's torch 2.13.0 (CUDA 13.0), and for 7.0;8.0+PTX (sm_70: CUDA 12 only) with a CUDA
## 12.4 toolkit against PyPI's torch 2.10.0 (CUDA 12.8); the CUDA stacks (~6.7 GB) and the builds
## are cached outside the clone.
cuda-build: venv
	bash scripts/check_cuda_build.sh

## gpu-bundle: .gpu/, what the borrowed GPU machine lacks for scripts/gpu_check.sh (CPython 3.12
## wheels, DeepSpeed's source, community.general), then the offline check that it is complete.
gpu-bundle: venv
	$(BIN)/python scripts/gpu_bundle.py build .gpu
	$(BIN)/python scripts/gpu_bundle.py check .gpu

## gpu-check: scripts/gpu_check.sh (the GPU machine's one call); here, without a GPU, its CPU
## part: the bundle check, a build against a preinstalled torch, then its stop line. Its work
## folder (the venv with torch, the build and its wheel) is cached outside the clone, as
## cuda-build's: fresh clones on this machine reuse the wheel while the role's build key holds.
gpu-check: gpu-bundle
	GPU_CHECK_WORK="$${GPU_CHECK_WORK:-$${XDG_CACHE_HOME:-$$HOME/.cache}/multinode-training/gpu-check}" \
	  bash scripts/gpu_check.sh

molecule: venv-test harness
	bash scripts/run_molecule.sh $(SCENARIOS)

clean:
	rm -rf $(VENV) .cache .gpu dist runs
