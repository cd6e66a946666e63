"""Where things are, for every test wherever its file sits: the repository root, the tests, the fixtures."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures" / "grading"  # the grading fixtures (notebooks, classes, the compatibility course)
NOTEBOOK_DIR = ROOT / "notebooks"
