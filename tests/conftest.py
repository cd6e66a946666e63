"""Make the test helpers in this folder, and the maintainers' scripts in tools/, importable as plain modules."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tools"))
