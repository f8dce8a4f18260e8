"""Runs at interpreter start when this folder is first on PYTHONPATH: installs the skewed clock of
`tests.support.clock_skew` if `OM_TEST_CLOCK_OFFSET_FILE` is set (and does nothing otherwise)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.support import clock_skew

clock_skew.install()
