"""Plants a known loss path of the original (`tests/fuzz/mutants.py`) in this process when
`OM_PLANT_MUTANT` names one.

API and worker processes import it through their plugin hooks (`OM_PLUGINS`, `OM_WORKER_IMPORTS`), so the
distributed fuzz can be shown to catch a loss path planted where the work really runs. Never loaded
otherwise.
"""

from __future__ import annotations

import os

from tests.fuzz import mutants

PLANTED = os.environ.get("OM_PLANT_MUTANT") or None

if PLANTED is not None:
    mutants.apply(PLANTED)  # for the life of this process (and of the pool children forked from it)
