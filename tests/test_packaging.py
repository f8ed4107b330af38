"""A non-editable install (wheel) carries every subpackage, the styles, and both commands."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import REPO


def test_wheel_contents(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    wheel = next(tmp_path.glob("loomtui-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(
        str(p.parent.relative_to(REPO)) for p in (REPO / "loomtui").rglob("__init__.py") if "__pycache__" not in str(p)
    )
    for package in packages:
        assert f"{package}/__init__.py" in names, f"{package} missing from the wheel: add it to pyproject"
    for style in (REPO / "styles").glob("*.tcss"):
        assert f"loomtui/styles/{style.name}" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "loom = " in text and "loom-tui = " in text
    assert not any(n.startswith(("tests/", "state/")) for n in names)
