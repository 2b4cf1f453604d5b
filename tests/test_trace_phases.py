"""Time per annotated phase and in collectives from real CPU-only (gloo) profiler traces; the rank that runs long."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from forensics.ingest.traces import load_traces
from forensics.passes.collective_alignment import align_collectives
from forensics.passes.trace_phases import COLLECTIVES, leading_phases, phase_times, slow_phase_findings
from tests.conftest import find_traces

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
# Real torchrun run (gloo, CPU, torch.profiler CPU activity), rank 2's disk slow: see its expected.json.
CPU_TRACES = ROOT / "incidents" / "straggler_cpu_trace" / "traces"
GPU_TRACES = ROOT / "traces" / "straggler_4rank"


def _loads(folder: Path, ranks: set[int] | None = None):
    loads = load_traces(find_traces(folder))
    return [t for t in loads if ranks is None or t.rank in ranks]


def test_gloo_spans_are_the_collectives_of_a_cpu_only_trace():
    alignment = align_collectives(_loads(CPU_TRACES))
    assert set(alignment.collectives["group"]) == {"gloo"}
    assert set(alignment.collectives["op"]) == {"all_reduce"}
    assert alignment.collectives["n_ranks"].min() == 4
    assert [s["rank"] for s in alignment.stragglers] == [2]
    # Late at each step's first collective only, yet it caused nearly all the waiting: initiating.
    finding = alignment.findings.row(0, named=True)
    assert finding["role"] == "initiating" and json.loads(finding["captures"])["wait_share"] > 0.9


def test_the_slow_rank_is_named_with_its_phase_and_the_mirror_in_collectives():
    phases = phase_times(_loads(CPU_TRACES))
    data = phases.filter(pl.col("phase").str.contains("DataLoader"))
    slow = data.sort("per_step_ms", descending=True).row(0, named=True)
    assert slow["rank"] == 2 and slow["steps"] == 4
    assert slow["per_step_ms"] > 10 * slow["peer_median_ms"] and slow["slow_share"] == 1.0
    collectives = phases.filter(pl.col("phase") == COLLECTIVES).sort("per_step_ms")
    assert collectives["rank"][0] == 2  # it waits least: the others wait for it
    assert collectives["excess_share"][0] < -0.3 and collectives["excess_share"][1:].abs().max() < 0.1
    findings = slow_phase_findings(phases)
    assert findings["rank"].to_list() == [2]
    row = findings.row(0, named=True)
    assert row["category"] == "STRAGGLER" and row["line"] is None
    assert "DataLoader" in row["text"] and "the others waited for it" in row["text"]


def test_ranks_that_agree_show_no_slow_phase():
    phases = phase_times(_loads(CPU_TRACES, {0, 1, 3}))
    assert phases["rank"].n_unique() == 3
    assert slow_phase_findings(phases).is_empty()
    assert phases.filter(pl.col("kind") == "annotation")["excess_share"].abs().max() < 0.1


def test_a_lone_trace_has_times_but_nothing_to_compare():
    phases = phase_times(_loads(CPU_TRACES, {1}))
    assert phases.height > 0 and phases["per_step_ms"].min() >= 0
    assert phases["excess_share"].null_count() == phases.height
    assert slow_phase_findings(phases).is_empty()


def test_gpu_traces_count_nccl_kernels_as_collectives():
    phases = phase_times(_loads(GPU_TRACES))
    collectives = phases.filter(pl.col("phase") == COLLECTIVES)
    assert collectives.height == 4
    # straggler_4rank: rank 2 reaches every allreduce 4000 us late, the others wait in theirs.
    assert collectives.sort("per_step_ms")["rank"][0] == 2


def test_leading_phases_put_collectives_and_the_slow_phase_first():
    names = leading_phases(phase_times(_loads(CPU_TRACES)), 3)
    assert names[0] == COLLECTIVES and ("DataLoader" in names[1] or names[1] == "data")
    assert len(names) == 3
