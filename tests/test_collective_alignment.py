"""Cross-rank collective matching and straggler attribution from traces."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest.traces import load_trace, load_traces
from forensics.passes.collective_alignment import align_collectives
from forensics.schema import FINDINGS
from tests.conftest import find_traces

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures" / "traces"
SHARED = Path(os.environ.get("FORENSICS_SHARED", REPO / ".." / "shared")).resolve()
DLRM = SHARED / "corpus" / "traces" / "param_dlrm_8rank"


@pytest.fixture(scope="module")
def straggler():
    return align_collectives(load_traces(find_traces(FIXTURES / "straggler_4rank")))


def test_collectives_are_matched_by_process_group_and_seq(straggler):
    c = straggler.collectives
    assert c.height == 3
    assert c["group"].to_list() == ["pg 0"] * 3 and c["ordinal"].to_list() == [1, 2, 3]
    assert c["op"].to_list() == ["allreduce"] * 3 and not c["op_mismatch"].any()
    assert c["n_ranks"].to_list() == [4] * 3


def test_late_rank_skew_and_waiting(straggler):
    c = straggler.collectives
    # Rank 2 reaches each allreduce 4000 us after the others, who each wait that long.
    assert c["late_rank"].to_list() == [2, 2, 2]
    assert c["start_skew_us"].to_list() == [4000] * 3
    assert c["wait_caused_us"].to_list() == [3 * 4000] * 3
    lags = straggler.arrivals.filter(pl.col("collective") == 0).sort("rank")["arrival_lag_us"].to_list()
    assert lags == [0, 0, 4000, 0]


def test_straggler_is_reported_as_initiating(straggler):
    (s,) = straggler.stragglers
    assert s["rank"] == 2
    # Work between allreduces: 9500 us per gap for rank 2, 5500 for the others.
    assert s["slowdown"] == round(19000 / 11000, 2)
    assert "3 of 3 collectives" in s["evidence"]
    f = straggler.findings
    assert f.schema == pl.Schema(FINDINGS)
    (row,) = f.to_dicts()
    assert (row["category"], row["role"], row["severity"], row["rank"]) == ("STRAGGLER", "initiating", "warning", 2)
    assert row["file"].endswith("rank2.pt.trace.json") and row["line"] is None
    assert json.loads(row["captures"])["wait_caused_us"] == 36000


def test_one_rank_alone_matches_nothing():
    align = align_collectives([load_trace(FIXTURES / "straggler_4rank" / "rank0.pt.trace.json")])
    assert align.collectives.is_empty() and align.stragglers == []


def test_collectives_without_metadata_match_by_stream_order():
    # Strip the NCCL metadata: matching must fall back to order on the stream.
    loads = load_traces(find_traces(FIXTURES / "straggler_4rank"))
    for t in loads:
        t.events = t.events.with_columns(pl.lit(None, pl.String).alias("pg_name"), pl.lit(None, pl.Int64).alias("seq"))
    c = align_collectives(loads).collectives
    assert c["group"].unique().to_list() == ["stream 20"] and c["ordinal"].to_list() == [0, 1, 2]
    assert c["late_rank"].to_list() == [2, 2, 2]


def test_no_collectives_no_stragglers():
    align = align_collectives([load_trace(next((FIXTURES / "edge" / "cpu_only").iterdir()))])
    assert align.collectives.is_empty() and align.stragglers == [] and align.findings.is_empty()


@pytest.mark.skipif(
    not DLRM.is_dir(), reason=f"real trace corpus not found at {DLRM} (set FORENSICS_SHARED to the folder holding corpus/traces)"
)
def test_param_dlrm_8rank():
    align = align_collectives(load_traces(sorted(DLRM.glob("*.json"))))
    c = align.collectives
    # 5 all-to-all (SendRecv) + 3 AllReduce kernels per rank, all on stream 84.
    assert c.height == 8 and c["n_ranks"].to_list() == [8] * 8
    assert sorted(c["op"].to_list()) == ["AllReduce"] * 3 + ["SendRecv"] * 5
    # The late rank is the one whose kernel is shortest, and here also the last to start.
    assert (c["late_rank"] == c["last_started_rank"]).all()
    ranks = align.ranks
    assert ranks["rank"][0] == 7  # most waiting caused
    assert [s["rank"] for s in align.stragglers] == [7]
    assert align.findings["role"].to_list() == ["symptom"]  # late at 5 of 8, slowdown 1.24: not persistent
