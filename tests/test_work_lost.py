"""The last checkpoint written before the failure, and the steps and time lost since (passes.work_lost)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from forensics.cli import app
from forensics.flow import analyze
from forensics.ingest.metrics import extract_metrics
from forensics.passes.work_lost import work_lost
from forensics.schema import FINDINGS, LINES, conform, empty
from tests.conftest import write_files

ROOT = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_save_that_began_before_the_crash_and_never_finished_is_not_the_checkpoint():
    """Megatron-LM#314 as posted: iteration 400 was saved, the save at 600 crashed in torch.save."""
    lost = analyze(ROOT / "public" / "megatron_lm_314_checkpoint_save_unexpected_pos").verdict.work_lost
    assert (lost["checkpoint"]["line"], lost["checkpoint"]["step"]) == (2, 400)
    assert "successfully saved checkpoint at iteration     400" in lost["checkpoint"]["text"]
    assert (lost["unfinished"]["line"], lost["unfinished"]["step"]) == (7, 600)
    assert (lost["last_step"], lost["steps_lost"]) == (600, 200)


def test_a_save_followed_by_more_steps_was_written_and_the_time_since_is_measured(tmp_path):
    log = "\n".join(
        [
            "2024-05-08 08:40:00,000 INFO step 99 loss 2.10",
            "2024-05-08 08:40:01,000 INFO Saving checkpoint to /ckpt/step_100",
            "2024-05-08 08:40:02,000 INFO step 100 loss 2.08",
            "2024-05-08 08:40:03,000 INFO step 101 loss 2.07",
            "2024-05-08 09:10:01,000 INFO step 140 loss 2.01",
            "2024-05-08 09:10:05,000 ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
    )
    root = write_files(tmp_path / "job", {"rank_0.log": log + "\n"})
    verdict = analyze(root).verdict
    lost = verdict.work_lost
    assert verdict.category == "CUDA_OOM"
    assert (lost["checkpoint"]["line"], lost["checkpoint"]["step"], lost["unfinished"]) == (2, 100, None)
    assert (lost["last_step"], lost["steps_lost"]) == (140, 40)
    assert lost["seconds_lost"] == 30 * 60 + 4 and lost["at_least"] is False


def test_no_checkpoint_line_says_so_and_no_failure_has_no_work_lost():
    lines = conform(pl.DataFrame({"file": "r.log", "line": [1, 2], "text": ["step 1 loss 2.0", "step 2 loss 1.9"]}), LINES)
    failure = {"file": "r.log", "line": 3, "time": None, "time_after": None}
    lost = work_lost(empty(FINDINGS), extract_metrics(lines), failure)
    assert (lost["checkpoint"], lost["unfinished"], lost["last_step"], lost["steps_lost"]) == (None, None, 2, None)
    assert work_lost(empty(FINDINGS), extract_metrics(lines), None) is None


def test_the_postmortem_states_the_work_lost(tmp_path):
    root = ROOT / "public" / "megatron_lm_314_checkpoint_save_unexpected_pos"
    CliRunner().invoke(app, ["analyze", str(root), "--out", str(tmp_path / "out")])
    report = (tmp_path / "out" / "postmortem.md").read_text()
    line = next(row for row in report.splitlines() if row.startswith("- **Work lost:**"))
    assert "`console.log:2` at step 400; 200 steps since then" in line and "`console.log:7`" in line


def test_a_failure_time_that_is_no_time_costs_only_the_time_lost():
    lines = conform(pl.DataFrame({"file": "r.log", "line": [1, 2], "text": ["step 1 loss 2.0", "step 2 loss 1.9"]}), LINES)
    failure = {"file": "r.log", "line": 3, "time": "not a time", "time_after": "9999-12-31T23:59:59Z"}
    lost = work_lost(empty(FINDINGS), extract_metrics(lines), failure)
    assert (lost["last_step"], lost["seconds_lost"]) == (2, None)
