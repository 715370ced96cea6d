"""The ``deadline`` fixture (tests/conftest.py): a test that overruns it fails, and the session goes on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_test_past_its_deadline_fails_and_the_next_one_still_runs(tmp_path):
    """A waiting test is interrupted as Ctrl-C would (the only signal some libraries' waits listen to) and reported as
    a failure naming the deadline; the session is not interrupted, so the test after it runs and passes."""
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tests / "conftest.py")
    shutil.copy(ROOT / "tests" / "helpers.py", tests / "helpers.py")
    (tests / "__init__.py").write_text("")
    (tests / "test_waits.py").write_text(
        "import time\n\n"
        "def test_waits(deadline):\n    deadline(0.5)\n    time.sleep(30)\n\n"
        "def test_after(deadline):\n    deadline(30)\n    assert True\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_waits.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout
    assert "test_waits - Failed: not finished within its 0.5 s deadline" in result.stdout
    assert "KeyboardInterrupt" not in result.stdout
