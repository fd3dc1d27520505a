#!/usr/bin/env bash
# Install kopt's four packages and the example plugin into ./.venv and run the test suite.
# CPU-only machines run everything but the tests marked `gpu`, which skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
# torch 2.13.0 first and pinned: any build works for the CPU tests, and a pin keeps pip from choosing one.
.venv/bin/python -m pip install -q torch==2.13.0
# Toolchains pinned for reproducible tests (kopt-triton and kopt-cutlass depend on them anyway): Triton (its
# interpreter, its compiler for sm_90 and the cuobjdump it ships) and the nvidia-cutlass wheel (CUTLASS/CuTe
# headers). Linters come with kopt-core's [test] extra.
.venv/bin/python -m pip install -q triton==3.9.0 nvidia-cutlass==4.2.0.0
.venv/bin/python -m pip install -q -e './kopt_core[test]' -e ./kopt_cuda -e ./kopt_triton -e ./kopt_cutlass \
  -e ./examples/kopt_example_backend
# Habits before tests: lint, format and types (configured in pyproject.toml), then the suite.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
