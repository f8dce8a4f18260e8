"""The observation log as text, which the Observer writes, the Reflector rewrites and the actor reads.

- `text`          its format: dated sections, tagged blocks, items sorted by time;
- `groups`        retrieval mode's groups: observations wrapped with the message range they came from;
- `resource_log`  resource scope's shared log: one section per thread, boundaries, the labels models see;
- `degenerate`    model output that loops, and lines too long to keep;
- `diff`          what a reflection changed, line by line (the dashboard shows it).

Import the modules directly; the package re-exports nothing.
"""
