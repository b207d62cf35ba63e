"""pytest setup for the whole repository: imports, and test isolation.

Every test sees its own empty config and data directories, never the developer's own config,
themes, prompt history or saved chats; a test about the environment sets its own variables on top.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
for p in (ROOT, ROOT / "tests"):   # tools/, luce_tui/ and bench/; the tests' shared helpers
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

# The llama.cpp reference and our engine share one ggml in this process; importing llama_cpp
# first mirrors how the benchmarks load them (see luce_engine/__init__.py for the other order).
import llama_cpp  # noqa: E402,F401


@pytest.fixture(autouse=True, scope="session")
def _weight_layout_as_the_reference():
    """Where the llama.cpp reference cannot repack as we do (AMX CPUs, tests/reference.py), our
    engines keep the file's layout too, so both sides run ggml's plain kernels."""
    from reference import REFERENCE_REPACKS
    from luce_engine.model import MODEL_DEFAULTS

    saved = MODEL_DEFAULTS["repack_weights"]
    MODEL_DEFAULTS["repack_weights"] = saved and REFERENCE_REPACKS
    yield
    MODEL_DEFAULTS["repack_weights"] = saved


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("LUCE_DATA_DIR", str(tmp_path / "data"))
