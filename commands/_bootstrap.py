"""Lets `python commands/<tool>.py` run from a checkout that is not pip-installed."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
