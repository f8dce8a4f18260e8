"""The memory evaluation (issue 33): how many answers of a long multi-session conversation om's context
holds, beside plain truncation to the same tokens, and how many its search finds in the top 10.

- `conversation.generate(seed, size)`: the deterministic conversation and its questions (`facts.py`,
  `filler.py` hold the wordings);
- `runner.evaluate(stack, conversation, run_id)`: plays it through `/turns` in thread and resource scope
  and measures each question; `local_stack.local_stack(workdir)` is a stack to play it on;
- `report.table` / `report.as_json`: the figures; `section.py` is the `make bench` section;
- `python -m tests.bench.memory_eval [--quick] [--json]`: all of it, standalone (docs/performance.md).
"""
