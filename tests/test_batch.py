"""`forensics batch`: one report per incident, a fleet index and summary, errors isolated."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from forensics.batch.run import find_incidents, incident_id
from forensics.cli import app

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _archive(tmp_path: Path) -> Path:
    root = tmp_path / "archive"
    root.mkdir()
    for name in ("cuda_oom_8rank_cascade", "healthy"):
        shutil.copytree(INCIDENTS / name, root / name)
    (root / "empty_incident").mkdir()
    return root


def test_batch_writes_reports_index_and_fleet(tmp_path):
    root, out = _archive(tmp_path), tmp_path / "out"
    result = CliRunner().invoke(app, ["batch", str(root), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    index = pl.read_parquet(out / "index.parquet")
    assert index["id"].to_list() == ["cuda_oom_8rank_cascade", "empty_incident", "healthy"]
    by_id = {r["id"]: r for r in index.iter_rows(named=True)}
    assert by_id["cuda_oom_8rank_cascade"]["category"] == "CUDA_OOM"
    assert by_id["healthy"]["category"] == "NO_FAILURE"
    assert "no files" in by_id["empty_incident"]["error"]
    assert (out / "incidents" / "healthy" / "postmortem.md").is_file()
    fleet = (out / "fleet.md").read_text()
    assert "`CUDA_OOM`" in fleet and "Could not analyze" in fleet


def test_ids_are_safe_and_unique(tmp_path):
    taken: set[str] = set()
    first = incident_id(Path("/a/job 1/../x"), taken)
    second = incident_id(Path("/b/job 1/../x"), taken)
    assert first == "x" and second.startswith("x-") and "/" not in second


def test_root_without_subfolders_is_one_incident(tmp_path):
    (tmp_path / "rank_0.log").write_text("hello\n")
    assert find_incidents([tmp_path]) == [tmp_path]


def test_missing_root_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["batch", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
