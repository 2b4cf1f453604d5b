"""PNG figures of the trace passes: per-rank GPU breakdown, rank x collective skew, rank x phase time.

Rendering only: frames in (from `trace_breakdown.breakdown_frame`,
`collective_alignment.align_collectives` and `trace_phases.phase_times`), file paths out.
Agg backend, no display.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.passes.trace_phases import leading_phases
from forensics.report.plotting import pyplot, save

MAX_PHASE_RANKS = 32
MAX_PHASES = 12
MAX_LABELLED_CELLS = 200
_PARTS = [("compute_time_us", "compute", "#4c72b0"), ("non_compute_time_us", "non-compute", "#dd8452"), ("idle_time_us", "idle", "#c7c7c7")]


def _rank_label(rank: int | None, index: int) -> str:
    return f"rank {rank}" if rank is not None else f"trace {index}"


def breakdown_bars(breakdown: pl.DataFrame, out_dir: Path) -> Path:
    """Stacked bars, one per rank: compute / non-compute / idle share of GPU kernel time."""
    rows = breakdown.sort("rank", nulls_last=True).to_dicts()
    labels = [_rank_label(r["rank"], i) for i, r in enumerate(rows)]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(rows) + 2), 3.5))
    bottom = [0.0] * len(rows)
    for column, name, color in _PARTS:
        share = [100 * r[column] / r["kernel_time_us"] if r["kernel_time_us"] else 0.0 for r in rows]
        ax.bar(labels, share, bottom=bottom, label=name, color=color)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_ylabel("% of GPU kernel time")
    ax.set_ylim(0, 100)
    ax.set_title("GPU time breakdown per rank")
    ax.legend(loc="upper right", fontsize="small")
    ax.tick_params(axis="x", labelrotation=45 if len(rows) > 8 else 0)
    return save(fig, out_dir, "trace_breakdown.png")


def skew_heatmap(arrivals: pl.DataFrame, out_dir: Path) -> Path:
    """Heatmap of how late each rank reached each collective (us after the first rank); `arrivals` is not empty."""
    grid = arrivals.pivot(on="collective", index="rank", values="arrival_lag_us", aggregate_function="max").sort("rank")
    columns = sorted((c for c in grid.columns if c != "rank"), key=int)
    matrix = grid.select(columns).to_numpy().astype(float)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.35 * len(columns) + 2.5), max(2.5, 0.35 * grid.height + 1.5)))
    image = ax.imshow(matrix, aspect="auto", cmap="magma_r", interpolation="nearest")
    ax.set_yticks(range(grid.height), [f"rank {r}" for r in grid["rank"]])
    step = max(1, len(columns) // 20)
    ax.set_xticks(range(0, len(columns), step), columns[::step])
    ax.set_xlabel("collective (in start order)")
    ax.set_title("Arrival lag at each collective")
    fig.colorbar(image, ax=ax, label="us after first rank")
    return save(fig, out_dir, "collective_skew.png")


def phase_heatmap(phases: pl.DataFrame, out_dir: Path) -> Path:
    """Rank x phase grid of time per profiled step, coloured by the share of a step the rank adds over the median rank.

    Red cells cost the job time, blue ones are shorter than the median rank's (in
    collectives: waiting for someone else). At most MAX_PHASE_RANKS ranks (the ones that
    differ most) and MAX_PHASES phases are drawn; the title says when ranks were left out.
    """
    names = leading_phases(phases, MAX_PHASES)
    shown = phases.filter(pl.col("phase").is_in(names))
    ranks = (
        shown.group_by("rank")
        .agg(pl.col("excess_share").abs().max().alias("spread"))
        .sort("spread", "rank", descending=[True, False], nulls_last=True)
        .head(MAX_PHASE_RANKS)["rank"]
        .to_list()
    )
    grid = shown.filter(pl.col("rank").is_in(ranks)).sort("rank")
    ms = grid.pivot(on="phase", index="rank", values="per_step_ms").select("rank", *names)
    excess = grid.pivot(on="phase", index="rank", values="excess_share").select("rank", *names)
    colours = excess.drop("rank").to_numpy().astype(float)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(names) + 2.5), max(2.5, 0.35 * ms.height + 1.8)))
    image = ax.imshow(colours, aspect="auto", cmap="RdBu_r", vmin=-0.5, vmax=0.5, interpolation="nearest")
    if ms.height * len(names) <= MAX_LABELLED_CELLS:
        for y, row in enumerate(ms.drop("rank").rows()):
            for x, value in enumerate(row):
                dark = abs(colours[y, x]) > 0.3
                ax.text(
                    x,
                    y,
                    "" if value is None else f"{value:.1f}",
                    ha="center",
                    va="center",
                    fontsize="x-small",
                    color="white" if dark else "black",
                )
    ax.set_yticks(range(ms.height), [f"rank {r}" for r in ms["rank"]])
    ax.set_xticks(range(len(names)), [n if len(n) <= 24 else n[:23] + "…" for n in names], rotation=35, ha="right")
    left_out = phases["rank"].n_unique() - ms.height
    more = f"; {left_out} ranks near the median not shown" if left_out else ""
    ax.set_title(f"Time per profiled step (ms){more}")
    fig.colorbar(image, ax=ax, label="share of a step over the median rank")
    return save(fig, out_dir, "trace_phases.png")
