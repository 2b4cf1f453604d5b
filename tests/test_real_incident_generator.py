"""The real torchrun fixtures still hold what their generator checks (no torch needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GENERATOR = Path(__file__).resolve().parents[1] / "fixtures" / "generate" / "make_real_incidents.py"


def test_stored_real_incidents_pass_their_generator_checks():
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" ok") >= 8
