"""Shared test helpers. Tests never autoload installed plugins: each builds a plugin manager with the
plugin modules it needs."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLES = REPO / "examples"


def pytest_collection_modifyitems(config, items):
    skip_nvcc = pytest.mark.skip(reason="nvcc is not on PATH")
    has_nvcc = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
    for item in items:
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(skip_nvcc)


@pytest.fixture
def make_pm():
    from kopt_core.plugins import get_plugin_manager

    def make(*plugins):
        return get_plugin_manager(autoload=False, plugins=plugins)

    return make


@pytest.fixture
def postgres_url():
    """The URL of a fresh PostgreSQL database of its own for the test (dropped after it), made on the
    server ``KOPT_TEST_POSTGRES_URL`` names: scripts/test.sh starts one (scripts/postgres.sh) where
    PostgreSQL's initdb is installed. Without one the test is skipped, or fails where
    ``KOPT_REQUIRE_POSTGRES=1`` (CI, which installs PostgreSQL)."""
    required = os.environ.get("KOPT_REQUIRE_POSTGRES") == "1"
    give_up = pytest.fail if required else pytest.skip
    base = os.environ.get("KOPT_TEST_POSTGRES_URL")
    if not base:
        give_up(
            "no PostgreSQL server: KOPT_TEST_POSTGRES_URL is unset (scripts/test.sh starts one where initdb "
            "is installed; or run `scripts/postgres.sh start DIR` and export the URL it prints)"
        )
    try:
        import psycopg2
    except ImportError:
        give_up("psycopg2 is not installed: pip install -e './kopt_core[postgres]'")
    from sqlalchemy.engine import make_url

    url = make_url(base)
    name = f"kopt_test_{uuid.uuid4().hex[:16]}"
    connect = url.translate_connect_args(username="user", database="dbname")

    def admin(statement: str) -> None:
        connection = psycopg2.connect(**connect)
        connection.autocommit = True  # CREATE and DROP DATABASE cannot run in a transaction
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement)
        finally:
            connection.close()

    admin(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # a killed worker's connections too
