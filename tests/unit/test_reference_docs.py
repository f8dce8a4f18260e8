"""The reference pages (docs/reference/) are what scripts/gen_reference.py writes from the code: a change to
the configuration model, a settings model or the API that is not followed by `make docs` fails here, and
so does an option or variable whose meaning the prose beside the pages lacks."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.docs import REPO


def generator() -> ModuleType:
    """scripts/gen_reference.py, imported as a module (scripts/ is no package)."""
    name = "gen_reference"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "gen_reference.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def pages() -> dict[Path, str]:
    return dict(generator().pages())


def test_each_committed_page_is_what_the_script_writes(pages: dict[Path, str]) -> None:
    assert {path.name for path in pages} == {"options.md", "settings.md", "api.md"}
    for path, text in pages.items():
        committed = path.read_text() if path.exists() else ""
        if committed != text:
            diff = "".join(
                list(
                    difflib.unified_diff(
                        committed.splitlines(True), text.splitlines(True), "committed", "code"
                    )
                )[:60]
            )
            pytest.fail(f"{path.relative_to(REPO)} is stale: run `make docs` and commit it\n{diff}")


def test_a_name_without_prose_or_prose_without_a_name_stops_the_script() -> None:
    gen = generator()
    with pytest.raises(gen.ReferenceError, match=r"the code has and .* does not describe: OM_NEW"):
        gen.require_same_names(
            "variables", ["OM_DATABASE_URL", "OM_NEW"], {"OM_DATABASE_URL": {}}, "settings.toml"
        )
    with pytest.raises(gen.ReferenceError, match="describes variables the code does not have: OM_GONE"):
        gen.require_same_names("variables", ["OM_DATABASE_URL"], {"OM_DATABASE_URL": {}, "OM_GONE": {}}, "x")


def test_every_option_and_variable_has_a_row() -> None:
    gen = generator()
    options = (REPO / "docs" / "reference" / "options.md").read_text()
    settings = (REPO / "docs" / "reference" / "settings.md").read_text()
    assert all(f"| `{option.path}` |" in options for option in gen.options())
    assert all(f"| `{variable.name}` |" in settings for variable in gen.variables())
    assert len(gen.options()) > 40 and len(gen.variables()) > 60


@pytest.mark.parametrize(
    ("schema", "shown"),
    [
        (
            {"anyOf": [{"type": "integer"}, {"type": "number"}, {"const": False, "type": "boolean"}]},
            "number or `false`",
        ),
        (
            {"anyOf": [{"type": "string", "enum": ["thread", "resource"]}, {"type": "null"}]},
            '`"thread"` or `"resource"` or null',
        ),
        ({"type": "array", "items": {"type": "string"}}, "list of string"),
        ({"$ref": "#/components/schemas/TurnMessage"}, "object"),
    ],
)
def test_json_types_read_as_a_reader_would_write_them(schema: dict[str, object], shown: str) -> None:
    assert generator().json_type(schema) == shown


def test_a_table_cell_keeps_to_one_line_and_code_spans_intact() -> None:
    cell = generator().cell
    assert cell("a | b\n  c") == "a \\| b c"
    assert cell("an `<slug>` section, not <slug>") == "an `<slug>` section, not &lt;slug>"
