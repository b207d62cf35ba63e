"""Shared pytest setup: make the repo root importable (tools/, luce_tui/, engine/)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The llama.cpp reference and our engine share one ggml in this process; importing llama_cpp
# first mirrors how the benchmark loads them (see luce_engine/__init__.py for the other order).
import llama_cpp  # noqa: E402,F401
