"""Loom as an operator installs it: a wheel carrying every subpackage, the styles and both commands,
installed into a fresh venv and run from there (no PYTHONPATH, not the repo's checkout)."""

from __future__ import annotations

import subprocess
import zipfile

from conftest import REPO


def test_wheel_contents(installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    packages = sorted(
        str(p.parent.relative_to(REPO)) for p in (REPO / "loomtui").rglob("__init__.py") if "__pycache__" not in str(p)
    )
    for package in packages:
        assert f"{package}/__init__.py" in names, f"{package} missing from the wheel: add it to pyproject"
    for style in (REPO / "styles").glob("*.tcss"):
        assert f"loomtui/styles/{style.name}" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    assert "loom = " in text and "loom-tui = " in text
    assert not any(n.startswith(("tests/", "state/")) for n in names)


def run(installed, *argv: str, cwd, env=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(installed.bin / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=installed.env(env))


def test_installed_commands_run_from_the_venv(installed, tmp_path):
    # Run outside the checkout, so nothing can be imported from the repository by accident.
    where = run(installed, "python", "-c", "import loomtui; print(loomtui.__file__)", cwd=tmp_path)
    assert where.returncode == 0 and where.stdout.startswith(str(installed.bin.parent)), where
    for argv in (("loom", "--help"), ("loom-tui", "--help")):
        result = run(installed, *argv, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "usage:" in result.stdout.lower()


def test_installed_doctor_passes_on_a_good_setup(installed, tmp_path):
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    # The doctor checks the canary's permissions against the command it launches: the demo agent's
    # command has no Claude flags to get wrong.
    config.write_text(
        f'state_dir = "{state}"\n[agent]\ntmux_socket = "loomtest-doctor-{tmp_path.name[-8:]}"\n'
        f'cwd = "{tmp_path}"\n'
        'fresh_command = "python3 -m loomtui.demo.agent --session-id {session_id}"\n'
        'resume_command = "python3 -m loomtui.demo.agent --resume {session_id}"\n'
    )
    result = run(installed, "loom", "--config", str(config), "doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok" in result.stdout.lower()
