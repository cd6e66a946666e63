"""Make the test helpers in this folder importable as plain modules."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
