"""The "Profiler traces" section: HTA's breakdowns per rank, time per annotated phase, and who made the others wait."""

from __future__ import annotations

import polars as pl

from forensics.incident import Incident
from forensics.passes.trace_phases import COLLECTIVES, leading_phases
from forensics.report.markup import cell, table

MAX_TRACE_ROWS = 32
MAX_PHASE_COLUMNS = 8


def _number(value: float | None, divisor: float = 1, spec: str = ".2f") -> str:
    return "—" if value is None else format(value / divisor, spec)


def _gpu_breakdown(breakdown: pl.DataFrame) -> list[str]:
    if breakdown["kernel_time_us"].sum() == 0:
        return ["The traces hold no GPU activity (CPU-only profiling), so there is no GPU time breakdown.", ""]
    rows = [
        (
            cell(r["rank"]),
            cell(r["file"]),
            _number(r["kernel_time_us"], 1000, ".1f"),
            _number(r["idle_time_pctg"]),
            _number(r["compute_time_pctg"]),
            _number(r["non_compute_time_pctg"]),
            _number(r["comp_comm_overlap_pctg"]),
        )
        for r in breakdown.sort("rank", nulls_last=True).head(MAX_TRACE_ROWS).iter_rows(named=True)
    ]
    return [
        "GPU time per rank, with Holistic Trace Analysis' definitions (last ProfilerStep dropped):",
        "",
        table(["rank", "trace", "kernel time (ms)", "idle %", "compute %", "non-compute %", "comm/comp overlap %"], rows),
        "",
    ]


def _phase_table(phases: pl.DataFrame) -> list[str]:
    """Rank x phase time per profiled step; the ranks that differ most first when there are too many."""
    names = leading_phases(phases, MAX_PHASE_COLUMNS)
    grid = phases.filter(pl.col("phase").is_in(names)).pivot(on="phase", index="rank", values="per_step_ms").select("rank", *names)
    spread = phases.group_by("rank").agg(pl.col("excess_share").abs().max().alias("spread"))
    grid = grid.join(spread, on="rank").sort("spread", "rank", descending=[True, False], nulls_last=True).head(MAX_TRACE_ROWS).sort("rank")
    rows = [(cell(r[0]), *(_number(v, 1, ".1f") for v in r[1:-1])) for r in grid.rows()]
    left_out = phases["rank"].n_unique() - grid.height
    out = [
        "Time per profiled step in each annotated phase and in collectives (ms)"
        + (f"; the {grid.height} ranks that differ most of {grid.height + left_out}" if left_out else "")
        + ":",
        "",
        table(["rank", *(cell(n, 40) for n in names)], rows),
        "",
    ]
    if COLLECTIVES in names:
        out += [
            "Collective time includes waiting for the last rank to arrive, so it reads the other way round: "
            "the rank the others wait for shows the least.",
            "",
        ]
    return out


def render_traces_section(incident: Incident) -> str | None:
    breakdown = incident.tables.get("trace_breakdown")
    if breakdown is None or breakdown.is_empty():
        return None
    out = ["## Profiler traces", "", *_gpu_breakdown(breakdown)]
    phases = incident.tables.get("trace_phases")
    if phases is not None and not phases.is_empty():
        out += _phase_table(phases)
    kernel_types = incident.tables.get("trace_kernel_types")
    if kernel_types is not None and not kernel_types.is_empty():
        rows = [
            (cell(r["kernel_type"]), _number(r["sum_us"], 1000, ".1f"), _number(r["percentage"], 1, ".1f"))
            for r in kernel_types.sort("sum_us", descending=True).iter_rows(named=True)
        ]
        out += ["GPU time by what ran at once, all ranks:", "", table(["kernel types", "time (ms)", "%"], rows), ""]
    idle = incident.tables.get("trace_idle")
    if idle is not None and not idle.is_empty():
        per_rank = (
            idle.group_by("rank", "idle_category")
            .agg(pl.col("idle_time_us").sum())
            .pivot("idle_category", index="rank", values="idle_time_us")
            .sort("rank", nulls_last=True)
        )
        kinds = [k for k in ("host_wait", "kernel_wait", "other") if k in per_rank.columns]
        rows = [
            (cell(r["rank"]), *(_number(r[k], 1000, ".1f") for k in kinds)) for r in per_rank.head(MAX_TRACE_ROWS).iter_rows(named=True)
        ]
        out += ["Idle GPU time by cause (ms; host_wait = the CPU launched late):", "", table(["rank", *kinds], rows), ""]
    top = incident.tables.get("trace_top_kernels")
    if top is not None and not top.is_empty():
        rows = [
            (cell(r["name"], 90), cell(r["kernel_type"]), str(r["count"]), _number(r["sum_us"], 1000, ".1f"), _number(r["pctg"]))
            for r in top.iter_rows(named=True)
        ]
        out += ["Top kernels by GPU time:", "", table(["kernel", "type", "count", "time (ms)", "% of kernel time"], rows), ""]
    ranks = incident.tables.get("trace_ranks")
    if ranks is not None and not ranks.is_empty() and "wait_caused_us" in ranks.columns:
        top = ranks.sort("wait_caused_us", descending=True).head(5)
        rows = [
            (cell(r["rank"]), _number(r["wait_caused_us"], 1000, ".1f"), cell(r["times_late"]), _number(r["slowdown"]))
            for r in top.iter_rows(named=True)
        ]
        out += [
            "Ranks that made the others wait in collectives (collectives matched across ranks; the shortest one arrived last):",
            "",
            table(["rank", "waiting caused (ms)", "times late", "slowdown"], rows),
            "",
        ]
    return "\n".join(out)
