"""The docs cannot drift from the code: the examples of README.md and of every page under docs/ are parsed
out and run (`tests.support.docs` lists the pages: README first, then docs/ in path order).

- every `om …` command it shows (code blocks and inline code) is a command line the real `om` parser
  accepts, its `--help` runs, and the installed `om` executable lists its subcommand;
- every `make` target it names exists in the Makefile (`make -n`), every `python -m` module it names
  declares the options used;
- every curl example runs, in page order, against one real API server (keys auth, the test Postgres) with
  the host, key and thread placeholders substituted; it must answer 2xx with every JSON field the
  paragraph after it names in backticks (`context.messages`, `active.observations`, …);
- every Python snippet (the client, the OpenAI proxy through the `openai` package, the observation line
  edits) is executed against the same server and its effect is checked in the stored thread; the hooks
  example is registered and its hooks called; the JSON configuration example is accepted by the
  configuration model; every ```python, ```ts, ```js and ```json block is one that a test runs;
- the endpoint table (the generated API reference) equals the server's OpenAPI paths, both ways;
- the environment table (the generated settings reference) lists exactly the variables of the settings
  models (`Settings`, `ApiSettings`, `WorkerSettings`), both ways, and each default it shows, set in the
  environment, gives the model's default; `om env` and `.env.example` agree with it; the option table (the
  generated options reference) names exactly the config options;
- the shown error messages are the ones the code produces.

Placeholders: `localhost:8088` is the server, `omk_...` a fresh tenant's key, `t-<n>` and `user-<n>` thread
and resource ids (fresh per test, the same within one test and so across every page's curl examples, which
run as one conversation that the README's quickstart starts: ids belong to one tenant), and the actor model
`openai/gpt-5-mini` becomes the fake echo actor `om-actor/echo` (no provider key exists here). `my_model`
in the client snippet is the caller's own model; the test passes a stand-in that records what it got.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer.main
from pydantic_settings import BaseSettings
from typer.testing import CliRunner

from om_adapters.celery_app import WorkerSettings
from om_api.client import OMClient
from om_api.settings import ApiSettings
from om_app.cli import app
from om_core.config.options import (
    ModelSettings,
    ObservationalMemoryConfig,
    ObservationConfig,
    ReflectionConfig,
    RetrievalConfig,
    WorkingMemoryConfig,
)
from om_core.config.settings import Settings
from om_core.engine import QUEUES
from om_core.errors import OMConfigError
from om_core.extractors.definition import parse_list
from om_core.hooks import DebugEvent, HookContext, ObserveHooks, registered_hooks, unregister_hooks
from tests.support.api_server import ApiServer, api_server, new_id, tenant_key
from tests.support.docs import REPO, Doc, docs

__all__ = ["api_server", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

OM_EXECUTABLE = REPO / ".venv" / "bin" / "om"
ACTOR_PLACEHOLDER, TEST_ACTOR = "openai/gpt-5-mini", "om-actor/echo"
runner = CliRunner()


# ------------------------------------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class Block:
    """A fenced code block, the page and line where it starts, and the paragraph right after it (what it
    is said to do)."""

    lang: str
    text: str
    page: str
    line: int
    after: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
#: Blocks whose lines are shell commands; diagrams and maps are ```text.
SHELL = ("", "sh", "bash")
FIELD_PATH = re.compile(r"^[A-Za-z_]+(?:\.[A-Za-z_]+)*$")


def blocks(pages: list[Doc]) -> list[Block]:
    """Every fenced block of the pages, in page order."""
    found = []
    for page in pages:
        text = page.text
        for match in FENCE.finditer(text):
            rest = text[match.end() :].lstrip("\n")
            paragraph = rest.split("\n\n", 1)[0]
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(match.group(1), match.group(2), page.name, line, paragraph))
    return found


def prose(text: str) -> str:
    """A page without its code blocks."""
    return FENCE.sub("", text)


def inline_codes(pages: list[Doc]) -> list[str]:
    """Inline code spans of the pages' prose (one may wrap onto the next line), whitespace normalised."""
    return [" ".join(span.split()) for page in pages for span in INLINE.findall(prose(page.text))]


def commands(block: Block) -> list[str]:
    """Shell commands of a block: comments dropped, continued lines and multi-line quotes kept whole."""
    out: list[str] = []
    pending = ""
    for line in block.text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        out.append(pending)
        pending = ""
    assert not pending, f"{block.where}: unterminated command {pending!r}"
    return out


def words(command: str) -> list[str]:
    return shlex.split(command.replace("\\\n", " "), comments=True)


def cells_of(row: str) -> list[str]:
    """A table row's cells; `\\|` inside a cell is a pipe, not a border."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def table(pages: list[Doc], first_header: str) -> list[list[str]]:
    """The rows of the Markdown table whose first header cell is `first_header`: there is one such table
    in the pages given."""
    found: list[tuple[str, list[list[str]]]] = []
    for page in pages:
        lines = page.text.splitlines()
        for index, line in enumerate(lines):
            if line.startswith("|") and cells_of(line)[0] == first_header:
                rows = []
                for row in lines[index + 2 :]:
                    if not row.startswith("|"):
                        break
                    rows.append(cells_of(row))
                found.append((page.name, rows))
    assert len(found) == 1, f"want one table headed {first_header!r}, found {[name for name, _ in found]}"
    return found[0][1]


def codes_in(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def om_command_lines(pages: list[Doc]) -> list[str]:
    """Every `om …` command the pages show, in blocks or inline, as written (without `.venv/bin/`)."""
    shown = [c for b in blocks(pages) if b.lang in SHELL for c in commands(b)]
    shown += inline_codes(pages)
    found = []
    for line in shown:
        command = line.split("#", 1)[0].strip().removeprefix(".venv/bin/")
        if command.startswith("om ") and command not in found:
            found.append(command)
    return found


def make_targets(pages: list[Doc]) -> list[str]:
    shown = [c for b in blocks(pages) if b.lang in SHELL for c in commands(b)] + inline_codes(pages)
    targets: list[str] = []
    for line in shown:
        argv = words(line) if line.startswith("make ") else []
        targets += [t for t in argv[1:] if "=" not in t and not t.startswith("-") and t not in targets]
    return targets


def curl_blocks(pages: list[Doc]) -> list[Block]:
    return [b for b in blocks(pages) if b.lang == "" and any(c.startswith("curl ") for c in commands(b))]


def python_blocks(pages: list[Doc]) -> list[Block]:
    return [b for b in blocks(pages) if b.lang == "python"]


def substitute(source: str, base_url: str, key: str, ids: dict[str, str]) -> str:
    source = source.replace("http://localhost:8088", base_url).replace("localhost:8088", base_url)
    source = source.replace("omk_...", key).replace(ACTOR_PLACEHOLDER, TEST_ACTOR)
    return re.sub(r"\b(?:t|user)-\d+\b", lambda m: ids.setdefault(m.group(), new_id("readme")), source)


def threads_of(ids: dict[str, str]) -> list[str]:
    """The ids the pages' thread placeholders (`t-42`) became."""
    return [real for placeholder, real in ids.items() if placeholder.startswith("t-")]


def field(payload: Any, path: str) -> Any:
    value = payload
    for name in path.split("."):
        assert isinstance(value, dict) and name in value, f"no field {path!r} in {json.dumps(payload)[:600]}"
        value = value[name]
    return value


PAGES = docs()
README_PAGE = PAGES[0]
#: The generated reference (scripts/gen_reference.py): the endpoint, variable and option tables live there.
REFERENCE = [page for page in PAGES if page.name.startswith("docs/reference/")]
OM_COMMANDS = om_command_lines(PAGES)

#: What marks each fenced example of these languages, and the test that runs it. A block that carries
#: none of the markers of its language is an example nothing runs.
RUN_BY: dict[str, dict[str, str]] = {
    "python": {
        "OMClient": "test_the_python_client_example_... here; tests/client/test_standalone.py",
        "from openai import": "test_the_openai_proxy_example_... here",
        "edit_observation": "test_the_line_edit_example_... here",
        "with_raw_response": "test_the_raw_response_example_... here",
        "register_hooks": "test_the_hooks_example_... here",
        "def verified": "tests/unit/test_webhook_rules.py",
        "OMSession": "tests/adapters/test_docs_examples.py",
        "OMMiddleware": "tests/adapters/test_docs_examples.py",
        "from standardwebhooks import": "tests/integration/test_webhook_signatures.py",
    },
    "ts": {
        "new OMClient": "tests/client_ts/test_typescript_client.py",
        "omMemory": "tests/client_ts/test_ai_sdk.py",
    },
    "js": {"standardwebhooks": "tests/integration/test_webhook_signatures.py"},
    "json": {
        "extract": "test_the_json_config_example_... here",
        "mcpServers": "tests/integration/test_mcp.py (starts the desktop configuration's command)",
    },
}


def test_the_parser_finds_every_kind_of_example() -> None:
    """So that the tests below cannot pass by finding nothing."""
    assert README_PAGE.path.name == "README.md" and len(PAGES) > 10, [p.name for p in PAGES]
    assert len(OM_COMMANDS) >= 10, OM_COMMANDS
    assert {"demo", "test", "test-unit", "lint", "typecheck", "bench", "docs"} <= set(make_targets(PAGES))
    assert len(curl_blocks(PAGES)) >= 10
    assert curl_blocks([README_PAGE]), "the quickstart posts a turn"
    sources = [b.text for b in python_blocks(PAGES)]
    assert any("OMClient" in s for s in sources) and any("from openai import" in s for s in sources)
    assert table(REFERENCE, "Variable") and table(REFERENCE, "Option") and table(REFERENCE, "Endpoint")


def test_every_example_in_a_language_is_one_a_test_runs() -> None:
    unclaimed = [
        block.where
        for block in blocks(PAGES)
        if block.lang in RUN_BY and sum(marker in block.text for marker in RUN_BY[block.lang]) != 1
    ]
    assert not unclaimed, f"examples no test runs (or claimed twice; see RUN_BY): {unclaimed}"
    for lang, markers in RUN_BY.items():
        for marker in markers:
            found = [b for b in blocks(PAGES) if b.lang == lang and marker in b.text]
            assert len(found) == 1, f"want one ```{lang} example with {marker!r}, found {len(found)}"


# -------------------------------------------------------------------------------------------- commands


def om_params(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Parse `om <argv>` with the real command tree (types converted, nothing run): the subcommand path
    and its parameters. Unknown subcommands and options and bad values fail here. A bare name in prose
    (`om status`, `om keys`) is a reference to the command: it must exist, its arguments may be left out."""
    command: Any = typer.main.get_command(app)
    rest = list(argv)
    path: list[str] = []
    while isinstance(getattr(command, "commands", None), dict) and (rest or not path):
        assert rest, f"`om {' '.join(argv)}` names no subcommand"
        name = rest.pop(0)
        assert name in command.commands, f"`{name}` is not an om subcommand (in `om {' '.join(argv)}`)"
        path.append(name)
        command = command.commands[name]
    with command.make_context(path[-1], rest, resilient_parsing=not rest) as ctx:
        return path, dict(ctx.params)


@pytest.mark.parametrize("command", OM_COMMANDS)
def test_each_om_command_is_accepted_and_its_help_runs(command: str) -> None:
    path, params = om_params(words(command)[1:])
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, f"`om {' '.join(path)} --help` failed:\n{result.output}"
    if "queues" in params and "--queues" in command:
        unknown = set(params["queues"].split(",")) - set(QUEUES)
        assert not unknown, f"`{command}` names unknown queues {unknown}"


def test_the_om_executable_offers_every_subcommand_the_readme_uses() -> None:
    result = subprocess.run(
        [str(OM_EXECUTABLE), "--help"], capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"│ (\w[\w-]*) ", result.stdout))
    used = {words(c)[1] for c in OM_COMMANDS}
    assert used <= listed, f"`om --help` does not list {used - listed}"


@pytest.mark.parametrize("target", make_targets(PAGES))
def test_each_make_target_exists(target: str) -> None:
    result = subprocess.run(
        ["make", "-n", "-C", str(REPO), target], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"`make {target}` does not exist:\n{result.stderr}"


def test_each_python_module_command_declares_its_options() -> None:
    """`python -m tests.bench.run --only SECTION`: importing the bench suite takes a minute, so its
    argparse declarations are read from the source instead."""
    modules = [words(c) for c in inline_codes(PAGES) if c.startswith("python -m ")]
    assert modules, "the docs show no `python -m` command"
    for argv in modules:
        source = REPO / (argv[2].replace(".", "/") + ".py")
        assert source.is_file(), f"`{' '.join(argv)}`: no module {argv[2]}"
        declared = {
            arg.value
            for call in ast.walk(ast.parse(source.read_text()))
            if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument"
            for arg in call.args
            if isinstance(arg, ast.Constant)
        }
        used = {w for w in argv[3:] if w.startswith("--")}
        assert used <= declared, f"`{' '.join(argv)}`: {argv[2]} has no option {used - declared}"


def test_files_the_docs_point_to_exist() -> None:
    """Paths written as code, from the repository root (Markdown links are checked by test_doc_links)."""
    named = [c for c in inline_codes(PAGES) if re.fullmatch(r"(deploy|docs|clients|scripts)/\S*|\S+\.md", c)]
    named += [".env.example"] if any("`.env.example`" in page.text for page in PAGES) else []
    assert len(named) > 5
    missing = sorted({path for path in named if not (REPO / path).exists()})
    assert not missing, f"the docs name files that do not exist: {missing}"


# ------------------------------------------------------------------------------------------ against a server


def run_curl(block: Block, command: str, server: ApiServer, key: str, ids: dict[str, str]) -> Any:
    shell = substitute(command, server.base_url, key, ids) + " --max-time 120 --write-out '\\n%{http_code}'"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, f"{block.where}: curl failed ({result.returncode}): {result.stderr}"
    body, _, status = result.stdout.rpartition("\n")
    assert status.startswith("2"), f"{block.where}: HTTP {status}: {body[:500]}\n{server.log_text()[-2000:]}"
    return json.loads(body)


def test_each_curl_example_answers_with_the_fields_the_docs_name(
    api_server: ApiServer, tenant_key: str
) -> None:
    ids: dict[str, str] = {}
    examples = curl_blocks(PAGES)
    for block in examples:
        fields = [c for c in codes_in(block.after) if FIELD_PATH.match(c)]
        assert fields, f"{block.where}: the paragraph after the example names no response field"
        for command in commands(block):
            payload = run_curl(block, command, api_server, tenant_key, ids)
            for path in fields:
                field(payload, path)
    with OMClient(api_server.base_url, tenant_key) as om:
        (thread,) = threads_of(ids)
        stored = om.messages(thread).messages
        assert [m.id for m in stored] == ["m1"], "the turn example stored its message once"


def run_snippet(
    block: Block, server: ApiServer, key: str, ids: dict[str, str], **names: Any
) -> dict[str, Any]:
    source = substitute(block.text, server.base_url, key, ids)
    namespace: dict[str, Any] = {"__name__": "readme_example", **names}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, block.where, "exec"), namespace)
    namespace["__printed__"] = printed.getvalue()
    return namespace


def snippet(marker: str) -> Block:
    (found,) = [b for b in python_blocks(PAGES) if marker in b.text]
    return found


def test_the_python_client_example_stores_the_turn_and_hands_the_model_its_context(
    api_server: ApiServer, tenant_key: str
) -> None:
    seen: list[Any] = []

    def my_model(messages: Any) -> str:
        seen.append(messages)
        return "Nice to meet you, Dana."

    ids: dict[str, str] = {}
    run_snippet(snippet("OMClient"), api_server, tenant_key, ids, my_model=my_model)
    (context,) = seen
    assert isinstance(context, list) and context[-1] == {"role": "user", "content": "Hi, I'm Dana"}
    (thread,) = threads_of(ids)
    with OMClient(api_server.base_url, tenant_key) as om:
        stored = [(m.role, m.parts[0].text) for m in om.messages(thread).messages]
    assert stored == [("user", "Hi, I'm Dana"), ("assistant", "Nice to meet you, Dana.")]


def test_the_openai_proxy_example_gets_a_reply_and_stores_both_messages(
    api_server: ApiServer, tenant_key: str
) -> None:
    ids: dict[str, str] = {}
    namespace = run_snippet(snippet("from openai import"), api_server, tenant_key, ids)
    reply = namespace["completion"].choices[0].message.content
    assert reply and namespace["__printed__"].strip() == reply.strip()
    (thread,) = threads_of(ids)
    with OMClient(api_server.base_url, tenant_key) as om:
        stored = [(m.role, m.parts[0].text) for m in om.messages(thread).messages]
    question = "Any cafe tips near the river?"
    assert stored == [("user", question), ("assistant", reply)], "the proxy stored the turn"


def test_the_line_edit_example_corrects_and_forgets_the_lines_it_read(
    api_server: ApiServer, tenant_key: str
) -> None:
    """The example corrects line 3 and forgets line 5 of a thread's log; here the thread is one whose
    messages the offline Observer observed (a low threshold, then a manual observe), so its log has
    those lines."""
    ids = {"t-42": new_id("readme")}
    thread, resource = ids["t-42"], new_id("user")
    low = {"observation": {"messageTokens": 1000, "bufferTokens": False}}
    headers = {"authorization": f"Bearer {tenant_key}"}
    with httpx.Client(base_url=api_server.base_url, headers=headers, timeout=60) as http:
        configured = http.put(
            f"/v1/threads/{thread}/config", json={"overrides": low, "resource_id": resource}
        )
        assert configured.status_code == 200, configured.text
    with OMClient(api_server.base_url, tenant_key) as om:
        for number in range(16):
            kept = FACT_WORDS[number]
            fact = f"Fact {number}: my locker code is {7000 + number} and I keep the {kept} in it. "
            said = [{"id": f"u{number}", "role": "user", "text": fact * 6}]
            om.post_turn(thread, said, resource_id=resource, context="none")
        om.observe(thread)
        before = om.observations(thread).active.observations.split("\n")
        assert len(before) > 5, f"the offline Observer wrote too few lines for the example: {before}"
        run_snippet(snippet("edit_observation"), api_server, tenant_key, ids, om=om)
        after = om.observations(thread).active.observations.split("\n")
    assert after[3] == "User moved to Lisbon (not Porto)"
    assert before[5] not in after and len(after) == len(before) - 1


def test_the_raw_response_example_prints_what_it_says(api_server: ApiServer, tenant_key: str) -> None:
    ids: dict[str, str] = {}
    with OMClient(api_server.base_url, tenant_key) as om:
        namespace = run_snippet(snippet("with_raw_response"), api_server, tenant_key, ids, om=om)
        (thread,) = threads_of(ids)
        assert om.working_memory(thread).content == "# Notes\n- name: Dana"
    printed = namespace["__printed__"].splitlines()
    assert printed == ["200 application/json 1", f"{ids['user-7']} 1"]


FACT_WORDS = (
    "atlas", "banjo", "camera", "diary", "easel", "flute", "globe", "helmet",
    "ink", "jacket", "kettle", "lamp", "map", "notebook", "oboe", "passport",
)  # fmt: skip


def test_the_hooks_example_registers_hooks_that_read_what_a_hook_is_given() -> None:
    block = snippet("register_hooks")
    before = registered_hooks()
    exec(compile(block.text, block.where, "exec"), {"__name__": "docs_example"})
    added = [hooks for hooks in registered_hooks() if hooks not in before]
    printed = io.StringIO()
    try:
        (hooks,) = added
        assert isinstance(hooks, ObserveHooks)
        usage = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}
        ended = HookContext("t-1", "user-1", "manual", "c-1", "observation", usage=usage, cost=0.25)
        progress = DebugEvent("step_progress", datetime.now(UTC), "t-1", "user-1", {"pendingTokens": 7})
        with contextlib.redirect_stdout(printed):
            hooks.on_observation_end(ended)
            hooks.on_debug_event(progress)
    finally:
        for hooks in added:
            unregister_hooks(hooks)
    assert printed.getvalue().splitlines() == [
        f"t-1 manual {usage} 0.25 None",
        "step_progress {'pendingTokens': 7}",
    ]


def test_the_json_config_example_is_a_config_the_model_accepts() -> None:
    (block,) = [b for b in blocks(PAGES) if b.lang == "json" and "extract" in b.text]
    config = ObservationalMemoryConfig.parse(json.loads(block.text))
    extractors = parse_list(config.observation.extract, field="observation.extract", resolve_use=False)
    assert [e.slug for e in extractors] == ["profile", "favorite-drink", "blockers"]
    assert [e.schema is not None for e in extractors] == [True, False, False], "one structured, two inline"


def endpoint_rows() -> set[tuple[str, str]]:
    rows = set()
    for cells in table(REFERENCE, "Endpoint"):
        method, path = codes_in(cells[0])[0].split()
        rows.add((method.lower(), re.sub(r"\{\w+\}", "{}", path)))
    return rows


def test_the_endpoint_table_is_the_servers_api(api_server: ApiServer) -> None:
    with httpx.Client(base_url=api_server.base_url, timeout=60) as http:
        spec = http.get("/openapi.json").json()
        docs = http.get("/docs")
    served = {
        (method, re.sub(r"\{\w+\}", "{}", path)) for path, ops in spec["paths"].items() for method in ops
    }
    listed = endpoint_rows()
    assert docs.status_code == 200 and ("get", "/docs") in listed
    listed.discard(("get", "/docs"))
    assert listed - served == set(), "the docs list endpoints the server does not have"
    assert served - listed == set(), "the server has endpoints the docs do not list"


# -------------------------------------------------------------------------------------------- configuration


SETTINGS_MODELS: tuple[type[BaseSettings], ...] = (Settings, ApiSettings, WorkerSettings)


def variables() -> dict[str, tuple[type[BaseSettings], str]]:
    """Every variable the settings models read: name -> (model, field)."""
    known: dict[str, tuple[type[BaseSettings], str]] = {}
    for model in SETTINGS_MODELS:
        prefix = str(model.model_config.get("env_prefix", ""))
        for name in model.model_fields:
            known.setdefault(f"{prefix}{name.upper()}", (model, name))
    return known


def env_table() -> dict[str, str]:
    rows = {}
    for cells in table(REFERENCE, "Variable"):
        (name,) = codes_in(cells[0])
        rows[name] = cells[1]
    return rows


def test_the_environment_table_lists_exactly_the_settings() -> None:
    listed, known = set(env_table()), set(variables())
    assert listed - known == set(), "the docs list variables no settings model reads"
    assert known - listed == set(), "settings the docs' table does not list"


def shown_default(cell: str) -> tuple[str, str | None]:
    """('unset', None), ('empty', '') or ('value', the text a user would put in the variable)."""
    if cell.startswith("unset"):
        return "unset", None
    if cell.startswith("empty"):
        return "empty", ""
    assert cell.startswith("`"), f"a default is `value`, unset or empty, not {cell!r}"
    return "value", codes_in(cell)[0]


@pytest.mark.parametrize("name", sorted(env_table()))
def test_each_default_in_the_table_is_the_settings_default(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, field_name = variables()[name]
    default = model.model_fields[field_name].get_default(call_default_factory=True)
    kind, text = shown_default(env_table()[name])
    if kind == "unset":
        assert default is None, f"{name}: the docs say unset, the default is {default!r}"
        return
    for variable in list(os.environ):
        if variable.startswith("OM_"):
            monkeypatch.delenv(variable)
    monkeypatch.setenv(name, text or "")
    parsed = getattr(model(_env_file=None), field_name)
    assert parsed == default, f"{name}={text!r} gives {parsed!r}, the default is {default!r}"


def test_om_env_lists_the_same_variables() -> None:
    result = runner.invoke(app, ["env"])
    assert result.exit_code == 0, result.output
    assert set(re.findall(r"^(OM_\w+):", result.output, re.MULTILINE)) == set(env_table())


def test_env_example_only_sets_known_variables() -> None:
    names = set(re.findall(r"^#?\s*(OM_\w+)=", (REPO / ".env.example").read_text(), re.MULTILINE))
    assert names and names <= set(env_table()), names - set(env_table())


def option_rows() -> set[str]:
    rows: set[str] = set()
    for cells in table(REFERENCE, "Option"):
        first, *others = codes_in(cells[0])
        prefix = first.rpartition(".")[0]
        rows |= {first, *(f"{prefix}.{o}" if prefix else o for o in others)}
    return rows


def test_the_option_table_names_exactly_the_config_options() -> None:
    """Every leaf option; `retrieval` is also a value of its own (`true`), the other blocks only hold."""
    option_blocks = ("observation", "reflection", "workingMemory")
    known = {k for k in ObservationalMemoryConfig.public_keys() if k not in option_blocks}
    known |= {f"retrieval.{k}" for k in RetrievalConfig.public_keys()}
    for name, block in (("observation", ObservationConfig), ("reflection", ReflectionConfig)):
        known |= {f"{name}.{k}" for k in block.public_keys() if k != "modelSettings"}
        known |= {f"{name}.modelSettings.{k}" for k in ModelSettings.public_keys()}
    known |= {f"workingMemory.{k}" for k in WorkingMemoryConfig.public_keys()}
    assert option_rows() - known == set(), "the docs list options the config does not have"
    assert known - option_rows() == set(), "options the docs' table does not list"


def test_the_invalid_config_example_is_the_real_error() -> None:
    shape = re.compile(r"\[(\w+)\] ([\w.]+)=(\S+): \.\.\.$")
    (example,) = [c for c in inline_codes(PAGES) if shape.match(c)]
    code, path, value = shape.match(example).groups()  # type: ignore[union-attr]
    option: dict[str, Any] = {}
    *parents, leaf = path.split(".")
    target = option
    for parent in parents:
        target = target.setdefault(parent, {})
    target[leaf] = json.loads(value)
    with pytest.raises(OMConfigError) as refused:
        ObservationalMemoryConfig.parse(option)
    assert str(refused.value).startswith(example.removesuffix("..."))
    assert refused.value.code == code


def test_the_startup_error_example_is_what_om_serve_prints(postgres_url: str, tmp_path: Path) -> None:
    (example,) = [b for b in blocks(PAGES) if b.text.startswith("error: ")]
    (line,) = example.text.splitlines()
    model = re.match(r"error: OM_MODEL=(\S+) ", line).group(1)  # type: ignore[union-attr]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_") and not k.endswith("_API_KEY")}
    env |= {"OM_DATABASE_URL": postgres_url, "OM_MODEL": model}
    result = subprocess.run(
        [str(OM_EXECUTABLE), "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1 and result.stderr.splitlines() == [line], result.stderr
