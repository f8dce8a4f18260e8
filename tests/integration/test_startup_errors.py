"""`om` refuses to start, within seconds and in one line, when a service or a model key it needs is missing.

Each row runs the real `om` executable as a subprocess with one thing wrong: a database URL nobody listens
on, one that accepts the connection and never answers (a socket that listens but never speaks, so only a
connect timeout ends the wait), a Redis or broker that refuses, a model whose provider has no key (from
OM_MODEL, from OM_CONFIG, or the default model when OM_MODEL is unset). Everything else points at the real
test Postgres and Redis, so exactly one problem exists and exactly one line must say so: the setting, its
value with the password masked, and what to do; exit code 1; no traceback; the password nowhere in the
output. Control rows: a key kept in `.env` counts (only the real fault is reported), and `om migrate`
against the reachable test Postgres succeeds.

The rows run four at a time (they are independent processes), so the table costs a few process starts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.api_server import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

OM = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "om"
PASSWORD = "s3cret-pw"
#: Generous: many `om` processes start at once on 2 shared cores. A probe without its own timeout
#: against the silent socket would never end, so finishing at all is the point.
DEADLINE_S = 60.0


@dataclass(frozen=True)
class Case:
    """One start of `om`. Env values are templates: {db}, {redis} (the real services), {refused} (a port
    nobody listens on), {silent} (a port that accepts and never answers); None unsets the variable."""

    id: str
    argv: tuple[str, ...]
    env: Mapping[str, str | None]
    setting: str | None  # the setting the one error line must name; None: the command must succeed
    shown: tuple[str, ...] = ()
    dotenv: str = ""
    expect_stdout: str = ""
    exit_code: int = 1  # 2: a setting is malformed (nothing was even tried)


DB_REFUSED = f"postgresql+psycopg2://om:{PASSWORD}@127.0.0.1:{{refused}}/om"
REDIS_REFUSED = f"redis://:{PASSWORD}@127.0.0.1:{{refused}}/0"
CELERY_OK = {"OM_DATABASE_URL": "{db}", "OM_REDIS_URL": "{redis}"}

CASES = [
    Case(
        "migrate/database-refused",
        ("migrate",),
        {"OM_DATABASE_URL": DB_REFUSED},
        "OM_DATABASE_URL",
        ("om:***@127.0.0.1:{refused}/om", "Connection refused", "start the database"),
    ),
    Case(
        "migrate/database-silent",
        ("migrate",),
        {"OM_DATABASE_URL": f"postgresql+psycopg2://om:{PASSWORD}@127.0.0.1:{{silent}}/om"},
        "OM_DATABASE_URL",
        ("om:***@127.0.0.1:{silent}/om", "timeout"),
    ),
    Case(
        "status/database-refused",
        ("status", "t-1"),
        {"OM_DATABASE_URL": DB_REFUSED},
        "OM_DATABASE_URL",
        ("om:***@127.0.0.1:{refused}/om", "Connection refused"),
    ),
    Case(
        "serve/database-refused",
        ("serve",),
        {"OM_DATABASE_URL": DB_REFUSED},
        "OM_DATABASE_URL",
        ("om:***@127.0.0.1:{refused}/om", "Connection refused"),
    ),
    Case(
        "worker/redis-refused",
        ("worker", "--queues", "om.observe"),
        {**CELERY_OK, "OM_REDIS_URL": REDIS_REFUSED},
        "OM_REDIS_URL",
        ("redis://:***@127.0.0.1:{refused}/0", "Connection refused", "start Redis"),
    ),
    Case(
        "beat/redis-refused",
        ("beat",),
        {**CELERY_OK, "OM_REDIS_URL": REDIS_REFUSED},
        "OM_REDIS_URL",
        ("redis://:***@127.0.0.1:{refused}/0",),
    ),
    Case(
        "beat/broker-refused",
        ("beat",),
        {**CELERY_OK, "OM_BROKER_URL": f"redis://:{PASSWORD}@127.0.0.1:{{refused}}/1"},
        "OM_BROKER_URL",
        ("redis://:***@127.0.0.1:{refused}/1", "start the broker"),
    ),
    Case(
        "serve/celery-redis-refused",
        ("serve",),
        {**CELERY_OK, "OM_EXECUTOR": "celery", "OM_REDIS_URL": REDIS_REFUSED},
        "OM_REDIS_URL",
        ("redis://:***@127.0.0.1:{refused}/0",),
    ),
    Case(
        "serve/model-without-key",
        ("serve",),
        {"OM_DATABASE_URL": "{db}", "OM_MODEL": "openai/gpt-4o-mini"},
        "OM_MODEL",
        ("OM_MODEL=openai/gpt-4o-mini", "set OPENAI_API_KEY", "om-local/extractive"),
    ),
    Case(
        "worker/default-model-without-key",
        ("worker",),
        {**CELERY_OK, "OM_MODEL": None},
        "OM_MODEL",
        ("google/gemini-2.5-flash", "GEMINI_API_KEY", "set OM_MODEL"),
    ),
    Case(
        "worker/config-model-without-key",
        ("worker",),
        {
            **CELERY_OK,
            "OM_MODEL": None,
            "OM_CONFIG": '{"observation": {"model": "anthropic/claude-sonnet-4-5"}, '
            '"reflection": {"model": "om-local/extractive"}}',
        },
        "OM_CONFIG",
        ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    ),
    Case(
        "worker/key-in-dotenv-counts",
        ("worker",),
        {**CELERY_OK, "OM_MODEL": "openai/gpt-4o-mini", "OM_REDIS_URL": REDIS_REFUSED},
        "OM_REDIS_URL",
        ("redis://:***@127.0.0.1:{refused}/0",),
        dotenv="OPENAI_API_KEY=sk-from-dotenv\n",
    ),
    Case(
        "worker/malformed-worker-setting",
        ("worker",),
        {**CELERY_OK, "OM_WORKER_MAX_DELIVERIES": "zero"},
        "OM_WORKER_MAX_DELIVERIES",
        ("'zero' is invalid", "integer"),
        exit_code=2,
    ),
    Case(
        "beat/worker-settings-that-contradict",
        ("beat",),
        {**CELERY_OK, "OM_WORKER_SOFT_TIME_LIMIT_S": "700"},
        "OM_WORKER_SOFT_TIME_LIMIT_S",
        ("must be below OM_WORKER_TIME_LIMIT_S",),
        exit_code=2,
    ),
    Case(
        "worker/model-retries-that-outlast-its-tasks",
        ("worker",),
        {**CELERY_OK, "OM_MODEL_RETRY_BASE_DELAY_S": "60", "OM_MODEL_RETRY_MAX_DELAY_S": "600"},
        "OM_MODEL_RETRY_",
        ("up to 3960s", "OM_WORKER_SOFT_TIME_LIMIT_S"),
        exit_code=2,
    ),
    Case(
        "serve/malformed-service-setting",
        ("serve",),
        {"OM_DATABASE_URL": "{db}", "OM_BLOCKING_DEADLINE_S": "soon"},
        "OM_BLOCKING_DEADLINE_S",
        ("'soon' is invalid",),
        exit_code=2,
    ),
    Case(
        "up/model-without-key",
        ("up",),
        {"OM_MODEL": "openai/gpt-4o-mini"},
        "OM_MODEL",
        ("OM_MODEL=openai/gpt-4o-mini", "set OPENAI_API_KEY"),
    ),
    Case(
        "migrate/everything-reachable",
        ("migrate",),
        {"OM_DATABASE_URL": "{db}"},
        None,
        expect_stdout="schema at revision",
    ),
]


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float
    values: dict[str, str] = field(default_factory=dict)


def environment(case: Case, values: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without any om setting or provider key, then the case's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_") and not k.endswith("_API_KEY")}
    env |= {"OM_MODEL": "om-local/extractive", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for name, template in case.env.items():
        if template is None:
            env.pop(name, None)
        else:
            env[name] = fill(template, values)
    return env


def fill(template: str, values: Mapping[str, str]) -> str:
    """`{name}` placeholders replaced (not str.format: JSON values have braces of their own)."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def start(case: Case, values: dict[str, str], workdir: Path) -> Outcome:
    workdir.mkdir(parents=True)
    if case.dotenv:
        (workdir / ".env").write_text(case.dotenv)
    began = time.monotonic()
    result = subprocess.run(
        [str(OM), *case.argv],
        env=environment(case, values),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    return Outcome(result.returncode, result.stdout, result.stderr, time.monotonic() - began, values)


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel completes the handshake) and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(32)
        yield int(listener.getsockname()[1])


@pytest.fixture(scope="module")
def outcomes(
    postgres_url: str, redis_url: str, silent_port: int, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Outcome]:
    values = {"db": postgres_url, "redis": redis_url, "refused": str(free_port()), "silent": str(silent_port)}
    root = tmp_path_factory.mktemp("startup")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {c.id: pool.submit(start, c, values, root / c.id.replace("/", "-")) for c in CASES}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_om_start(case: Case, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[case.id]
    output = outcome.stdout + outcome.stderr
    assert "Traceback" not in output, output
    assert PASSWORD not in output, "the password is masked"
    assert outcome.elapsed_s < DEADLINE_S
    if case.setting is None:
        assert outcome.returncode == 0, output
        assert case.expect_stdout in outcome.stdout
        return
    assert outcome.returncode == case.exit_code, output
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, f"one line, not:\n{outcome.stderr}"
    (line,) = lines
    assert line.startswith(f"error: {case.setting}"), line
    for text in case.shown:
        assert fill(text, outcome.values) in line, f"{text!r} missing from: {line}"
    assert outcome.stdout == "", "nothing started, so nothing printed"
