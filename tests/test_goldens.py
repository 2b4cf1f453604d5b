"""Golden postmortems: six representative incidents, read line by line once, then compared exactly.

A change that alters one of them fails here with the diff; when the new text is better, review it
and rewrite the goldens with `FORENSICS_UPDATE_GOLDENS=1 python -m pytest tests/test_goldens.py`.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from forensics.flow import analyze
from forensics.output import write_report

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = Path(__file__).resolve().parent / "goldens"
# (fixture, what it represents)
REPRESENTATIVE = [
    ("cuda_oom_8rank_cascade", "a crash with a cascade"),
    ("hang_nccl_8rank_one_silent", "a hang"),
    ("straggler_midrun", "a straggler"),
    ("hw_xid79_fell_off_bus", "a hardware fault"),
    ("nan_loss", "a numerical failure"),
    ("unknown_python_error", "an unknown failure"),
]


@pytest.mark.parametrize("name", [name for name, _ in REPRESENTATIVE])
def test_the_postmortem_is_the_reviewed_golden(name, tmp_path):
    write_report(analyze(ROOT / "fixtures" / "incidents" / name), tmp_path)
    got = (tmp_path / "postmortem.md").read_text(encoding="utf-8")
    golden = GOLDENS / f"{name}.md"
    if os.environ.get("FORENSICS_UPDATE_GOLDENS") == "1":
        golden.write_text(got, encoding="utf-8")
    want = golden.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "now", n=1))
    assert got == want, f"{name}'s postmortem changed:\n{diff}"
