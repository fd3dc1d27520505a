"""Shared test helpers. Tests never autoload installed plugins: each builds a plugin manager with the
plugin modules it needs."""

from __future__ import annotations

import shutil
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
