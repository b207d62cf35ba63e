"""Shared pytest setup: make the repo root importable (tools/, luce_tui/, engine/)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
