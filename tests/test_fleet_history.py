"""A generated fleet history, analyzed by `forensics batch`, gives back what was planted in it.

The full-size run (2,000 incidents on 200 hosts) is benchmarks/fleet.py; here a small history
checks the chain end to end: re-hosted incidents keep their template's verdict and culprit host,
and fleet.md names the lemon GPU, the most-blamed host, the nightly failure window and the lemon
board that moved between the two lemon hosts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from forensics.batch.fleet import write_fleet
from forensics.batch.manifest import read_manifest
from forensics.batch.run import plan_manifest, run_local

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "generate"))
import fleet_history  # the generator is a script of fixtures/generate, not a package


def test_a_generated_history_gives_back_its_planted_facts(tmp_path):
    planted = fleet_history.generate(tmp_path / "history", incidents=40, hosts=10, seed=11)
    jobs = plan_manifest(read_manifest(tmp_path / "history" / "manifest.csv"), tmp_path / "out")
    index = write_fleet(run_local(jobs, 2, lambda _: None), tmp_path / "out")
    key = pl.read_csv(tmp_path / "history" / "manifest.csv").select("id", "template", "category", "culprit_host")
    got = index.join(key, on="id", suffix="_planted")
    assert got.filter(pl.col("category") != pl.col("category_planted")).select("id", "template", "category").rows() == []
    hosted = got.filter(pl.col("culprit_host").is_not_null())
    assert hosted.filter(~pl.col("culprit_hosts").list.contains(pl.col("culprit_host"))).select("id", "template").rows() == []
    fleet = (tmp_path / "out" / "fleet.md").read_text()
    assert planted["lemon_gpu"] in fleet
    hosts_table = fleet.split("## Hosts that keep failing")[1]
    assert next(line for line in hosts_table.splitlines() if line.startswith("| gpu")).startswith(f"| {planted['lemon_hosts'][0]} |")
    assert any(f"Failures cluster between {planted['window_start_hour'] - k:02d}:00" in fleet for k in (0, 1))
    # The lemon board is one serial blamed at both lemon hosts' slots: only the serial ties them together.
    board = next(line for line in fleet.split("## GPU boards that keep failing")[1].splitlines() if line.startswith("| 1"))
    assert board.startswith(f"| {planted['lemon_board']} |")
    assert all(f"{host}:00000000:2A:00.0" in board for host in planted["lemon_hosts"])
