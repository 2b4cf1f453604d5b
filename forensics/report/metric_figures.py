"""PNG figures of the training dynamics: metrics over steps, step time per rank x step, and the period.

Rendering only: METRICS, the `numerics` anomalies, the `step_times` table, the
`periodicity` row and its spike periodogram in, paths out. A panel is drawn only for a measure with at least MIN_POINTS stepped values that
vary, and a figure only when it has a panel: no empty or flat charts. Size is bounded
whatever the input: at most MAX_STREAMS lines per panel (the lowest ranks; the title
says how many were left out) and MAX_COLUMNS heatmap columns (steps binned).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.passes.periodicity import job_step_times, spikes
from forensics.report.plotting import pyplot, save

MIN_POINTS = 2
MAX_STREAMS = 16  # lines per panel: beyond this a legend or a line means nothing
MAX_COLUMNS = 1000  # heatmap steps; longer runs are binned so the image stays small
MAX_HEIGHT_IN = 12  # a heatmap of 1,024 ranks stays one screen tall: a row is a line of pixels
# (METRICS column, axis label, log scale)
PANELS = (
    ("loss", "loss", False),
    ("grad_norm", "grad norm", True),
    ("loss_scale", "loss scale", True),
    ("lr", "learning rate", False),
    ("step_time_s", "step time (s)", False),
    ("tokens_per_s", "tokens/s", False),
    ("samples_per_s", "samples/s", False),
    ("mfu_pct", "MFU (%)", False),
)
ANOMALY_STYLE = {
    "non_finite": ("x", "red"),
    "loss_spike": ("^", "orange"),
    "divergence": ("v", "purple"),
    "grad_explosion": ("*", "red"),
    "loss_scale_collapse": ("o", "red"),
    "plateau": ("s", "grey"),
    "replica_divergence": ("D", "brown"),
}


def _drawable(values: pl.Series) -> bool:
    """At least MIN_POINTS finite values that are not all the same (a flat line says nothing)."""
    finite = values.filter(values.is_finite())
    return finite.len() >= MIN_POINTS and finite.n_unique() > 1


def _stream_label(file: str, rank: int | None) -> str:
    return f"rank {rank}" if rank is not None else Path(file).name


def training_curves(metrics: pl.DataFrame, anomalies: pl.DataFrame | None, out_dir: Path) -> Path | None:
    """training.png: one panel per logged measure over steps, one line per stream (file,
    rank), anomalies marked where they happened; None when nothing was logged per step."""
    stepped = metrics.filter(pl.col("step").is_not_null())
    streams = stepped.select("file", "rank").unique().sort("rank", "file", nulls_last=True)
    shown = streams.head(MAX_STREAMS)
    stepped = stepped.join(shown, on=["file", "rank"], how="semi", nulls_equal=True)
    panels = [(c, label, log) for c, label, log in PANELS if _drawable(stepped[c])]
    if not panels:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.2 * len(panels) + 0.6), sharex=True, squeeze=False)
    for ax, (column, label, log) in zip(axes[:, 0], panels, strict=True):
        rows = stepped.filter(pl.col(column).is_finite()).sort("step")
        for (file, rank), stream in rows.group_by("file", "rank", maintain_order=True):
            ax.plot(stream["step"].to_list(), stream[column].to_list(), linewidth=1, label=_stream_label(file, rank))
        if log and rows[column].min() > 0:
            ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if anomalies is not None and not anomalies.is_empty():
        _mark(axes[:, 0], [c for c, _, _ in panels], anomalies)
    _, labels = axes[0, 0].get_legend_handles_labels()
    if 1 < len(labels) <= 16:
        axes[0, 0].legend(loc="upper right", fontsize=7, ncol=4)
    left_out = streams.height - shown.height
    axes[0, 0].set_title("Training metrics over steps" + (f" ({shown.height} of {streams.height} logs shown)" if left_out else ""))
    axes[-1, 0].set_xlabel("step")
    return save(fig, out_dir, "training.png")


def _mark(axes, columns: list[str], anomalies: pl.DataFrame) -> None:
    """Each anomaly as a marker on the loss panel (grad-norm and loss-scale kinds on theirs),
    at its step; non-finite values sit on the panel's top edge, where a NaN cannot be drawn."""
    home = {"grad_explosion": "grad_norm", "loss_scale_collapse": "loss_scale"}
    for (kind,), rows in anomalies.filter(pl.col("step").is_not_null()).group_by("kind", maintain_order=True):
        column = home.get(kind, "loss")
        if column not in columns:
            continue
        ax = axes[columns.index(column)]
        marker, color = ANOMALY_STYLE.get(kind, ("o", "black"))
        steps = rows["step"].to_list()
        if kind == "non_finite":
            ax.scatter(steps, [1.0] * len(steps), transform=ax.get_xaxis_transform(), marker=marker, color=color, label="NaN/Inf", zorder=3)
        else:
            ax.scatter(steps, rows["value"].to_list(), marker=marker, color=color, label=kind.replace("_", " "), zorder=3)


def step_time_heatmap(times: pl.DataFrame, out_dir: Path) -> Path | None:
    """step_times.png: step time of every rank (rows) at every step (columns), each step
    divided by its median over ranks; None with fewer than two ranks or MIN_POINTS steps."""
    ranked = times.filter(pl.col("rank").is_not_null() & pl.col("step_time_s").is_finite())
    if ranked["rank"].n_unique() < 2 or ranked["step"].n_unique() < MIN_POINTS:
        return None
    relative = ranked.with_columns(ratio=pl.col("step_time_s") / pl.col("step_time_s").median().over("step"))
    first, last = ranked["step"].min(), ranked["step"].max()
    width = max(1, -(-(last - first + 1) // MAX_COLUMNS))  # steps per column, rounded up
    binned = relative.with_columns(step=first + (pl.col("step") - first) // width * width)
    grid = binned.pivot(on="step", index="rank", values="ratio", aggregate_function="mean", sort_columns=True).sort("rank")
    ranks = grid["rank"].to_list()
    steps = [int(c) for c in grid.columns[1:]]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, min(MAX_HEIGHT_IN, max(2.5, 0.25 * len(ranks) + 1.5))))
    image = ax.imshow(grid.drop("rank").to_numpy(), aspect="auto", interpolation="nearest", cmap="magma_r", vmin=0.5, vmax=2.0)
    rows = list(range(0, len(ranks), max(1, -(-len(ranks) // 32))))  # at most 32 labelled rows
    ax.set_yticks(rows, [str(ranks[i]) for i in rows])
    ticks = list(range(0, len(steps), max(1, len(steps) // 10)))
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    ax.set_title("Step time relative to the median rank at each step")
    fig.colorbar(image, ax=ax, label="x median")
    return save(fig, out_dir, "step_times.png")


def periodicity_figure(times: pl.DataFrame, found: dict, periodogram: pl.DataFrame, out_dir: Path) -> Path:
    """periodicity.png: the job's step time with its spikes and the period's steps marked (top), and
    the spike periodogram, spikes in each period's best phase coloured by its strength (bottom)."""
    series = job_step_times(times)
    peaks = spikes(series)
    period, phase = found["period_steps"], found["phase"]
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.5))
    top.plot(series["step"].to_list(), series["step_time_s"].to_list(), color="#4c72b0", linewidth=0.8)
    top.scatter(peaks["step"].to_list(), peaks["step_time_s"].to_list(), color="red", s=12, zorder=3, label="spike")
    first, last = series["step"].min(), series["step"].max()
    start = first + (phase - first) % period
    for step in range(start, last + 1, period)[:MAX_COLUMNS]:
        top.axvline(step, color="grey", linestyle=":", linewidth=0.7)
    cause = found.get("explained_by") or ""
    explained = f"; coincides with: {cause if len(cause) <= 48 else cause[:47] + '…'}" if cause else ""
    top.set_title(f"Step time (median over ranks): a spike every {period} steps{explained}")
    top.set_xlabel("step")
    top.set_ylabel("step time (s)")
    top.legend(loc="upper right", fontsize="small")
    colours = pyplot().get_cmap("viridis")([min(1.0, s) for s in periodogram["strength"].to_list()])
    bottom.bar(periodogram["period"].to_list(), periodogram["spikes"].to_list(), color=colours, width=0.9)
    bottom.axvline(period, color="red", linewidth=1.0)
    bottom.set_xlabel("period (steps)")
    bottom.set_ylabel("spikes in best phase")
    bottom.set_title("Spike periodogram (colour: share of the phase's steps that spiked)")
    return save(fig, out_dir, "periodicity.png")
