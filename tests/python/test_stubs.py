"""The type stubs of batchcast._native agree with the extension module:
mypy's stubtest compares every name, signature and default of the stub with
the module as built (scripts/check-python.sh runs the same check in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import batchcast

PACKAGE = Path(batchcast.__file__).parent


def test_the_package_ships_its_stubs_and_py_typed():
    assert (PACKAGE / "_native.pyi").is_file()
    assert (PACKAGE / "py.typed").is_file()


def test_stubtest_finds_the_stub_and_the_module_in_agreement():
    pytest.importorskip("mypy.stubtest", reason="mypy is not installed (scripts/check-python.sh installs it)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "--concise", "batchcast._native"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"stub and module disagree:\n{done.stdout}{done.stderr}"
