#!/usr/bin/env bash
# Install kopt's four packages and the example plugin into ./.venv-test and run the test suite. The tests
# get a virtual environment of their own: the README's first command installs kopt into ./.venv, whose torch
# and Triton the pins below would otherwise replace.
# CPU-only machines run everything but the tests marked `gpu`, which skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-test
# torch 2.13.0 first and pinned: any build works for the CPU tests, and a pin keeps pip from choosing one.
.venv-test/bin/python -m pip install -q torch==2.13.0
# Toolchains pinned for reproducible tests (kopt-triton and kopt-cutlass depend on them anyway): Triton (its
# interpreter, its compiler for sm_90 and the cuobjdump it ships) and the nvidia-cutlass wheel (CUTLASS/CuTe
# headers). Linters come with kopt-core's [test] extra.
.venv-test/bin/python -m pip install -q triton==3.9.0 nvidia-cutlass==4.2.0.0
.venv-test/bin/python -m pip install -q -e './kopt_core[test]' -e ./kopt_cuda -e ./kopt_triton -e ./kopt_cutlass \
  -e ./kopt_torch -e ./kopt_ray -e ./examples/kopt_example_backend
# Habits before tests: lint, format, types and the import contracts (all configured in pyproject.toml),
# then the suite.
.venv-test/bin/ruff check .
.venv-test/bin/ruff format --check .
.venv-test/bin/mypy
.venv-test/bin/lint-imports --no-cache
# A PostgreSQL server for the tests of studies shared through a database (the postgres_url fixture of
# tests/conftest.py), where PostgreSQL's initdb is installed and KOPT_TEST_POSTGRES_URL names no server
# already: scripts/postgres.sh starts one in a temporary folder, and the EXIT trap stops it however this
# script ends (a failed step under set -e, the mutation verdict's exit 1; INT and TERM exit to run it).
# Without a server those tests skip, or fail under KOPT_REQUIRE_POSTGRES=1 (.ci/run sets it).
if [ -z "${KOPT_TEST_POSTGRES_URL:-}" ] && bash scripts/postgres.sh bin >/dev/null 2>&1; then
  postgres_dir=$(mktemp -d)
  trap 'bash scripts/postgres.sh stop "$postgres_dir" || true; rm -rf "$postgres_dir"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if postgres_url=$(bash scripts/postgres.sh start "$postgres_dir"); then
    export KOPT_TEST_POSTGRES_URL="$postgres_url"
  else
    echo "scripts/postgres.sh could not start PostgreSQL (above): the shared-study tests have no server" >&2
  fi
fi
.venv-test/bin/python -m pytest "$@"
# The planted semantic bugs (docs/testing.md, "Planted semantic bugs"), on the full run only: each planted
# in a copy of kopt_core and killed by the tests it names (about 3 minutes).
if [ "$#" -eq 0 ]; then
  .venv-test/bin/python scripts/planted_bugs.py
fi
# Mutation testing (docs/testing.md, "CI policy"), on the full run only: the verdict modules whose source
# or tests the last commit changed, within 20 minutes. Only a measured score below 90% fails (exit 1); a
# clone without the parent commit, a tool that could not run (exit 2) or a module the budget did not
# cover is reported and passes. KOPT_MUTATION=0 skips it.
if [ "$#" -eq 0 ] && [ "${KOPT_MUTATION:-1}" != 0 ]; then
  if git rev-parse -q --verify 'HEAD~1^{commit}' >/dev/null 2>&1; then
    cores=$(nproc 2>/dev/null || echo 1)
    status=0
    .venv-test/bin/python scripts/mutation.py --changed-since HEAD~1 --budget-s 1200 --jobs $((cores < 4 ? cores : 4)) \
      || status=$?
    if [ "$status" -eq 1 ]; then
      echo "mutation testing: a module scores below 90% (build/mutation/score.md lists its survivors)" >&2
      exit 1
    elif [ "$status" -ne 0 ]; then
      echo "mutation testing gave no score (exit $status): reported, not failed" >&2
    fi
  else
    echo "mutation testing skipped: no parent commit to compare with (a shallow clone?)" >&2
  fi
fi
