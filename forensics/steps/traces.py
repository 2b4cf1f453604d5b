"""Trace step: torch.profiler traces -> HTA-identical breakdown, cross-rank collective alignment, phase times."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from forensics.incident import FileStatus, Incident
from forensics.ingest.traces import file_statuses, load_traces
from forensics.passes.collective_alignment import align_collectives
from forensics.passes.trace_breakdown import breakdown_frame, idle_time_breakdown, kernel_type_breakdown, top_kernels
from forensics.passes.trace_phases import phase_times, slow_phase_findings
from forensics.report.trace_figures import breakdown_bars, phase_heatmap, skew_heatmap
from forensics.schema import FINDINGS, InputKind, InputStatus, conform, empty
from forensics.steps.common import Progress


def ingest_traces(incident: Incident, progress: Progress) -> None:
    paths = incident.paths_of_kind(InputKind.TRACE)
    if not paths:
        return
    progress(f"reading {len(paths)} profiler traces")
    loads = load_traces([incident.root / p for p in paths])
    statuses = file_statuses(loads, incident.root)
    incident.apply_statuses(statuses)
    incident.add_findings(rank_claim_conflicts(statuses))
    loads = [t for t in loads if t.status != InputStatus.SKIPPED]
    if not loads:
        return
    prefix = incident.root.as_posix().rstrip("/") + "/"
    breakdown = breakdown_frame(loads).with_columns(pl.col("file").str.strip_prefix(prefix))
    incident.tables["trace_breakdown"] = breakdown
    incident.tables["trace_kernel_types"] = kernel_type_breakdown(loads)
    incident.tables["trace_top_kernels"] = top_kernels(loads)
    incident.tables["trace_idle"] = idle_time_breakdown(loads)
    alignment = align_collectives(loads)
    incident.tables["trace_collectives"] = alignment.collectives
    incident.tables["trace_arrivals"] = alignment.arrivals
    incident.tables["trace_ranks"] = alignment.ranks
    incident.tables["trace_stragglers"] = pl.DataFrame(alignment.stragglers) if alignment.stragglers else pl.DataFrame()
    incident.add_findings(alignment.findings.with_columns(pl.col("file").str.strip_prefix(prefix)))
    phases = phase_times(loads).with_columns(pl.col("file").str.strip_prefix(prefix))
    incident.tables["trace_phases"] = phases
    incident.add_findings(slow_phase_findings(phases))


def draw_trace_figures(incident: Incident, directory: Path) -> list[Path]:
    """The figures the trace tables have data for: GPU breakdown, collective skew, phase times."""
    paths = []
    breakdown = incident.tables.get("trace_breakdown")
    if breakdown is not None and breakdown["kernel_time_us"].sum() > 0:
        paths.append(breakdown_bars(breakdown, directory))
    arrivals = incident.tables.get("trace_arrivals")
    if arrivals is not None and not arrivals.is_empty():
        paths.append(skew_heatmap(arrivals, directory))
    phases = incident.tables.get("trace_phases")
    if phases is not None and phases["rank"].n_unique() >= 2:
        paths.append(phase_heatmap(phases, directory))
    return paths


def rank_claim_conflicts(statuses: list[FileStatus]) -> pl.DataFrame:
    """One finding per trace whose rank another trace claims too (both are kept, neither wins)."""
    rows = [
        {"file": s.path, "text": s.problem, "captures": json.dumps({"problem": s.problem})}
        for s in statuses
        if s.problem and "also claimed by" in s.problem
    ]
    if not rows:
        return empty(FINDINGS)
    return conform(
        pl.DataFrame(rows).with_columns(
            pattern=pl.lit("INPUT002"),
            title=pl.lit("Two profiler traces claim the same rank"),
            category=pl.lit("UNKNOWN"),
            severity=pl.lit("warning"),
            role=pl.lit("event"),
        ),
        FINDINGS,
    )
