"""The source distribution carries the documentation's sources and the changelog, and its metadata points
at the published documentation."""

from __future__ import annotations

import shutil
import tarfile
from email.parser import Parser
from pathlib import Path

from airflow_kinesis_snowflake import DOCS_URL
from tests.emulators.servers import REPO_ROOT
from tests.integration.test_wheel_install import source_tree, uv


def test_the_sdist_carries_the_docs_the_changelog_and_the_documentation_url(tmp_path: Path) -> None:
    source = source_tree(tmp_path / "src")
    shutil.copytree(REPO_ROOT / "docs", source / "docs")
    dist = tmp_path / "dist"

    uv(["build", "--sdist", "--out-dir", str(dist), str(source)], cwd=tmp_path)

    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        root = archive.getnames()[0].split("/", 1)[0]
        member = archive.extractfile(f"{root}/PKG-INFO")
        assert member is not None
        metadata = Parser().parsestr(member.read().decode())
    pages = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "docs").rglob("*") if p.is_file()}
    assert {"docs/index.md", "docs/install.md", "docs/reference/operators.md", "docs/images/lag-page.png"} <= pages
    assert pages <= names, f"not in the sdist: {sorted(pages - names)}"
    assert {"CHANGELOG.md", "mkdocs.yml", "README.md", "LICENSE", "airflow_kinesis_snowflake/__init__.py"} <= names
    assert f"Documentation, {DOCS_URL}" in metadata.get_all("Project-URL", [])
