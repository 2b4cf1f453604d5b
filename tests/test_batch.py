"""`forensics batch`: one report per incident, a fleet index and summary, errors isolated."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from forensics.batch.run import Limits, find_incidents, incident_id, plan, run_local
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


def _jobs(tmp_path: Path):
    root = _archive(tmp_path)
    return plan([root], tmp_path / "out"), root


def test_a_second_run_reuses_unchanged_incidents_and_redoes_a_changed_one(tmp_path):
    jobs, root = _jobs(tmp_path)
    first = run_local(jobs, 2, lambda _: None)
    said: list[str] = []
    assert run_local(jobs, 2, said.append) == first
    assert said[0] == "2 of 3 incidents unchanged since the last run: reused"
    assert len(said) == 2 and said[1].startswith("[1/1] empty_incident:")  # a failed incident is tried again
    (root / "healthy" / "extra.log").write_text("RuntimeError: boom\n")
    said.clear()
    rows = {row["id"]: row for row in run_local(jobs, 2, said.append)}
    assert said[0] == "1 of 3 incidents unchanged since the last run: reused"
    assert rows["healthy"]["category"] != "NO_FAILURE"
    said.clear()
    run_local(jobs, 2, said.append, force=True)
    assert not any("reused" in line for line in said)


def test_an_incident_that_runs_out_of_time_or_memory_is_an_error_row_and_the_batch_goes_on(tmp_path):
    jobs, _ = _jobs(tmp_path)
    # Under a 32 MiB cap the worker usually dies importing polars, but its allocator may instead
    # spin on failed mmaps: the wall-clock limit then ends it. Either way it is an error row.
    for limits, errors in [
        (Limits(timeout_s=0.05), ("timed out",)),
        (Limits(timeout_s=30, memory_bytes=32 << 20), ("worker", "timed out")),
    ]:
        rows = run_local(jobs, 2, lambda _: None, limits, force=True)
        assert [row["id"] for row in rows] == [job.incident_id for job in jobs]
        assert all(any(e in (row["error"] or "") for e in errors) for row in rows), rows
