"""Tuning of a long-running service process: the malloc arena cap and the start-up heap freeze.

It belongs to no use-case, but both shells (`om serve` in `om_api`, the workers in `om_workers`) call it,
and the shells import the core and not each other, so it lives in the core, apart from the engine.
Import the submodules directly (`malloc_arenas`, `startup_heap`): each is a few standard-library calls.
"""
