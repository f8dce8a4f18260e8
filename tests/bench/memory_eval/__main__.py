"""`python -m tests.bench.memory_eval [--quick] [--json] [--seed N]`: the memory evaluation, standalone.

Uses the Postgres and Redis `scripts/testenv.py run -- ...` exports, or starts throwaway ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.bench.memory_eval.conversation import generate
from tests.bench.memory_eval.local_stack import local_stack
from tests.bench.memory_eval.report import as_json, table
from tests.bench.memory_eval.runner import SCOPES, evaluate


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.memory_eval", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="the ~120-turn conversation (default: ~600 turns)"
    )
    parser.add_argument("--size", choices=("tiny", "quick", "full"), default=None, help="overrides --quick")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--scope", choices=SCOPES, action="append", help="default: both")
    parser.add_argument("--json", action="store_true", help="print the results as JSON, not a table")
    parser.add_argument("--workdir", type=Path, default=None, help="logs (default: a temporary directory)")
    args = parser.parse_args(argv)
    size = args.size or ("quick" if args.quick else "full")
    conversation = generate(args.seed, size)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="om-memory-eval-"))

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    say(f"memory evaluation ({size}): {len(conversation.turns)} turns; logs in {workdir}")
    with local_stack(workdir) as stack:
        results = evaluate(
            stack, conversation, uuid.uuid4().hex[:8], scopes=args.scope or SCOPES, on_progress=say
        )
    if args.json:
        print(json.dumps(as_json(conversation, results), indent=2))
    else:
        print(table(conversation, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
