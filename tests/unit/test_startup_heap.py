"""`om serve` and the workers freeze their start-up heap: collections skip it, later garbage still goes.

Run in a fresh interpreter: freezing is for the life of a process, and the test runner's own objects must
not be frozen with it.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc, weakref
from om_core.process.startup_heap import freeze_startup_heap

class Node:
    pass

garbage = Node(); garbage.me = garbage; freed = weakref.ref(garbage); del garbage
kept = Node(); kept.me = kept
frozen = freeze_startup_heap()
later = Node(); later.me = later; collected = weakref.ref(later); del later
gc.collect()
scanned = {id(o) for o in gc.get_objects()}
print(frozen == gc.get_freeze_count() > 1000, freed() is None, id(kept) not in scanned, collected() is None)
"""


def test_start_up_objects_leave_the_collector_and_later_garbage_is_still_collected() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    frozen, startup_garbage_freed, kept_out_of_scans, later_garbage_collected = out.split()
    assert frozen == "True", "the start-up heap (modules, classes) is frozen"
    assert startup_garbage_freed == "True", "garbage made during start-up is collected, not frozen"
    assert kept_out_of_scans == "True", "a frozen object is not among those collections walk"
    assert later_garbage_collected == "True", "cycles made after the freeze are still collected"
