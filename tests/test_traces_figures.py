"""The trace figures render to real PNG files."""

from __future__ import annotations

from pathlib import Path

from forensics.flow import analyze
from forensics.ingest.traces import load_traces
from forensics.passes.collective_alignment import align_collectives
from forensics.passes.trace_breakdown import breakdown_frame
from forensics.passes.trace_phases import phase_times
from forensics.report.trace_figures import breakdown_bars, phase_heatmap, skew_heatmap
from forensics.steps.traces import draw_trace_figures
from tests.conftest import find_traces

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
CPU_TRACES = FIXTURES.parent / "incidents" / "straggler_cpu_trace" / "traces"
PNG = b"\x89PNG\r\n\x1a\n"


def test_breakdown_bars_and_skew_heatmap(tmp_path):
    loads = load_traces(find_traces(FIXTURES / "straggler_4rank"))
    bars = breakdown_bars(breakdown_frame(loads), tmp_path / "figs")
    heat = skew_heatmap(align_collectives(loads).arrivals, tmp_path / "figs")
    for path in (bars, heat):
        assert path.parent == tmp_path / "figs" and path.read_bytes()[:8] == PNG


def test_phase_heatmap_of_cpu_only_traces(tmp_path):
    loads = load_traces(find_traces(CPU_TRACES))
    path = phase_heatmap(phase_times(loads), tmp_path)
    assert path.name == "trace_phases.png" and path.read_bytes()[:8] == PNG


def test_no_empty_chart_for_traces_without_gpu_time(tmp_path):
    incident = analyze(CPU_TRACES.parent).incident
    names = {p.name for p in draw_trace_figures(incident, tmp_path)}
    assert names == {"collective_skew.png", "trace_phases.png"}  # no GPU breakdown bars: there is no GPU time
