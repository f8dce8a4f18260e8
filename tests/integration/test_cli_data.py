"""The data commands (`om search`, `om threads`, `om forget`) against a real API server (Postgres, keys,
inline executor), run as a user runs them: OM_BASE_URL and OM_API_KEY in the environment. Each `--json`
output is parsed and checked against what the API holds; the human output names the same things; another
tenant's key sees and erases nothing; and `om status` finds a thread by its public id and tenant."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from om_api.client import OMClient, OMNotFound
from om_app.cli import app as om_cli
from om_core.engine.log_edit import is_structural
from om_core.tenancy import access
from tests.support.api_server import ApiServer, api_server, free_port, new_id, om, tenant_key
from tests.support.workers import wait_until

__all__ = ["api_server", "om", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(180)]

CODE = "ZX-55310-QP"


def run(server: ApiServer | str, key: str, *args: str, stdin: str | None = None) -> Result:
    base_url = server if isinstance(server, str) else server.base_url
    env = {"OM_BASE_URL": base_url, "OM_API_KEY": key}
    return CliRunner().invoke(om_cli, list(args), env=env, input=stdin)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def other_key(pg_engine: Any) -> str:
    return access.create_key(pg_engine, new_id("tenant"), "other").secret


def test_threads_lists_the_keys_threads_and_pages(
    om: OMClient, api_server: ApiServer, tenant_key: str, other_key: str
) -> None:
    user, first, second = new_id("user"), new_id("t"), new_id("t")
    om.post_turn(first, [{"role": "user", "text": "one"}], resource_id=user)
    om.post_turn(
        second, [{"role": "user", "text": "two"}, {"role": "assistant", "text": "ok"}], resource_id=user
    )
    om.update_thread(second, title="Second thread")

    listed = as_json(run(api_server, tenant_key, "threads", "--resource", user, "--json"))
    assert [(t["thread_id"], t["messages"]) for t in listed["items"]] == [(first, 1), (second, 2)]
    assert listed["next_cursor"] is None

    page = as_json(run(api_server, tenant_key, "threads", "--resource", user, "--limit", "1", "--json"))
    assert [t["thread_id"] for t in page["items"]] == [first] and page["next_cursor"]
    rest = run(
        api_server, tenant_key, "threads", "--resource", user, "--cursor", page["next_cursor"], "--json"
    )
    assert [t["thread_id"] for t in as_json(rest)["items"]] == [second]

    human = run(api_server, tenant_key, "threads", "--resource", user)
    assert human.exit_code == 0, human.output
    lines = human.stdout.splitlines()
    assert lines[0].startswith(f"{first}\t{user}\t1 messages")
    assert lines[1].startswith(f"{second}\t{user}\t2 messages") and lines[1].endswith("Second thread")

    hidden = run(api_server, other_key, "threads", "--resource", user, "--json")
    assert hidden.exit_code == 1 and "resource_not_found" in hidden.stderr and hidden.stdout == ""
    assert run(api_server, other_key, "threads").stdout.strip() == "no threads"


def test_search_finds_the_code_in_both_outputs(om: OMClient, api_server: ApiServer, tenant_key: str) -> None:
    user, thread = new_id("user"), new_id("t")
    om.set_resource_config(user, {"retrieval": True})
    om.post_turn(
        thread, [{"id": "m1", "role": "user", "text": f"My locker code is {CODE}."}], resource_id=user
    )
    wait_until(lambda: om.search(user, CODE).count >= 1, deadline_s=60, what="the thread indexed")

    found = as_json(run(api_server, tenant_key, "search", CODE, "--resource", user, "--json"))
    assert found["resource_id"] == user
    assert [(r["kind"], r["id"], r["thread_id"]) for r in found["results"]] == [("message", "m1", thread)]
    in_thread = as_json(
        run(api_server, tenant_key, "search", CODE, "--thread", thread, "--kind", "message", "--json")
    )
    assert [r["id"] for r in in_thread["results"]] == ["m1"]

    human = run(api_server, tenant_key, "search", CODE, "--resource", user)
    assert human.exit_code == 0 and f"message  {thread}" in human.stdout and CODE in human.stdout

    neither = run(api_server, tenant_key, "search", CODE)
    assert neither.exit_code == 2 and "exactly one of --resource or --thread" in neither.output


def test_forget_erases_only_what_the_key_owns(
    om: OMClient, api_server: ApiServer, tenant_key: str, other_key: str
) -> None:
    user, thread, kept = new_id("user"), new_id("t"), new_id("t")
    om.post_turn(thread, [{"role": "user", "text": "forget me"}], resource_id=user)
    om.post_turn(kept, [{"role": "user", "text": "keep me"}], resource_id=new_id("user"))

    refused = run(api_server, other_key, "forget", "--thread", thread, "--yes", "--json")
    assert refused.exit_code == 1 and "error:" in refused.stderr and "404" in refused.stderr
    assert om.thread(thread).counts.messages == 1, "another tenant's key erased nothing"

    declined = run(api_server, tenant_key, "forget", "--thread", thread, stdin="n\n")
    assert declined.exit_code == 1 and "nothing forgotten" in declined.output
    assert om.thread(thread).counts.messages == 1

    forgot = as_json(run(api_server, tenant_key, "forget", "--thread", thread, "--yes", "--json"))
    assert forgot == {"forgot": "thread", "thread_id": thread}
    with pytest.raises(OMNotFound):
        om.thread(thread)

    gone = run(api_server, tenant_key, "forget", "--resource", user, stdin="y\n")
    assert gone.exit_code == 0 and f"forgot resource '{user}'" in gone.stdout
    assert om.thread(kept).counts.messages == 1, "only the named resource went"

    both = run(api_server, tenant_key, "forget", "--thread", kept, "--resource", user, "--yes")
    assert both.exit_code == 2 and "exactly one of" in both.output


def test_forget_one_observation_line(om: OMClient, api_server: ApiServer, tenant_key: str) -> None:
    thread = new_id("t")
    words = ("harbor", "lantern", "copper", "meadow", "signal", "orchard", "velvet", "canyon", "ember")
    for i in range(12):
        text = f"Message {i} is about " + " ".join(words[(i * 7 + k * k) % len(words)] for k in range(120))
        om.post_turn(thread, [{"role": "user" if i % 2 == 0 else "assistant", "text": text}])
    om.set_config(thread, {"observation": {"messageTokens": 1500, "bufferTokens": False}})
    assert om.observe(thread, wait=True).applied
    active = om.observations(thread).active
    assert active is not None and active.observations, "the offline Observer wrote no observations"
    lines = active.observations.split("\n")
    index = next(i for i, line in enumerate(lines) if not is_structural(line) and lines.count(line) == 1)

    line = str(index)
    forgot = as_json(
        run(api_server, tenant_key, "forget", "--thread", thread, "--line", line, "--yes", "--json")
    )
    assert forgot["forgot"] == "observation_line" and forgot["text"] == lines[index]
    after = om.observations(thread).active
    assert after is not None and after.observations.split("\n") == lines[:index] + lines[index + 1 :]

    past = run(api_server, tenant_key, "forget", "--thread", thread, "--line", "9999", "--yes")
    assert past.exit_code == 2 and "past them" in past.output


def test_no_server_says_where_it_looked(tenant_key: str) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    result = run(nowhere, tenant_key, "threads", "--json")
    assert result.exit_code == 1 and f"no answer from {nowhere}" in result.stderr
    assert result.stdout == "", "nothing a program would parse as output"


def test_status_takes_the_public_id_and_the_tenant(
    om: OMClient, tenant: str, postgres_url: str, redis_url: str
) -> None:
    thread = new_id("t")
    om.post_turn(thread, [{"role": "user", "text": "hello"}], resource_id=new_id("user"))
    env = {"OM_DATABASE_URL": postgres_url, "OM_REDIS_URL": redis_url}
    shown = CliRunner().invoke(om_cli, ["status", thread, "--tenant", tenant], env=env)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["threadId"] == thread

    untenanted = CliRunner().invoke(om_cli, ["status", thread], env=env)
    assert untenanted.exit_code == 1 and "--tenant" in untenanted.output
    stored = CliRunner().invoke(om_cli, ["status", f"{tenant}/{thread}"], env=env)
    assert stored.exit_code == 2 and "--tenant" in stored.output
