"""The deployment files agree with the code they deploy.

Docker and a cluster are not available here, so the files are parsed instead: every process they start
must be a command line the real `om` parser accepts, every `OM_*` setting they pass must be one the
settings model knows (with a value it accepts), and the queue layout, beat singleton, probes and
autoscalers must fit together. A renamed option or setting then breaks this test, not a deployment.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
import yaml  # type: ignore[import-untyped]
from typer.testing import CliRunner

from om_adapters.celery_app import WorkerSettings
from om_api.settings import ApiSettings
from om_app.cli import app
from om_app.embedded import TURN_QUEUES
from om_app.preflight import check_flower_auth
from om_core.config.settings import Settings
from om_core.engine import MAINTENANCE_QUEUE
from om_core.engine import QUEUES as TABLE_QUEUES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
K8S_DIR = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"

# One worker group per queue of the engine's task table; om.maintenance runs in exactly one group.
MAINTENANCE = MAINTENANCE_QUEUE
QUEUES = frozenset(TABLE_QUEUES)
ISSUE_GROUPS = {frozenset({queue}) for queue in QUEUES - {MAINTENANCE}}

EXECUTOR_VAR = "OM_EXECUTOR"
KNOWN_OM_VARS = frozenset({f"OM_{name.upper()}" for name in Settings.model_fields} | {EXECUTOR_VAR})
#: Settings only one kind of process reads, which a deployment passes to that process's containers alone:
#: the API's (`ApiSettings`, e.g. its metrics listener) and the workers' (`WorkerSettings`, `OM_WORKER_`).
PROCESS_SETTINGS: dict[str, tuple[type[Any], str]] = {
    **{
        f"OM_{name.upper()}": (ApiSettings, name)
        for name in set(ApiSettings.model_fields) - set(Settings.model_fields)
        if name != "executor"
    },
    **{f"OM_WORKER_{name.upper()}": (WorkerSettings, name) for name in WorkerSettings.model_fields},
}
PROVIDER_KEYS = ("GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
FLOWER_LOGIN = "FLOWER_BASIC_AUTH"
# Postgres with pgvector (vector search, `retrieval.vector`).
INFRA_IMAGES = {"postgres": "pgvector/pgvector:pg15", "redis": "redis:7"}
WORKLOAD_KINDS = {"Deployment", "Job", "StatefulSet", "DaemonSet"}

Doc = dict[str, Any]


# ------------------------------------------------------------------------------------------------ loading


def load_yaml(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def yaml_files() -> list[Path]:
    return [COMPOSE_FILE, *sorted(K8S_DIR.glob("*.yaml"))]


@pytest.fixture(scope="module")
def compose() -> Doc:
    (doc,) = load_yaml(COMPOSE_FILE)
    return doc


@pytest.fixture(scope="module")
def k8s() -> list[Doc]:
    docs = [doc for path in sorted(K8S_DIR.glob("*.yaml")) for doc in load_yaml(path)]
    return [doc for doc in docs if doc.get("kind") != "Kustomization"]


@pytest.fixture(autouse=True)
def no_om_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings are validated from the files' values only, never from the developer's shell."""
    for name in [n for n in os.environ if n.startswith("OM_")]:
        monkeypatch.delenv(name)


def om_services(compose: Doc) -> dict[str, Doc]:
    """Compose services built from deploy/Dockerfile: they run `om`, the rest is infrastructure."""
    services: dict[str, Doc] = compose["services"]
    return {name: svc for name, svc in services.items() if "build" in svc}


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(workload, container) for every container of every workload."""
    for doc in docs:
        if doc["kind"] in WORKLOAD_KINDS:
            pod = doc["spec"]["template"]["spec"]
            for container in [*pod.get("initContainers", []), *pod["containers"]]:
                yield doc, container


def by_subcommand(docs: list[Doc], subcommand: str) -> list[tuple[Doc, Doc]]:
    return [(doc, c) for doc, c in containers(docs) if c["args"][0] == subcommand]


def name_of(doc: Doc) -> str:
    return str(doc["metadata"]["name"])


# --------------------------------------------------------------------------------------------- the real CLI

runner = CliRunner()


def om_params(argv: list[str]) -> dict[str, Any]:
    """Parse `om <argv>` with the real command tree (types converted, nothing run). Typer ships its own
    copy of click, so groups are recognised by their `commands` table rather than by class."""
    command: Any = typer.main.get_command(app)
    words = list(argv)
    name = "om"
    while isinstance(getattr(command, "commands", None), dict):
        assert words, f"`om {' '.join(argv)}` names no subcommand"
        name = words.pop(0)
        assert name in command.commands, f"`{name}` is not an om subcommand (in `om {' '.join(argv)}`)"
        command = command.commands[name]
    with command.make_context(name, words) as ctx:
        return dict(ctx.params)


def assert_om_command(argv: list[str]) -> dict[str, Any]:
    """The command line must be accepted by `om` itself: `--help` after it exits 0 only if the subcommand
    and every option exist; parsing it then checks the option values."""
    return dict(_checked_om_command(tuple(argv)))


@functools.cache
def _checked_om_command(argv: tuple[str, ...]) -> Mapping[str, Any]:
    # Cached: the same command lines are checked by several tests.
    result = runner.invoke(app, [*argv, "--help"])
    assert result.exit_code == 0, f"`om {' '.join(argv)}` is refused by the om CLI:\n{result.output}"
    return om_params(list(argv))


def worker_queues(argv: list[str]) -> frozenset[str]:
    params = assert_om_command(argv)
    return frozenset(q.strip() for q in str(params["queues"]).split(",") if q.strip())


# ------------------------------------------------------------------------------------------- the settings


def parse_setting(model: type[Any], field: str, value: str) -> Any:
    """`value` as the settings model reads it from the environment (a bad one raises ValidationError)."""
    values: dict[str, Any] = {field: value}
    return getattr(model(_env_file=None, **values), field)


def assert_known_settings(env: Mapping[str, Any], where: str, *, process: str | None = None) -> None:
    """Every OM_ name is a setting, and every literal value is one the settings model accepts. `process`
    ("api", "worker") also admits the settings only that process reads."""
    om_vars = {name: value for name, value in env.items() if name.startswith("OM_")}
    own = {
        name
        for name, (model, _) in PROCESS_SETTINGS.items()
        if (process, model) in {("api", ApiSettings), ("worker", WorkerSettings)}
    }
    unknown = sorted(set(om_vars) - KNOWN_OM_VARS - own)
    assert not unknown, f"{where} sets {unknown}, which om_core.config.settings.Settings does not know"
    for name, value in om_vars.items():
        if value is None or "${" in str(value):
            continue  # passed through or interpolated by compose at run time
        if name == EXECUTOR_VAR:
            assert value in {"celery", "inline"}, f"{where}: {name}={value!r}"
            continue
        model, field = PROCESS_SETTINGS.get(name, (Settings, name.removeprefix("OM_").lower()))
        assert parse_setting(model, field, str(value)) is not None, f"{where}: {name}={value!r}"


def container_env(container: Doc, k8s: list[Doc]) -> dict[str, Any]:
    """What a container sees: its envFrom ConfigMaps/Secrets (which must exist), then its env list."""
    config_maps = {name_of(d): d.get("data", {}) for d in of_kind(k8s, "ConfigMap")}
    secrets = {name_of(d): {**d.get("data", {}), **d.get("stringData", {})} for d in of_kind(k8s, "Secret")}
    env: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(config_maps[source["configMapRef"]["name"]])
        else:
            env.update(secrets[source["secretRef"]["name"]])
    env.update({item["name"]: item.get("value") for item in container.get("env", [])})
    return env


# ----------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_parses(path: Path) -> None:
    docs = load_yaml(path)
    assert docs, f"{path} holds no document"
    assert all(isinstance(doc, dict) for doc in docs)


def test_k8s_objects_are_complete_and_in_the_om_namespace(k8s: list[Doc]) -> None:
    namespaces = [name_of(d) for d in of_kind(k8s, "Namespace")]
    assert namespaces == ["om"]
    for doc in k8s:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "om", f"{doc['kind']}/{name_of(doc)}"


def test_kustomization_applies_every_manifest() -> None:
    (kustomization,) = load_yaml(K8S_DIR / "kustomization.yaml")
    manifests = sorted(p.name for p in K8S_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifests
    assert {image["name"] for image in kustomization["images"]} == {"om"}


# ------------------------------------------------------------------------------------------- commands


def test_cli_check_rejects_what_om_does_not_know() -> None:
    """The checks below would pass vacuously if the CLI accepted anything."""
    for argv in (["work"], ["worker", "--queue", "om.observe"], ["serve", "--bind", "0.0.0.0"]):
        with pytest.raises(AssertionError):
            assert_om_command(argv)
    with pytest.raises(typer.BadParameter):
        om_params(["worker", "--concurrency", "many"])


def test_compose_services_run_real_om_commands(compose: Doc) -> None:
    services = om_services(compose)
    infra = {name: svc["image"] for name, svc in compose["services"].items() if name not in services}
    assert infra == INFRA_IMAGES
    for name, service in services.items():
        assert service["build"]["dockerfile"] == "deploy/Dockerfile", name
        assert "entrypoint" not in service, f"{name} must keep the image's `om` entrypoint"
        assert isinstance(service["command"], list), f"{name}: command as an exec list"
        assert_om_command(service["command"])


def test_k8s_containers_run_real_om_commands(k8s: list[Doc]) -> None:
    found = list(containers(k8s))
    assert found
    for doc, container in found:
        where = f"{doc['kind']}/{name_of(doc)}"
        assert container["image"].split(":")[0] == "om", f"{where} runs {container['image']}"
        assert "command" not in container, f"{where} must keep the image's `om` entrypoint"
        assert_om_command(container["args"])


def test_compose_serves_the_api_on_all_interfaces(compose: Doc) -> None:
    api = om_services(compose)["api"]
    params = assert_om_command(api["command"])
    assert (params["host"], params["port"]) == ("0.0.0.0", 8088)
    assert "8088:8088" in api["ports"]


def test_one_shot_migration_runs_before_the_services(compose: Doc, k8s: list[Doc]) -> None:
    services = om_services(compose)
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    for name in ("api", "beat", *[n for n in services if n.startswith("worker")]):
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully", name
    # Kubernetes: an init container of every API pod (no Job, which an upgrade would have to delete first).
    assert of_kind(k8s, "Job") == []
    migrations = [(name_of(doc), c["args"]) for doc, c in containers(k8s) if c["args"][0] == "migrate"]
    ((deployment, api),) = by_subcommand(k8s, "serve")
    init = deployment["spec"]["template"]["spec"]["initContainers"]
    assert [c["args"] for c in init] == [["migrate"]], "the API pod migrates before it serves"
    assert migrations == [(name_of(deployment), ["migrate"])], "one place runs migrations"
    assert init[0]["image"] == api["image"], "the new image's migrations, with the new image's API"
    assert init[0]["envFrom"] == api["envFrom"], "the database the API will use"
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert rolling["maxUnavailable"] == 0, "old pods serve until new ones migrated and turned ready"


# ------------------------------------------------------------------------------------------------- queues


def assert_queue_layout(groups: list[frozenset[str]], where: str) -> None:
    for group in groups:
        assert group <= QUEUES, f"{where}: unknown queue(s) {sorted(group - QUEUES)}"
    consumed = frozenset().union(*groups)
    assert consumed == QUEUES, f"{where}: no worker consumes {sorted(QUEUES - consumed)}"
    task_groups = [g - {MAINTENANCE} for g in groups if g - {MAINTENANCE}]
    assert sorted(map(sorted, task_groups)) == sorted(map(sorted, ISSUE_GROUPS))
    assert sum(MAINTENANCE in g for g in groups) == 1, f"{where}: om.maintenance needs exactly one group"
    assert frozenset({"om.observe"}) in groups, f"{where}: om.observe must not share its workers"


def test_compose_has_one_worker_service_per_queue_group(compose: Doc) -> None:
    workers = [svc for svc in om_services(compose).values() if svc["command"][0] == "worker"]
    assert_queue_layout([worker_queues(svc["command"]) for svc in workers], "compose")


def test_k8s_has_one_worker_deployment_per_queue_group(k8s: list[Doc]) -> None:
    workers = by_subcommand(k8s, "worker")
    assert {doc["kind"] for doc, _ in workers} == {"Deployment"}
    assert_queue_layout([worker_queues(c["args"]) for _, c in workers], "k8s")


def test_workers_use_a_known_pool_and_positive_concurrency(compose: Doc, k8s: list[Doc]) -> None:
    commands = [svc["command"] for svc in om_services(compose).values() if svc["command"][0] == "worker"]
    commands += [c["args"] for _, c in by_subcommand(k8s, "worker")]
    for argv in commands:
        params = assert_om_command(argv)
        assert params["pool"] in {"prefork", "threads", "solo"}, argv
        assert params["concurrency"] >= 1, argv


def test_every_worker_deployment_autoscales_on_its_own_queues(k8s: list[Doc]) -> None:
    workers = {name_of(doc): worker_queues(c["args"]) for doc, c in by_subcommand(k8s, "worker")}
    scaled = of_kind(k8s, "ScaledObject")
    targets = [obj["spec"]["scaleTargetRef"]["name"] for obj in scaled]
    assert sorted(targets) == sorted(workers), "one ScaledObject per worker Deployment"
    auths = {name_of(d): d for d in of_kind(k8s, "TriggerAuthentication")}
    for obj in scaled:
        spec, target = obj["spec"], obj["spec"]["scaleTargetRef"]["name"]
        assert 1 <= spec["minReplicaCount"] < spec["maxReplicaCount"], target
        assert {t["type"] for t in spec["triggers"]} == {"redis"}, target
        lists = frozenset(t["metadata"]["listName"] for t in spec["triggers"])
        assert lists <= QUEUES, f"{target}: unknown list(s) {sorted(lists - QUEUES)}"
        assert lists == workers[target], f"{target} scales on {sorted(lists)}, consumes {workers[target]}"
        for trigger in spec["triggers"]:
            assert int(trigger["metadata"]["listLength"]) >= 1
            assert trigger["authenticationRef"]["name"] in auths, target


def test_autoscaled_deployments_leave_replicas_to_the_autoscaler(k8s: list[Doc]) -> None:
    targets = {obj["spec"]["scaleTargetRef"]["name"] for obj in of_kind(k8s, "ScaledObject")}
    targets |= {obj["spec"]["scaleTargetRef"]["name"] for obj in of_kind(k8s, "HorizontalPodAutoscaler")}
    for doc in of_kind(k8s, "Deployment"):
        if name_of(doc) in targets:
            assert "replicas" not in doc["spec"], f"{name_of(doc)}: KEDA owns replicas"


def test_trigger_authentication_reads_existing_secret_keys(k8s: list[Doc]) -> None:
    secrets = {name_of(d): {**d.get("data", {}), **d.get("stringData", {})} for d in of_kind(k8s, "Secret")}
    for auth in of_kind(k8s, "TriggerAuthentication"):
        refs = auth["spec"]["secretTargetRef"]
        assert {ref["parameter"] for ref in refs} >= {"address"}
        for ref in refs:
            assert ref["key"] in secrets[ref["name"]], ref


# --------------------------------------------------------------------------------------------------- beat


def test_compose_runs_exactly_one_beat(compose: Doc) -> None:
    beats = [svc for svc in om_services(compose).values() if svc["command"][0] == "beat"]
    assert len(beats) == 1
    assert beats[0].get("deploy", {}).get("replicas", 1) == 1


def test_k8s_runs_exactly_one_beat(k8s: list[Doc]) -> None:
    beats = by_subcommand(k8s, "beat")
    assert len(beats) == 1
    deployment, _ = beats[0]
    assert deployment["kind"] == "Deployment"
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate", "a rollout must not overlap two beats"
    targets = {obj["spec"]["scaleTargetRef"]["name"] for obj in of_kind(k8s, "ScaledObject")}
    assert name_of(deployment) not in targets


# --------------------------------------------------------------------------------------------- settings


def test_compose_passes_only_known_settings(compose: Doc) -> None:
    services = om_services(compose)
    envs = [without_flower_login(svc["environment"]) for svc in services.values()]
    assert all(env == envs[0] for env in envs), "every om service shares one environment"
    env = envs[0]
    assert_known_settings(env, "compose", process="api")  # the shared environment reaches the API too
    assert {"OM_DATABASE_URL", "OM_REDIS_URL", "OM_MODEL"} <= set(env)
    assert (env[EXECUTOR_VAR], env["OM_AUTH"]) == ("celery", "keys")
    assert env["OM_DATABASE_URL"].startswith("postgresql")
    assert env["OM_REDIS_URL"].startswith("redis://redis:")


def test_k8s_passes_only_known_settings(k8s: list[Doc]) -> None:
    for doc in of_kind(k8s, "ConfigMap"):
        assert_known_settings(doc["data"], f"ConfigMap/{name_of(doc)}")
    for doc in of_kind(k8s, "Secret"):
        assert_known_settings({**doc.get("data", {}), **doc.get("stringData", {})}, f"Secret/{name_of(doc)}")
    for doc, container in containers(k8s):
        env = container_env(container, k8s)
        process = {"serve": "api", "worker": "worker"}.get(container["args"][0])
        assert_known_settings(env, f"{doc['kind']}/{name_of(doc)}", process=process)
        assert {"OM_DATABASE_URL", "OM_REDIS_URL", "OM_MODEL"} <= set(env), name_of(doc)
        assert (env[EXECUTOR_VAR], env["OM_AUTH"]) == ("celery", "keys"), name_of(doc)


def test_k8s_keeps_credentials_in_the_secret(k8s: list[Doc]) -> None:
    (secret,) = [doc for doc in of_kind(k8s, "Secret") if name_of(doc) == "om-secrets"]
    stored = {**secret.get("data", {}), **secret.get("stringData", {})}
    assert {"OM_DATABASE_URL", "OM_REDIS_URL", *PROVIDER_KEYS} <= set(stored)
    for config_map in of_kind(k8s, "ConfigMap"):
        leaked = {"OM_DATABASE_URL", "OM_REDIS_URL", *PROVIDER_KEYS} & set(config_map["data"])
        assert not leaked, f"ConfigMap/{name_of(config_map)} holds {sorted(leaked)}"


def test_settings_check_rejects_unknown_names_and_bad_values() -> None:
    with pytest.raises(AssertionError):
        assert_known_settings({"OM_DATABASE": "x"}, "probe")
    with pytest.raises(ValueError):
        assert_known_settings({"OM_AUTH": "password"}, "probe")
    with pytest.raises(AssertionError):
        assert_known_settings({EXECUTOR_VAR: "threads"}, "probe")


# ------------------------------------------------------------------------------------ probes, resources


def container_port(container: Doc, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


def test_api_probes_point_at_healthz_and_readyz(k8s: list[Doc]) -> None:
    ((deployment, api),) = by_subcommand(k8s, "serve")
    listening = assert_om_command(api["args"])["port"]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in api:
            assert container_port(api, api[probe]["httpGet"]["port"]) == listening, probe
    (service,) = [
        s for s in of_kind(k8s, "Service") if s["spec"]["selector"].items() <= _pod_labels(deployment)
    ]
    assert [container_port(api, p["targetPort"]) for p in service["spec"]["ports"]] == [listening]


def _pod_labels(deployment: Doc) -> Any:
    return deployment["spec"]["template"]["metadata"]["labels"].items()


def test_compose_api_healthcheck_uses_readyz(compose: Doc) -> None:
    check = " ".join(om_services(compose)["api"]["healthcheck"]["test"])
    assert "127.0.0.1:8088/readyz" in check


def test_long_running_compose_services_have_healthchecks(compose: Doc) -> None:
    services: dict[str, Doc] = compose["services"]
    checked = {name for name, svc in services.items() if "healthcheck" in svc}
    expected = set(INFRA_IMAGES) | {"api", "flower", "beat"} | {n for n in services if n.startswith("worker")}
    assert expected <= checked
    # The image's own HEALTHCHECK (the API's) would mark the one-shot migration unhealthy: it is off there.
    assert services["migrate"]["healthcheck"] == {"disable": True}
    assert set(services) == expected | {"migrate"}, "a new service needs its own health check"


def test_every_container_requests_resources(k8s: list[Doc]) -> None:
    for doc, container in containers(k8s):
        requests = container["resources"]["requests"]
        assert {"cpu", "memory"} <= set(requests), name_of(doc)
    ((_, api),) = by_subcommand(k8s, "serve")
    assert {"cpu", "memory"} <= set(api["resources"]["limits"])


def cpu_cores(quantity: str) -> float:
    """A Kubernetes CPU quantity (`250m`, `1`, `"2"`) in cores."""
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_the_api_pod_is_guaranteed_and_weighs_above_every_worker_and_beat(k8s: list[Doc]) -> None:
    """Turns first (deploy/README.md): a busy node shares CPU by the requests, and a Guaranteed pod (every
    container's requests equal to its limits, the init container's too) is evicted last."""
    ((deployment, api),) = by_subcommand(k8s, "serve")
    pod = deployment["spec"]["template"]["spec"]
    for container in [*pod["initContainers"], *pod["containers"]]:
        resources = container["resources"]
        assert resources["requests"] == resources["limits"], f"{container['name']}: not Guaranteed"
    api_cpu = cpu_cores(api["resources"]["requests"]["cpu"])
    for doc, container in [*by_subcommand(k8s, "worker"), *by_subcommand(k8s, "beat")]:
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert cpu_cores(requests["cpu"]) < api_cpu, name_of(doc)
        assert cpu_cores(requests["cpu"]) < cpu_cores(limits["cpu"]), f"{name_of(doc)}: Burstable"


def test_compose_weighs_the_turn_path_above_the_background_work(compose: Doc) -> None:
    """The API, the workers a turn may wait on, Postgres and Redis keep the default CPU weight; the
    background workers and beat run with less."""
    default = 1024
    services: dict[str, Doc] = compose["services"]
    om = om_services(compose)
    background = {
        name
        for name, svc in om.items()
        if svc["command"][0] == "beat"
        or (svc["command"][0] == "worker" and not worker_queues(svc["command"]) <= set(TURN_QUEUES))
    }
    turn_path = {"api", "postgres", "redis"} | {
        name for name, svc in om.items() if svc["command"][0] == "worker" and name not in background
    }
    assert {"worker-observe", "worker-reflect"} <= turn_path and {"worker-buffer", "beat"} <= background
    for name in turn_path:
        assert services[name].get("cpu_shares", default) == default, name
    for name in background:
        assert services[name].get("cpu_shares", default) < default, name


def without_flower_login(env: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in env.items() if name != FLOWER_LOGIN}


def test_compose_flower_asks_for_a_login_and_listens_on_the_hosts_loopback(compose: Doc) -> None:
    services = om_services(compose)
    flower = services["flower"]
    address = assert_om_command(flower["command"])["address"]
    assert check_flower_auth(address, {}), f"`om flower --address {address}` must need a login"
    assert flower["environment"][FLOWER_LOGIN] == "${FLOWER_BASIC_AUTH:-}", "from the shell or .env"
    assert check_flower_auth(address, {FLOWER_LOGIN: "admin:s3cret"}) == []
    assert flower["ports"] == ["127.0.0.1:5555:5555"], "published on the host's loopback only"
    others = [name for name, svc in services.items() if FLOWER_LOGIN in svc["environment"]]
    assert others == ["flower"], "only Flower gets its password"


def test_k8s_flower_reads_its_login_from_a_secret(k8s: list[Doc]) -> None:
    ((_, flower),) = by_subcommand(k8s, "flower")
    address = assert_om_command(flower["args"])["address"]
    assert check_flower_auth(address, {}), f"`om flower --address {address}` must need a login"
    (login,) = [item for item in flower["env"] if item["name"] == FLOWER_LOGIN]
    reference = login["valueFrom"]["secretKeyRef"]
    secrets = {name_of(d): d.get("stringData", {}) for d in of_kind(k8s, "Secret")}
    assert reference["key"] in secrets[reference["name"]], reference
    assert secrets[reference["name"]][reference["key"]] == "", "a placeholder to fill in, never a password"
    for doc, container in containers(k8s):
        if container is not flower:
            assert FLOWER_LOGIN not in container_env(container, k8s), f"{name_of(doc)} gets Flower's password"


def test_flower_has_a_deployment_and_a_service(k8s: list[Doc]) -> None:
    ((deployment, flower),) = by_subcommand(k8s, "flower")
    port = assert_om_command(flower["args"])["port"]
    services = [
        s for s in of_kind(k8s, "Service") if s["spec"]["selector"].items() <= _pod_labels(deployment)
    ]
    assert [container_port(flower, p["targetPort"]) for s in services for p in s["spec"]["ports"]] == [port]


# ---------------------------------------------------------------------------------------------- Dockerfile


def test_dockerfile_installs_the_project_as_a_non_root_om_entrypoint() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines() if not line.startswith("#")]
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert bases and set(bases) == {"python:3.11-slim"}
    text = "\n".join(lines)
    assert re.search(r"pip install \.(\s|$)", text)
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert 'ENTRYPOINT ["om"]' in lines


def test_dockerfile_copies_everything_pip_install_needs() -> None:
    copied = set()
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            copied.update(words[1:-1])
    assert all((ROOT / source).exists() for source in copied), copied
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = project["tool"]["setuptools"]["packages"]["find"]
    packages = {
        str(Path(where) / pattern.rstrip("*")).removeprefix("./")
        for pattern in find["include"]
        for where in find.get("where", ["."])
        if (ROOT / where / pattern.rstrip("*")).is_dir()
    }
    assert len(packages) == len(find["include"]), "every package pip installs is found in one `where` folder"
    assert packages | {"pyproject.toml", project["project"]["readme"]} <= copied


# -------------------------------------------------------------------------------------------- .env.example

ENV_LINE = re.compile(r"^(?P<commented>#\s*)?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


def env_example_entries() -> list[tuple[str, str, bool, str]]:
    """(name, value, commented out, the comment line above it)."""
    entries = []
    previous = ""
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = ENV_LINE.match(line.strip())
        if match:
            entries.append((match["name"], match["value"], bool(match["commented"]), previous))
        previous = line.strip()
    return entries


def test_env_example_lists_every_setting_once_with_a_comment() -> None:
    entries = [e for e in env_example_entries() if e[0].startswith("OM_")]
    names = [name for name, *_ in entries]
    assert sorted(names) == sorted(KNOWN_OM_VARS), "every OM_ setting, no other, each once"
    for name, _, _, comment in entries:
        assert comment.startswith("#") and not ENV_LINE.match(comment), f"{name} needs a comment line"


def test_env_example_values_are_the_defaults() -> None:
    defaults = {f"OM_{n.upper()}": f.default for n, f in ApiSettings.model_fields.items()}
    for name, value, commented, _ in env_example_entries():
        if not name.startswith("OM_"):
            continue
        if commented:
            assert defaults[name] is None, f"{name} has a default ({defaults[name]!r}): set it uncommented"
            continue
        field = name.removeprefix("OM_").lower()
        assert parse_setting(ApiSettings, field, value) == defaults[name], (
            f"{name}={value} is not the default"
        )


def test_env_example_has_commented_provider_key_placeholders() -> None:
    entries = {name: commented for name, _, commented, _ in env_example_entries()}
    for key in PROVIDER_KEYS:
        assert entries.get(key) is True, f"{key} should be a commented-out placeholder"


# ------------------------------------------------------------- worker and beat probes, disruption, scaling

#: `celery -A <app> inspect ping --timeout <s> -d "<node>"`, run through sh so $HOSTNAME is the pod's.
PING = re.compile(r'^celery -A (?P<app>\S+) inspect ping --timeout (?P<timeout>\d+) -d "(?P<node>[^"]+)"$')
#: The worker port MT's om_workers metrics endpoint listens on by default (OM_WORKER_METRICS_PORT).
WORKER_METRICS_PORT = 9808


def worker_node_name(queues: frozenset[str], argv: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The node name `om worker` gives itself when it is PID 1 of its container (the image's entrypoint
    is `om`, which runs the worker in its own process), with the hostname left to the shell."""
    from om_workers import cli as worker_cli

    params = assert_om_command(argv)
    monkeypatch.setattr("om_workers.cli.os.getpid", lambda: 1)
    ordered = [q.strip() for q in str(params["queues"]).split(",") if q.strip()]
    assert frozenset(ordered) == queues
    args = worker_cli.worker_argv(ordered, params["concurrency"], params["pool"])
    (hostname,) = [a.removeprefix("--hostname=") for a in args if a.startswith("--hostname=")]
    assert hostname.endswith("@%h"), hostname
    return hostname.removesuffix("%h") + "$HOSTNAME"


def test_every_worker_pings_its_own_node(k8s: list[Doc], monkeypatch: pytest.MonkeyPatch) -> None:
    from celery import Celery

    workers = by_subcommand(k8s, "worker")
    assert workers
    for doc, container in workers:
        where = name_of(doc)
        node = worker_node_name(worker_queues(container["args"]), container["args"], monkeypatch)
        for kind in ("livenessProbe", "readinessProbe"):
            probe = container[kind]
            shell, flag, command = probe["exec"]["command"]
            assert (shell, flag) == ("sh", "-c"), f"{where} {kind}: $HOSTNAME needs a shell"
            match = PING.match(command)
            assert match, f"{where} {kind}: {command}"
            assert match["node"] == node, f"{where} {kind} pings {match['node']}, the worker is {node}"
            module, _, attribute = match["app"].partition(":")
            assert isinstance(getattr(__import__(module, fromlist=[attribute]), attribute), Celery)
            # The ping's own wait plus the CLI's start-up (it imports the app) fits in the probe's.
            assert int(match["timeout"]) * 2 <= probe["timeoutSeconds"], f"{where} {kind}"
            assert probe["periodSeconds"] >= probe["timeoutSeconds"], f"{where} {kind}: probes would pile up"
        liveness = container["livenessProbe"]
        assert liveness["failureThreshold"] >= 2, f"{where}: one slow ping must not restart a worker"


def beat_probe_code(container: Doc) -> str:
    command = container["livenessProbe"]["exec"]["command"]
    assert command[:2] == ["python", "-c"], command
    return str(command[2])


def test_beat_liveness_reads_the_schedule_file_beat_writes(k8s: list[Doc]) -> None:
    import celery.beat

    from om_adapters.celery_app import WorkerSettings

    ((deployment, beat),) = by_subcommand(k8s, "beat")
    code = beat_probe_code(beat)
    (pattern,) = re.findall(r"glob\.glob\('([^']+)'\)", code)
    schedule = WorkerSettings(_env_file=None).schedule_file()
    assert pattern == schedule + "*", "the file and its dbm suffixes (.db, .dat, .dir, ...)"
    mounts = {m["mountPath"]: m["name"] for m in beat["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts[str(Path(schedule).parent)]], "beat's state survives no restart"
    (max_age,) = [float(n) for n in re.findall(r"< (\d+)", code)]
    # celery-beat syncs its state after sending a task once `sync_every` has passed; beat sends one
    # every beat_interval_s: the file is rewritten well inside the allowed age.
    assert celery.beat.Scheduler.sync_every + WorkerSettings(_env_file=None).beat_interval_s < max_age / 2
    compose_beat = [
        svc
        for svc in om_services(yaml.safe_load(COMPOSE_FILE.read_text())).values()
        if svc["command"] == ["beat"]
    ]
    (service,) = compose_beat
    assert service["healthcheck"]["test"] == ["CMD", "python", "-c", code], "compose checks beat the same way"


@pytest.mark.parametrize(("age_s", "healthy"), [(5.0, True), (3600.0, False), (None, False)])
def test_beat_liveness_command_fails_on_a_stale_or_missing_file(
    k8s: list[Doc], tmp_path: Path, age_s: float | None, healthy: bool
) -> None:
    """The probe's own code, run against a schedule file in a temporary directory."""
    import subprocess
    import sys
    import time

    ((_, beat),) = by_subcommand(k8s, "beat")
    code = beat_probe_code(beat).replace(
        "/tmp/om-celerybeat-schedule", str(tmp_path / "om-celerybeat-schedule")
    )
    if age_s is not None:
        for suffix in (".dat", ".dir"):
            path = tmp_path / f"om-celerybeat-schedule{suffix}"
            path.write_text("x")
            then = time.time() - age_s
            os.utime(path, (then, then))
    result = subprocess.run([sys.executable, "-c", code], check=False, timeout=60)
    assert (result.returncode == 0) is healthy


def pod_template_labels(doc: Doc) -> dict[str, str]:
    return dict(doc["spec"]["template"]["metadata"]["labels"])


def test_api_and_every_worker_group_have_a_disruption_budget(k8s: list[Doc]) -> None:
    budgets = of_kind(k8s, "PodDisruptionBudget")
    covered: dict[str, Doc] = {}
    for budget in budgets:
        selector = budget["spec"]["selector"]["matchLabels"]
        matching = [
            d for d in of_kind(k8s, "Deployment") if selector.items() <= pod_template_labels(d).items()
        ]
        assert len(matching) == 1, (
            f"PodDisruptionBudget/{name_of(budget)} selects {[name_of(d) for d in matching]}"
        )
        covered[name_of(matching[0])] = budget
    wanted = {name_of(d) for d, _ in [*by_subcommand(k8s, "serve"), *by_subcommand(k8s, "worker")]}
    assert set(covered) == wanted, "API and workers: one budget each; beat and Flower (single) none"
    for name, budget in covered.items():
        # maxUnavailable: a group at one replica can still be drained; minAvailable 1 would block it.
        assert budget["spec"] == {"maxUnavailable": 1, "selector": budget["spec"]["selector"]}, name


def test_api_autoscales_on_cpu(k8s: list[Doc]) -> None:
    ((deployment, api),) = by_subcommand(k8s, "serve")
    (hpa,) = of_kind(k8s, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        "apps/v1",
        "Deployment",
        name_of(deployment),
    )
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"], "two replicas survive one loss"
    ((metric),) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu" and metric["resource"]["target"]["type"] == "Utilization"
    assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100
    assert "cpu" in api["resources"]["requests"], "utilization is measured against the request"
    assert "replicas" not in deployment["spec"], "the autoscaler owns replicas"


def scrape_annotations(doc: Doc) -> dict[str, str]:
    annotations = doc["spec"]["template"]["metadata"].get("annotations", {})
    return {
        k.removeprefix("prometheus.io/"): v for k, v in annotations.items() if k.startswith("prometheus.io/")
    }


def test_api_and_worker_pods_are_annotated_for_prometheus(k8s: list[Doc]) -> None:
    from om_api.routes.health import router

    metrics_paths = {getattr(route, "path", None) for route in router.routes}
    ((api_doc, api),) = by_subcommand(k8s, "serve")
    scrape = scrape_annotations(api_doc)
    api_env = container_env(api, k8s)
    assert scrape["scrape"] == "true"
    assert scrape["path"] in metrics_paths
    assert int(scrape["port"]) == int(api_env["OM_METRICS_PORT"]) == container_port(api, "metrics"), (
        "the API's own metrics listener"
    )
    assert int(scrape["port"]) != assert_om_command(api["args"])["port"], "never the public HTTP port"
    assert api_env["OM_METRICS_HOST"] == "0.0.0.0", "the listener binds loopback unless told otherwise"
    assert "OM_METRICS_TOKEN" not in api_env, "no token: /metrics on the HTTP port answers 404"
    assert ApiSettings.model_fields["metrics_host"].default == "127.0.0.1"
    assert WorkerSettings.model_fields["metrics_port"].default == WORKER_METRICS_PORT, (
        "the port workers serve"
    )
    assert WorkerSettings.model_fields["metrics_host"].default == "127.0.0.1"
    for doc, container in by_subcommand(k8s, "worker"):
        scrape = scrape_annotations(doc)
        assert scrape == {"scrape": "true", "port": str(WORKER_METRICS_PORT), "path": "/metrics"}, name_of(
            doc
        )
        assert container_port(container, "metrics") == WORKER_METRICS_PORT, name_of(doc)
        assert container_env(container, k8s)["OM_WORKER_METRICS_HOST"] == "0.0.0.0", name_of(doc)
    for doc, _ in by_subcommand(k8s, "beat"):
        assert scrape_annotations(doc) == {}, "beat serves no metrics"


def test_no_service_publishes_a_metrics_port(k8s: list[Doc]) -> None:
    """Metrics name every tenant: Services publish the API's HTTP port and Flower's, never `metrics`."""
    for service in of_kind(k8s, "Service"):
        targets = {str(port.get("targetPort")) for port in service["spec"]["ports"]}
        assert "metrics" not in targets and not targets & {"9807", "9808"}, name_of(service)


def test_dockerfile_health_check_asks_the_api_without_curl() -> None:
    lines = DOCKERFILE.read_text().replace("\\\n", " ").splitlines()  # continuation lines joined
    (check,) = [line.removeprefix("HEALTHCHECK ") for line in lines if line.startswith("HEALTHCHECK ")]
    assert "curl" not in check and "wget" not in check, "python:3.11-slim has neither"
    exec_form = json.loads(check[check.index("CMD ") + 4 :])
    assert exec_form[:2] == ["python", "-c"]
    default_port = ApiSettings.model_fields["api_port"].default
    assert f"http://127.0.0.1:{default_port}/healthz" in exec_form[2]
    for option in ("--interval=", "--timeout=", "--start-period=", "--retries="):
        assert option in check, option
