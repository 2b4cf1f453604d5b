"""Regressions found in code review: ties and joins must not make results depend on chance."""

from datetime import UTC
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest.rank_logs import _hosts
from forensics.passes.cross_rank import rank_table
from forensics.schema import FINDINGS, LINES, METRICS, conform, empty

REPEATS = 40  # a hash-ordered tie picks either side about half the time


def _lines(hosts: list[str]) -> pl.DataFrame:
    n = len(hosts)
    return conform(
        pl.DataFrame({"file": ["rank_0.log"] * n, "line": list(range(1, n + 1)), "rank": [0] * n, "host": hosts}),
        LINES,
    )


def test_rank_table_host_tie_is_the_smallest_name():
    lines = _lines(["node-b", "node-a", "node-b", "node-a"])
    hosts = {rank_table(lines, empty(FINDINGS), empty(METRICS), 1)["host"][0] for _ in range(REPEATS)}
    assert hosts == {"node-a"}


def test_rank_table_stays_sorted_by_rank_after_known_hosts_join():
    lines = conform(pl.DataFrame({"file": ["r.log"], "line": [1], "rank": [0], "host": ["h0"]}), LINES)
    known = pl.DataFrame(
        {"rank": list(range(63, -1, -1)), "host": [f"h{r}" for r in range(63, -1, -1)]}, schema={"rank": pl.Int32, "host": pl.String}
    )
    table = rank_table(lines, empty(FINDINGS), empty(METRICS), 64, known)
    assert table["rank"].to_list() == list(range(64))
    assert table["host"].to_list() == [f"h{r}" for r in range(64)]


def test_nccl_prefix_host_tie_is_the_smallest_name():
    text = [
        "node-b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        "node-a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "RuntimeError: a line with no host of its own",
    ]
    lines = pl.DataFrame(
        {"file": ["rank_0.log"] * 3, "line": [1, 2, 3], "rank": [0, 0, 0], "text": text},
        schema={"file": pl.String, "line": pl.Int64, "rank": pl.Int32, "text": pl.String},
    )
    hosts = {tuple(_hosts(lines.lazy()).collect()["host"]) for _ in range(REPEATS)}
    assert hosts == {("node-b", "node-a", "node-a")}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


@pytest.mark.parametrize("name", ["srun_host_oom_killed", "gpu_clean_dump"])
def test_gpu_ranks_table_is_sorted_and_repeatable(name):
    from forensics.flow import analyze

    tables = [analyze(FIXTURES / name).incident.tables["gpu_ranks"] for _ in range(3)]
    assert tables[0].height > 0
    assert tables[0].equals(tables[0].sort("host", "gpu", "pci_bus_id", nulls_last=True))
    assert all(t.equals(tables[0]) for t in tables[1:])
    assert tables[0].select("host", "pci_bus_id").is_unique().all()


def test_correlations_break_ties_by_name():
    from datetime import datetime, timedelta

    from forensics.passes.correlation import correlate
    from forensics.passes.periodicity import step_times

    t0 = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)
    rows = [
        {
            "pattern": f"EV{i}",
            "title": title,
            "role": "event",
            "severity": "info",
            "category": "CHECKPOINT",
            "file": "rank_0.log",
            "line": 10 * k + i,
            "rank": 0,
            "time": t0 + timedelta(seconds=100 * k),
        }
        for k in range(2)
        for i, title in enumerate(["z event", "a event", "m event"])
    ] + [
        {
            "pattern": "F",
            "title": "fail",
            "role": "initiating",
            "severity": "error",
            "category": "CUDA_ERROR",
            "file": f"rank_{r}.log",
            "line": 1,
            "rank": r,
            "time": t0 + timedelta(seconds=100 * r + 5),
        }
        for r in range(2)
    ]
    findings = conform(pl.DataFrame(rows), FINDINGS)
    metrics = conform(pl.DataFrame({"time": [t0, t0 + timedelta(seconds=300)]}), METRICS)
    orders = {tuple(correlate(findings, metrics, window_seconds=30, times=step_times(metrics))["event"].to_list()) for _ in range(REPEATS)}
    assert orders == {("a event", "m event", "z event")}
