"""The documentation: the generated reference pages complete and current, every settings
key described, and the site built strictly (a broken link fails it), offline.

The keys are enumerated from the settings' own JSON schema (pydantic's), not by the
generator's walk, so a key the generator missed fails here. The build runs mkdocs from
this venv (the ``docs`` extra) as a subprocess, into a temporary folder.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_audit.app import docgen
from kafka_audit.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _schema_keys(schema: dict, defs: dict, prefix: str = "") -> dict[str, dict]:
    """Every leaf key of a JSON schema of objects (dotted, ``[]`` for a list's items),
    with its own schema."""
    keys: dict[str, dict] = {}
    for name, sub in schema.get("properties", {}).items():
        dotted = prefix + name
        model, suffix = _model_of(sub, defs)
        if model is None:
            keys[dotted] = sub
        else:
            keys.update(_schema_keys(model, defs, dotted + suffix + "."))
    return keys


def _model_of(sub: dict, defs: dict) -> tuple[dict | None, str]:
    """The object schema a property holds (itself, in a union with null, or as list items)."""
    if "$ref" in sub:
        return defs[sub["$ref"].rsplit("/", 1)[-1]], ""
    for alt in sub.get("anyOf", []):
        model, suffix = _model_of(alt, defs)
        if model is not None:
            return model, suffix
    if sub.get("type") == "array" and "items" in sub:
        model, _ = _model_of(sub["items"], defs)
        return model, "[]" if model is not None else ""
    return None, ""


@pytest.fixture(scope="module")
def settings_schema():
    schema = Settings.model_json_schema()
    return _schema_keys(schema, schema.get("$defs", {}))


def test_the_schema_walk_finds_nested_keys(settings_schema):
    # the enumeration itself: sections, optional sections and a list's items
    assert {"home", "audit.settle_seconds", "profile.sasl.password_file",
            "profile.tls.ca_file", "api.tokens[].hash"} <= set(settings_schema)
    assert "audit" not in settings_schema and "profile.sasl" not in settings_schema


def test_the_configuration_reference_names_every_settings_key(settings_schema):
    page = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([^`]+)`", page, flags=re.MULTILINE))
    missing = sorted(set(settings_schema) - rows)
    assert not missing, f"keys absent from docs/reference/configuration.md: {missing}"
    assert len(settings_schema) >= 100  # ~92 in issue 37, more since


def test_every_settings_key_has_a_description(settings_schema):
    undescribed = sorted(k for k, sub in settings_schema.items()
                         if not sub.get("description", "").strip())
    assert not undescribed, f"settings keys without description=: {undescribed}"
    # and the page shows them: no row with an empty description cell
    assert all(k.description for k in docgen.settings_keys())


@pytest.mark.parametrize("name", sorted(docgen.PAGES))
def test_the_generated_page_is_current(name):
    page = DOCS / name
    assert page.is_file(), f"{page} missing: run python -m kafka_audit.app.docgen"
    assert page.read_text(encoding="utf-8") == docgen.PAGES[name](), (
        f"docs/{name} is stale: run python -m kafka_audit.app.docgen")


def test_the_rest_reference_names_every_operation_and_schema():
    doc = docgen.openapi_document()
    page = (DOCS / "reference" / "rest.md").read_text(encoding="utf-8")
    for path, item in doc["paths"].items():
        for method in item:
            assert f"### {method.upper()} `{path}`" in page, (method, path)
    for name in doc["components"]["schemas"]:
        assert f"### {name} {{#" in page, name


def test_docgen_check_reports_a_stale_page(tmp_path, capsys):
    shutil.copytree(DOCS, tmp_path / "docs")
    assert docgen.main(["--docs", str(tmp_path / "docs"), "--check"]) == 0
    page = tmp_path / "docs" / "reference" / "configuration.md"
    page.write_text(page.read_text(encoding="utf-8").replace("audit.settle_seconds", "x"),
                    encoding="utf-8")
    assert docgen.main(["--docs", str(tmp_path / "docs"), "--check"]) == 1
    assert "reference/configuration.md" in capsys.readouterr().err
    assert docgen.main(["--docs", str(tmp_path / "docs")]) == 0  # rewrites it
    assert page.read_text(encoding="utf-8") == docgen.configuration_page()


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly_and_offline(tmp_path):
    site = tmp_path / "site"
    built = _build(ROOT / "mkdocs.yml", site)
    assert built.returncode == 0, built.stdout + built.stderr
    nav = re.findall(r"[\w/.-]+\.md", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    every = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(n for n in nav if (DOCS / n).is_file()) == every  # every page in the nav
    assert (site / "index.html").is_file() and (site / "search" / "search_index.json").is_file()
    assert (site / "reference" / "configuration.html").is_file()
    # nothing a page loads comes from another host (links to elsewhere are fine)
    loaded = re.compile(r"""<(?:script|img|iframe)[^>]*\ssrc=["'](?:https?:)?//"""
                        r"""|<link[^>]*rel=["']stylesheet["'][^>]*href=["'](?:https?:)?//"""
                        r"""|@import\s+url\(["']?(?:https?:)?//""")
    offenders = [str(p.relative_to(site)) for p in site.rglob("*")
                 if p.suffix in (".html", ".css") and loaded.search(p.read_text(errors="replace"))]
    assert not offenders, offenders


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with open(tmp_path / "docs" / "limits.md", "a", encoding="utf-8") as f:
        f.write("\nSee [a page that is not there](operate/gone.md).\n")
    built = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "operate/gone.md" in built.stdout + built.stderr
