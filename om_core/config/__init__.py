"""Configuration, in two kinds that are read at different times by different people.

- `options`   the `observationalMemory` options a thread or resource runs with (what users write,
              resolved once into the numbers the engine compares against);
- `trust`     what a tenant key may write into those options, and the operator's bounds on it;
- `durations` idle durations as users write them (`"5m"`, `"1.5 h"`, milliseconds);
- `settings`  the service's settings from the environment (`OM_*`), read by every process at start.

Import the modules directly; the package re-exports nothing.
"""
