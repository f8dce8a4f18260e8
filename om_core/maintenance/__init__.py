"""Background recovery that beat schedules: nothing on a turn's path waits for it.

- `triggers`  the trigger rows a turn arms (idle activation) and beat claims, each once;
- `sweep`     one maintenance pass: due triggers, stale flags, stalled buffering, search stragglers,
              webhooks, usage deltas.

Import the modules directly; the package re-exports nothing.
"""
