"""What the actor sees in front of its recent messages, and how that window is cut.

- `actor`           the memory messages: the stable observation prefix, then the volatile hints;
- `relative_time`   the log's "(2 days ago)" annotations, day-granular so the prefix stays cacheable;
- `temporal`        markers before a message that arrives after a long pause;
- `tool_exchanges`  a tool call and its result stay together: where a cut of the window may fall.

Import the modules directly; the package re-exports nothing.
"""
