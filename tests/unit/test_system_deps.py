"""scripts/system-deps.sh: what `make demo` and `make test` need beyond Python, installed or named."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "system-deps.sh"


def run(tmp_path: Path, *needs: str) -> subprocess.CompletedProcess[str]:
    """The script on a PATH holding only bash and id: no Java, no Chromium, no apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("bash", "id"):
        found = shutil.which(tool)
        assert found is not None
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    env = {**os.environ, "PATH": str(bin_dir)}
    return subprocess.run([str(bin_dir / "bash"), str(SCRIPT), *needs], env=env, capture_output=True, text=True)


def test_without_apt_get_a_missing_package_is_named_with_the_command_that_installs_it(tmp_path: Path) -> None:
    java = run(tmp_path, "java")
    assert java.returncode == 1
    assert "Java 17+, which spark-submit needs is missing" in java.stderr
    assert "apt-get install -y openjdk-17-jre-headless" in java.stderr
    chromium = run(tmp_path, "chromium")
    assert chromium.returncode == 1 and "apt-get install -y chromium" in chromium.stderr


def test_an_unknown_dependency_is_refused(tmp_path: Path) -> None:
    result = run(tmp_path, "cobol")
    assert result.returncode == 2 and "unknown system dependency: cobol" in result.stderr


def test_what_is_there_is_left_alone(tmp_path: Path) -> None:
    assert run(tmp_path).returncode == 0  # nothing asked, nothing done
