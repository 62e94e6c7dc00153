"""The documentation build fails on a broken link: the project's own mkdocs.yml, on a two-page site.

``make test`` builds the whole site with warnings as errors (``make docs``); these builds inherit its
configuration (theme, validation, strictness, plugins) and change only the pages, so that what fails
is the link and nothing else.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build(tmp_path: Path, index: str) -> subprocess.CompletedProcess[str]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(index)
    (docs / "install.md").write_text("# Install\n\n## With pip\n\nText.\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {REPO / 'mkdocs.yml'}\n"
        f"docs_dir: {docs}\n"
        "nav:\n  - Overview: index.md\n  - Install: install.md\n"
        # The project's plugins but the ones that read its README, changelog and package.
        "plugins:\n  - search\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
        timeout=300,
        check=False,
    )


def test_a_site_whose_links_resolve_builds(tmp_path: Path) -> None:
    result = build(tmp_path, "# Overview\n\nSee [installing](install.md#with-pip).\n")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "install" / "index.html").is_file()


@pytest.mark.parametrize(
    ("link", "reported"),
    [
        ("[the missing page](missing.md)", "missing.md"),
        ("[a missing heading](install.md#with-conda)", "with-conda"),
    ],
    ids=["page", "anchor"],
)
def test_a_broken_link_fails_the_build_naming_it(tmp_path: Path, link: str, reported: str) -> None:
    result = build(tmp_path, f"# Overview\n\nSee {link}.\n")
    assert result.returncode != 0
    assert reported in result.stderr and "index.md" in result.stderr


PUBLIC_CLASS = re.compile(r"^class (\w+(?:Operator|Hook|Sensor|Trigger|Submitter))\b", re.M)


@pytest.mark.parametrize("room", ["operators", "hooks", "sensors", "triggers"])
def test_every_module_with_an_operator_hook_sensor_or_trigger_has_its_reference_page_entry(room: str) -> None:
    page = (REPO / "docs" / "reference" / f"{room}.md").read_text()
    listed = set(re.findall(r"^::: (\S+)$", page, re.M))
    modules = {
        f"airflow_kinesis_snowflake.{room}.{path.stem}"
        for path in (REPO / "airflow_kinesis_snowflake" / room).glob("*.py")
        if PUBLIC_CLASS.search(path.read_text())
    }
    assert modules and modules <= listed, sorted(modules - listed)
