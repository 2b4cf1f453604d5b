"""The code is formatted and linted by ruff, configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True, check=False)


def test_ruff_lint_passes():
    result = _ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_nothing_to_change():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
