"""`forensics batch`: one report per incident, a fleet index and summary, errors isolated."""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from forensics.batch.fleet import index_frame, render_fleet, write_fleet
from forensics.batch.lemons import gpu_blame, host_blame
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


def test_batch_without_figures_draws_none_and_a_run_with_them_redoes_the_incidents(tmp_path):
    root, out = _archive(tmp_path), tmp_path / "out"
    assert CliRunner().invoke(app, ["batch", str(root), "--out", str(out), "--jobs", "1", "--no-figures"]).exit_code == 0
    assert not list((out / "incidents").rglob("*.png"))
    assert CliRunner().invoke(app, ["batch", str(root), "--out", str(out), "--jobs", "1"]).exit_code == 0
    assert list((out / "incidents" / "cuda_oom_8rank_cascade" / "figures").glob("*.png"))


def test_batch_writes_a_findings_dataset_one_file_per_incident(tmp_path):
    root, out = _archive(tmp_path), tmp_path / "out"
    assert CliRunner().invoke(app, ["batch", str(root), "--out", str(out), "--jobs", "1"]).exit_code == 0
    assert sorted(p.name for p in (out / "findings").iterdir()) == ["cuda_oom_8rank_cascade.parquet", "healthy.parquet"]
    findings = pl.scan_parquet(out / "findings" / "*.parquet").collect()
    index = pl.read_parquet(out / "index.parquet")
    oom = findings.filter(pl.col("incident") == "cuda_oom_8rank_cascade")
    assert set(oom["verdict_category"]) == {"CUDA_OOM"}
    # The verdict's leading evidence is marked, and its first pattern is the index's signature.
    signature = index.filter(pl.col("id") == "cuda_oom_8rank_cascade")["signature"].item()
    assert signature in oom.filter("leading")["pattern"].to_list()
    # The watchdog's timeout from four ranks is one template.
    watchdog = oom.filter(pl.col("pattern") == "DIST001")
    assert (watchdog.height, watchdog["rank"].n_unique(), watchdog["template"].n_unique()) == (4, 4, 1)
    # An incident that no longer analyzes loses its stale rows.
    shutil.rmtree(root / "healthy")
    (root / "healthy").mkdir()
    assert CliRunner().invoke(app, ["batch", str(root), "--out", str(out), "--jobs", "1"]).exit_code == 0
    assert not (out / "findings" / "healthy.parquet").exists()


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


def test_incidents_are_the_folders_that_hold_files_at_any_depth_of_an_archive(tmp_path):
    root = tmp_path / "archive"
    for folder in ("2024/05/job-1", "2024/05/job-1/traces", "2025/job-2", "job-3", ".trash/job-4"):
        (root / folder).mkdir(parents=True)
    for file in (
        "2024/05/job-1/rank_0.log",
        "2024/05/job-1/traces/rank_0.json",
        "2025/job-2/rank_0.log",
        "job-3/dmesg.txt",
        ".trash/job-4/x.log",
    ):
        (root / file).write_text("hello\n")
    (root / "2026").mkdir()  # an empty archive level is an incident with no files, said in its row
    found = find_incidents([root])
    assert [p.relative_to(root).as_posix() for p in found] == ["2024/05/job-1", "2025/job-2", "2026", "job-3"]
    assert [job.incident_id for job in plan([root], tmp_path / "out")] == ["2024_05_job-1", "2025_job-2", "2026", "job-3"]
    # One incident folder given as the root is that incident, its traces/ included.
    assert find_incidents([root / "2024/05/job-1"]) == [root / "2024/05/job-1"]


def _planted_fleet(seed: int = 7) -> list[dict]:
    """300 failures on 40 hosts, four hosts per job and one of them blamed at random; except that
    `gpu-17` is blamed in most failures it takes part in."""
    rng = random.Random(seed)
    hosts = [f"gpu-{i:02d}" for i in range(40)]
    rows = []
    for n in range(300):
        job_hosts = rng.sample(hosts, 4)
        culprit = "gpu-17" if "gpu-17" in job_hosts and rng.random() < 0.8 else rng.choice(job_hosts)
        rows.append(
            {
                "id": f"job-{n:03d}", "path": f"/a/job-{n:03d}", "category": rng.choice(["HARDWARE", "NETWORK", "CUDA_ERROR"]),
                "state": "crashed", "confidence": 0.9, "summary": "", "culprit_ranks": [0], "culprit_hosts": [culprit],
                "culprit_gpus": [f"{culprit}:0000:3b:00.0"] if culprit == "gpu-17" else [], "hosts": job_hosts,
                "signature": "HW002" if culprit == "gpu-17" else "NCCL001", "world_size": 32,
                "start": f"2025-{1 + n % 12:02d}-{1 + n % 28:02d}T{n % 24:02d}:00:00Z",
            }
        )  # fmt: skip
    return rows


def test_a_host_blamed_far_more_often_than_its_share_is_a_lemon_and_the_others_are_within_chance():
    blame = host_blame(index_frame(_planted_fleet()))
    lemons = blame.filter(pl.col("lemon"))["host"].to_list()
    assert lemons == ["gpu-17"]
    top = blame.row(0, named=True)
    assert top["host"] == "gpu-17" and top["blamed"] > 3 * top["expected"]
    assert gpu_blame(index_frame(_planted_fleet()))["gpu"].to_list() == ["gpu-17:0000:3b:00.0"]
    # With no planted host, nobody is a lemon.
    fair = [row | {"culprit_hosts": [row["hosts"][0]], "culprit_gpus": []} for row in _planted_fleet()]
    assert host_blame(index_frame(fair)).filter(pl.col("lemon")).is_empty()


def test_fleet_md_names_the_lemon_and_the_recurring_signatures():
    fleet = render_fleet(index_frame(_planted_fleet()))
    assert "## Recurring signatures" in fleet and "`HW002`" in fleet
    lemon_row = next(line for line in fleet.splitlines() if line.startswith("| gpu-17 |"))
    assert "**lemon**" in lemon_row
    assert "## GPUs that keep failing" in fleet and "gpu-17:0000:3b:00.0" in fleet


def test_an_archive_nested_deeper_than_the_interpreter_s_stack_is_walked(tmp_path):
    deep = tmp_path / "archive"
    folder = deep
    deep.mkdir()
    for _ in range(600):  # a recursive walk spends two frames a level: past the 1,000-frame limit
        folder = folder / "a"
        folder.mkdir()
    (folder / "rank_0.log").write_text("hello\n")
    try:
        assert find_incidents([deep]) == [folder]
    finally:
        shutil.rmtree(deep)  # here, not in pytest's own clean-up of old temporary folders


def test_fleet_md_groups_unknown_failures_by_message_and_queues_unsure_verdicts():
    """Three UNKNOWN failures print one message with different numbers: one template, three incidents."""
    rows = _planted_fleet()[:20]
    for n, row in enumerate(rows[:3]):
        row.update(
            category="UNKNOWN",
            confidence=0.3,
            first_failure_text=f"[rank{n}]: RuntimeError: shard {n * 7} of /data/run{n}/part.bin has {100 + n} records, expected 128",
        )
    rows[3].update(category="UNKNOWN", confidence=0.3, first_failure_text="FATAL: store at 10.0.0.1 refused")
    rows[4].update(confidence=0.45)
    rows[5].update(category="UNKNOWN", state="unknown", confidence=0.2)  # no failure line: undetermined, not a message
    fleet = render_fleet(index_frame(rows))
    section = fleet.split("## UNKNOWN failures by message")[1].split("\n## ")[0]
    assert "4 failures match no known signature" in section
    top = next(line for line in section.splitlines() if line.startswith("| `RuntimeError"))
    assert "RuntimeError: shard <n> of <path> has <n> records, expected <n>" in top and "| 3 |" in top
    queue = fleet.split("## Review queue")[1].split("\n## ")[0]
    assert "1 more UNKNOWN verdicts cite no failure line" in section
    assert "6 verdicts are less than 50% sure" in queue
    assert queue.index("`job-000`") < queue.index("`job-004`")  # least sure first
    assert "`job-006`" not in queue


def test_a_manifest_names_incidents_and_its_columns_win_over_the_logs(tmp_path):
    root = _archive(tmp_path)
    manifest = tmp_path / "jobs.csv"
    manifest.write_text(
        "id,path,cluster,user,model,world_size,start,ignored\n"
        f"job-17,{root / 'cuda_oom_8rank_cascade'},east,alice,llama-8b,64,2023-03-04 05:06:07,x\n"
        "job-18,archive/healthy,west,bob,,,,\n"  # relative to the manifest's folder
        "job-19,archive/gone,west,bob,,,,\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["batch", "--manifest", str(manifest), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in pl.read_parquet(out / "index.parquet").iter_rows(named=True)}
    assert sorted(rows) == ["job-17", "job-18", "job-19"]
    oom = rows["job-17"]
    assert (oom["category"], oom["cluster"], oom["user"], oom["model"], oom["world_size"]) == ("CUDA_OOM", "east", "alice", "llama-8b", 64)
    assert oom["start"].isoformat() == "2023-03-04T05:06:07+00:00"
    assert rows["job-18"]["category"] == "NO_FAILURE" and rows["job-18"]["model"] is None
    assert rows["job-19"]["error"] and rows["job-19"]["cluster"] == "west"
    assert "## By cluster" in (out / "fleet.md").read_text()


def test_a_manifest_without_a_path_column_is_a_usage_error(tmp_path):
    manifest = tmp_path / "jobs.json"
    manifest.write_text('[{"id": "a", "folder": "x"}]')
    result = CliRunner().invoke(app, ["batch", "--manifest", str(manifest), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no 'path' column" in result.output
    result = CliRunner().invoke(app, ["batch", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--manifest" in result.output


def test_a_worker_that_answers_garbage_or_dies_costs_one_row_and_is_replaced(tmp_path):
    """The row protocol survives a worker that prints something else, or exits, mid-conversation."""
    from forensics.batch.run import Worker

    jobs, _ = _jobs(tmp_path)
    garbage = Worker(Limits(timeout_s=30), 1)
    garbage.command = (sys.executable, "-c", "import sys; sys.stdin.readline(); print('not a row', flush=True)")
    assert "something other than a row" in garbage.run(jobs[0])["error"]
    assert garbage.process is None  # stopped: the next job gets a fresh process
    assert "something other than a row" in garbage.run(jobs[1])["error"]
    quitter = Worker(Limits(timeout_s=30), 1)
    quitter.command = (sys.executable, "-c", "import sys; print('bye', file=sys.stderr); sys.exit(3)")
    assert quitter.run(jobs[0])["error"] == "worker exited with code 3: bye"
    real = Worker(Limits(timeout_s=120), 1)
    rows = [real.run(job) for job in jobs]
    real.stop()
    assert [row["id"] for row in rows] == [job.incident_id for job in jobs] and rows[0]["category"] == "CUDA_OOM"


def test_fleet_md_draws_failures_per_month_and_tabulates_them_month_by_category(tmp_path):
    rows = _planted_fleet()
    rows[0] = rows[0] | {"category": "NO_FAILURE"}  # a healthy run is no failure: not counted
    index = write_fleet(rows, tmp_path)
    fleet = (tmp_path / "fleet.md").read_text()
    assert "![Failures per month by category](figures/failures_by_month.png)" in fleet
    assert (tmp_path / "figures" / "failures_by_month.png").stat().st_size > 10_000
    header = next(line for line in fleet.split("## When")[1].splitlines() if line.startswith("| month |"))
    assert set(header.strip("| ").split(" | ")[1:]) == {"`HARDWARE`", "`NETWORK`", "`CUDA_ERROR`"}
    january = next(line for line in fleet.splitlines() if line.startswith("| 2025-01 |"))
    assert (
        sum(int(n) for n in january.strip("| ").split(" | ")[1:])
        == 25 - 1
        == index.filter(pl.col("start").dt.strftime("%Y-%m") == "2025-01").height - 1
    )
    # Nothing dated, nothing drawn.
    undated = [row | {"start": None} for row in rows]
    write_fleet(undated, tmp_path / "undated")
    assert not (tmp_path / "undated" / "figures").exists() and "## When" not in (tmp_path / "undated" / "fleet.md").read_text()
