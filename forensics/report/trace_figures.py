"""PNG figures of the trace passes: per-rank time breakdown and rank x collective skew.

Rendering only: frames in (from `trace_breakdown.breakdown_frame` and
`collective_alignment.align_collectives`), file paths out. Agg backend, no display.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.report.plotting import pyplot

_PARTS = [("compute_time_us", "compute", "#4c72b0"), ("non_compute_time_us", "non-compute", "#dd8452"), ("idle_time_us", "idle", "#c7c7c7")]


def _rank_label(rank: int | None, index: int) -> str:
    return f"rank {rank}" if rank is not None else f"trace {index}"


def breakdown_bars(breakdown: pl.DataFrame, out_dir: Path) -> Path:
    """Stacked bars, one per rank: compute / non-compute / idle share of GPU kernel time."""
    out_dir.mkdir(parents=True, exist_ok=True)
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
    fig.tight_layout()
    path = out_dir / "trace_breakdown.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def skew_heatmap(arrivals: pl.DataFrame, out_dir: Path) -> Path | None:
    """Heatmap of how late each rank reached each collective (us after the first rank)."""
    if arrivals.is_empty():
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
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
    fig.tight_layout()
    path = out_dir / "collective_skew.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
