"""The published documentation's addresses: the one the package names is the site's and the metadata's,
every address the package gives users is a page of ``docs/`` and a heading of it, and no message or
template points at a ``docs/`` file, which a ``pip install`` does not bring."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml

from airflow_kinesis_snowflake import DOCS_URL, docs_url

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_kinesis_snowflake"
#: An address on the published site: the page (``docs/<page>.md``; none: the overview, the README) and anchor.
SITE_ADDRESS = re.compile(re.escape(DOCS_URL) + r"(?:(?P<page>[a-z0-9-]+)/)?(?:#(?P<anchor>[\w-]+))?")
#: A path to a file of the repository's docs/ (a pip user has none).
DOCS_FILE = re.compile(r"\bdocs/[\w-]+\.md\b")


def _ids(tokens: list[dict[str, Any]]) -> Iterator[str]:
    for token in tokens:
        yield token["id"]
        yield from _ids(token["children"])


def anchors(page: str | None) -> set[str]:
    """The anchors of a page's headings, as the site's Markdown (the toc extension) makes them."""
    source = REPO / "README.md" if page is None else REPO / "docs" / f"{page}.md"
    converter = markdown.Markdown(extensions=["toc", "fenced_code", "tables"])
    converter.convert(source.read_text(encoding="utf-8"))
    return set(_ids(converter.toc_tokens))


def unresolved(page: str | None, anchor: str | None) -> str | None:
    """Why the site has no such page or anchor; None when it has."""
    if page is not None and not (REPO / "docs" / f"{page}.md").is_file():
        return f"docs/{page}.md does not exist"
    if anchor is not None and anchor not in anchors(page):
        return f"{'README.md' if page is None else f'docs/{page}.md'} has no heading #{anchor}"
    return None


def unresolved_addresses(text: str) -> list[str]:
    """Each address of the site in ``text`` that names no page or heading, with the reason."""
    problems = []
    for match in SITE_ADDRESS.finditer(text):
        if (problem := unresolved(match["page"], match["anchor"])) is not None:
            problems.append(f"{match[0]}: {problem}")
    return problems


def _package_files(*suffixes: str) -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in suffixes and "__pycache__" not in p.parts)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module and its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_the_package_names_the_site_that_mkdocs_builds_and_the_metadata_links() -> None:
    site = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python/name:", ""))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    assert DOCS_URL == site["site_url"] == project["urls"]["Documentation"]
    assert DOCS_URL.startswith("https://") and DOCS_URL.endswith("/")
    assert docs_url() == DOCS_URL
    assert docs_url("spark") == f"{DOCS_URL}spark/"
    assert docs_url("install", "6-sizing") == f"{DOCS_URL}install/#6-sizing"
    assert docs_url(section="configure-a-connector") == f"{DOCS_URL}#configure-a-connector"


def test_every_address_of_the_site_in_the_package_is_a_page_and_a_heading_of_docs() -> None:
    problems = []
    calls = 0
    for path in _package_files(".py", ".txt", ".yaml"):
        text = path.read_text(encoding="utf-8")
        problems += [f"{path.relative_to(REPO)}: {p}" for p in unresolved_addresses(text)]
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "docs_url":
                calls += 1
                arguments = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                assert len(arguments) == len(node.args), f"{path}:{node.lineno}: docs_url takes literal arguments"
                page, anchor = [*arguments, "", ""][:2]
                if (problem := unresolved(page or None, anchor or None)) is not None:
                    problems.append(f"{path.relative_to(REPO)}:{node.lineno}: docs_url{tuple(arguments)}: {problem}")
    assert calls >= 10  # the messages, the DAG docs and the status warnings
    assert not problems, "\n".join(problems)


def test_the_checks_of_addresses_fail_on_a_page_or_heading_the_site_lacks() -> None:
    assert unresolved_addresses(f"see {DOCS_URL}spark/#no-such-heading.") == [
        f"{DOCS_URL}spark/#no-such-heading: docs/spark.md has no heading #no-such-heading"
    ]
    assert unresolved_addresses(f"({DOCS_URL}nowhere/)") == [f"{DOCS_URL}nowhere/: docs/nowhere.md does not exist"]
    assert unresolved_addresses(f"{DOCS_URL}#configure-a-connector {DOCS_URL}install/#6-sizing") == []


@pytest.mark.parametrize("suffix", [".py", ".txt", ".yaml"])
def test_no_message_or_template_of_the_package_points_at_a_docs_file(suffix: str) -> None:
    """Messages (string literals other than docstrings) and templates name the published pages instead."""
    found = []
    for path in _package_files(suffix):
        text = path.read_text(encoding="utf-8")
        if suffix != ".py":
            found += [f"{path.relative_to(REPO)}: {m[0]}" for m in DOCS_FILE.finditer(text)]
            continue
        tree = ast.parse(text)
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {m[0]}" for m in DOCS_FILE.finditer(node.value)]
    assert not found, "\n".join(found)


def test_the_published_site_is_the_one_make_docs_builds() -> None:
    """The Pages workflow builds with the Makefile's target (the one `make test` runs with warnings as
    errors) and publishes the directory that build writes, from main."""
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "docs.yml").read_text())
    build = workflow["jobs"]["build"]["steps"]
    runs = [step["run"] for step in build if "run" in step]
    uploads = [step["with"]["path"] for step in build if str(step.get("uses", "")).startswith("actions/upload-pages")]
    (command,) = [r for r in runs if r.startswith("make docs")]
    site = re.search(r"SITE=(\S+)", command)
    assert site is not None and uploads == [site.group(1)]
    assert workflow[True]["push"]["branches"] == ["main"]  # YAML reads the key `on` as true
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^docs: install\n\t\$\(MKDOCS\) --site-dir \$\(SITE\)$", makefile, re.M)
    mkdocs = re.search(r"^MKDOCS := (.*)$", makefile, re.M)
    assert mkdocs is not None and "--strict" in mkdocs.group(1)
    assert workflow["jobs"]["deploy"]["steps"][0]["uses"].startswith("actions/deploy-pages@")
