"""scripts/selection_corpus.py loaded as a module, for the tests of the corpus, the ladders and the
import parity (scripts/ is not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load():
    path = REPO / "scripts" / "selection_corpus.py"
    spec = importlib.util.spec_from_file_location("selection_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
