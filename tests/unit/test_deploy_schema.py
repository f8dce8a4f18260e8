"""The deployment files pass the schemas of the systems that read them.

tests/unit/test_deploy.py checks that the files agree with om (commands, settings, queues); this file
checks that Kubernetes and Compose would accept them at all, with validators from registry packages:

- every Kubernetes object against the API's own OpenAPI-derived JSON schema (`kubernetes-validate`,
  which bundles one per Kubernetes release), strict: an unknown field (a misspelled probe option, a
  field at the wrong level) is an error, as it is for `kubectl apply --validate=strict`. Both the oldest
  release we support and the newest the package bundles;
- the two KEDA kinds (custom resources) are the only objects without a bundled schema: they are skipped
  by name below, and test_deploy.py checks their content (targets, queues, secret keys) instead;
- the kustomization is rendered the way `kubectl apply -k` renders this one (a resources list, an image
  override) and must list every manifest once, name no object twice and leave no image unset;
- docker-compose.yml against the Compose specification's schema (check-jsonschema's vendored copy).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "deploy" / "k8s"
COMPOSE_FILE = ROOT / "deploy" / "docker-compose.yml"
KUSTOMIZATION = K8S_DIR / "kustomization.yaml"

#: The oldest Kubernetes release the manifests are written for (policy/v1 PodDisruptionBudget and
#: autoscaling/v2 HorizontalPodAutoscaler are both GA there), and the newest the package bundles.
OLDEST_K8S = "1.25"
K8S_VERSIONS = (OLDEST_K8S, kubernetes_validate.latest_version())

#: Custom resources: no schema in kubernetes-validate (it bundles the core API only). Listed by name so a
#: new kind without a schema fails the test instead of passing unvalidated.
UNVALIDATED_CRDS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "KEDA custom resource: content checked in test_deploy.py",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "KEDA custom resource: content checked in test_deploy.py",
}

Doc = dict[str, Any]


def load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifests() -> list[Path]:
    return sorted(p for p in K8S_DIR.glob("*.yaml") if p != KUSTOMIZATION)


def objects() -> Iterator[tuple[str, Doc]]:
    for path in manifests():
        for doc in load(path):
            yield f"{path.name}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}", doc


def validate_k8s(doc: Doc, version: str) -> None:
    """Raises kubernetes_validate.ValidationError (bad object) or SchemaNotFoundError (unknown kind)."""
    kubernetes_validate.validate(doc, version, strict=True)


# ---------------------------------------------------------------------------------------------- Kubernetes


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_core_object_passes_the_kubernetes_schema(version: str) -> None:
    checked, skipped, failures = [], [], []
    for where, doc in objects():
        crd = UNVALIDATED_CRDS.get((doc["apiVersion"], doc["kind"]))
        if crd is not None:
            skipped.append(f"{where} ({crd})")
            continue
        try:
            validate_k8s(doc, version)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(item) for item in exc.path)
            failures.append(f"{where}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(f"{where}: {exc.message} (a custom resource? list it in UNVALIDATED_CRDS)")
        else:
            checked.append(where)
    assert not failures, f"Kubernetes {version}:\n" + "\n".join(failures)
    kinds = {where.split(":")[1].split("/")[0] for where in checked}
    expected = {"Namespace", "ConfigMap", "Secret", "Deployment", "Service"}
    expected |= {"PodDisruptionBudget", "HorizontalPodAutoscaler"}
    assert expected <= kinds, f"not validated: {sorted(expected - kinds)}"
    print(f"Kubernetes {version}: {len(checked)} objects validated; skipped (no schema): {skipped}")


def test_the_skipped_kinds_are_exactly_the_crds_in_use() -> None:
    """A stale entry would hide nothing today but let a future object of that kind through unchecked."""
    used = {(doc["apiVersion"], doc["kind"]) for _, doc in objects()}
    assert set(UNVALIDATED_CRDS) <= used
    for api_version, kind in UNVALIDATED_CRDS:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            validate_k8s({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}, OLDEST_K8S)


def _api_deployment() -> Doc:
    (doc,) = [d for _, d in objects() if d["kind"] == "Deployment" and d["metadata"]["name"] == "om-api"]
    return copy.deepcopy(doc)


def _break(doc: Doc, how: str) -> Doc:
    container = doc["spec"]["template"]["spec"]["containers"][0]
    if how == "misspelled probe field":
        container["livenessProbe"]["periodSecond"] = 10
    elif how == "probe field of the wrong type":
        container["readinessProbe"]["timeoutSeconds"] = "three"
    elif how == "field at the wrong level":
        doc["spec"]["template"]["spec"]["initialDelaySeconds"] = 5
    elif how == "missing required field":
        del container["name"]
    return doc


@pytest.mark.parametrize(
    "how",
    [
        "misspelled probe field",
        "probe field of the wrong type",
        "field at the wrong level",
        "missing required field",
    ],
)
def test_the_validator_rejects_a_broken_deployment(how: str) -> None:
    """The check above would pass vacuously if the validator accepted anything."""
    validate_k8s(_api_deployment(), OLDEST_K8S)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(_break(_api_deployment(), how), OLDEST_K8S)


# ------------------------------------------------------------------------------------------------ kustomize


def render_kustomization() -> list[Doc]:
    """What `kubectl apply -k deploy/k8s` sends for this kustomization: its resources in order, each image
    named in `images:` rewritten (the only transformer it uses; anything else is refused here)."""
    (kustomization,) = load(KUSTOMIZATION)
    supported = {"apiVersion", "kind", "resources", "images"}
    assert set(kustomization) <= supported, f"render this too: {sorted(set(kustomization) - supported)}"
    images = {image["name"]: image for image in kustomization.get("images", [])}
    rendered = []
    for resource in kustomization["resources"]:
        for doc in load(K8S_DIR / resource):
            pod = doc.get("spec", {}).get("template", {}).get("spec", {})
            for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                name, _, tag = container["image"].partition(":")
                if name in images:
                    override = images[name]
                    container["image"] = f"{override.get('newName', name)}:{override.get('newTag', tag)}"
            rendered.append(doc)
    return rendered


def test_kustomization_lists_every_manifest_once() -> None:
    (kustomization,) = load(KUSTOMIZATION)
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a resource listed twice"
    assert sorted(listed) == [p.name for p in manifests()], "every manifest, and only those, is applied"


def test_kustomization_renders_unique_objects_with_set_images() -> None:
    rendered = render_kustomization()
    keys = [
        (d["apiVersion"].split("/")[0], d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        for d in rendered
    ]
    duplicates = {key for key in keys if keys.count(key) > 1}
    assert not duplicates, f"kustomize refuses objects with the same id: {sorted(duplicates)}"
    (kustomization,) = load(KUSTOMIZATION)
    (image,) = kustomization["images"]
    wanted = f"{image['newName']}:{image['newTag']}"
    images = set()
    for doc in rendered:
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        images |= {c["image"] for c in [*pod.get("initContainers", []), *pod.get("containers", [])]}
    assert images == {wanted}, "every om container runs the one image the kustomization sets"
    # The namespace goes first so `kubectl apply` creates it before the objects in it.
    assert rendered[0]["kind"] == "Namespace"


# --------------------------------------------------------------------------------------------------- Compose


def compose_schema() -> Any:
    schema = resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(schema.read_text())


def compose_errors(doc: Doc) -> list[str]:
    validator_class = jsonschema.validators.validator_for(compose_schema())
    validator = validator_class(compose_schema())
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_passes_the_compose_spec() -> None:
    (doc,) = load(COMPOSE_FILE)
    assert compose_errors(doc) == []


def test_the_compose_validator_rejects_a_broken_file() -> None:
    (doc,) = load(COMPOSE_FILE)
    doc["services"]["api"]["healthcheck"]["intervall"] = "10s"
    assert any("intervall" in error for error in compose_errors(doc))
    (doc,) = load(COMPOSE_FILE)
    doc["services"]["api"]["depends_on"]["migrate"]["condition"] = "service_finished"
    assert compose_errors(doc)
