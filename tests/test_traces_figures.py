"""The trace figures render to real PNG files."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.ingest.traces import find_traces, load_traces
from forensics.passes.collective_alignment import align_collectives
from forensics.passes.trace_breakdown import breakdown_frame
from forensics.report.trace_figures import breakdown_bars, skew_heatmap

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
PNG = b"\x89PNG\r\n\x1a\n"


def test_breakdown_bars_and_skew_heatmap(tmp_path):
    loads = load_traces(find_traces(FIXTURES / "straggler_4rank"))
    bars = breakdown_bars(breakdown_frame(loads), tmp_path / "figs")
    heat = skew_heatmap(align_collectives(loads).arrivals, tmp_path / "figs")
    for path in (bars, heat):
        assert path.parent == tmp_path / "figs" and path.read_bytes()[:8] == PNG


def test_figures_with_nothing_to_draw(tmp_path):
    empty_breakdown = pl.DataFrame(
        {"rank": [3], "kernel_time_us": [0], "idle_time_us": [0], "compute_time_us": [0], "non_compute_time_us": [0]}
    )
    assert breakdown_bars(empty_breakdown, tmp_path).read_bytes()[:8] == PNG
    assert skew_heatmap(pl.DataFrame(schema={"rank": pl.Int32, "collective": pl.UInt32, "arrival_lag_us": pl.Int64}), tmp_path) is None
