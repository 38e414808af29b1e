# setup.sh in a fresh clone of this repository: it makes .venv there, installs requirements.txt into it and runs
# the installer (demo fallback on this machine) with the arguments given; a second run reuses the environment.
import os
import signal
import subprocess

from installer_helpers import PROJECT_DIR


def run_setup(clone, args: list[str], env: dict, timeout_s: float) -> tuple[int, str]:
    """Runs setup.sh in its own process group, so that a run that hangs is ended with everything it started."""
    process = subprocess.Popen(["bash", "setup.sh", *args], cwd=clone, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise AssertionError(f"setup.sh {' '.join(args)} did not finish in {timeout_s} s:\n{output}") from None
    return process.returncode, output


def test_setup_sh_makes_the_venv_installs_packages_and_runs_the_installer(engine_bin, tmp_path):
    clone = tmp_path / "strata"
    subprocess.run(["git", "clone", "-q", str(PROJECT_DIR), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    code, first = run_setup(clone, ["--yes", "--no-start", "--engine", os.path.abspath(engine_bin)], env, 900)
    assert code == 0, first
    assert "Making the Python environment" in first
    assert "Installing the Python packages" in first
    assert "Serving the DEMO model" in first
    assert (clone / ".venv" / "bin" / "python").exists()
    assert (clone / "strata-demo.json").exists() and os.access(clone / "run-demo.sh", os.X_OK)
    assert f'"python": "{clone}/.venv/bin/python"' in (clone / "strata-demo.json").read_text()

    code, again = run_setup(clone, ["--no-start"], env, 120)
    assert code == 0, again
    assert "Making the Python environment" not in again
    assert "Installing the Python packages" not in again
    assert "Strata is set up (strata-demo.json). Start it with:" in again
