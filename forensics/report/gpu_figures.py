"""Per-host GPU figures: temperature, power and SM utilization over time, Xids marked.

Renders only what ingest produced (GPU_SAMPLES, GPU_EVENTS); computes nothing new.
One PNG per host with three stacked panels and one line per GPU; samples without
times (dmon without -o T) are plotted against their order instead. A host with fewer
than MIN_SAMPLES samples per GPU (a one-off `nvidia-smi -q` snapshot) gets no chart: the
GPU section's table says all it holds. Xids are marked only inside the sampled window.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.report.plotting import pyplot, time_axis

MIN_SAMPLES = 3
PANELS = (("temperature_c", "temperature (C)"), ("power_draw_w", "power (W)"), ("sm_util_pct", "SM util (%)"))


def render_gpu_figures(samples: pl.DataFrame, events: pl.DataFrame | None, out_dir: Path) -> list[Path]:
    """Write gpu_<host>.png for every host with samples; returns the paths written."""
    if samples.is_empty():
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    per_gpu = samples.group_by("host", "gpu", "pci_bus_id").len()
    charted = per_gpu.filter(pl.col("len") >= MIN_SAMPLES)["host"].fill_null("unknown-host").unique().sort().to_list()
    for host in charted:
        mine = samples.filter(pl.col("host").fill_null("unknown-host") == host)
        timed = mine["time"].is_not_null().all()
        mine = mine.sort("time" if timed else "line")
        plt = pyplot()
        fig, axes = plt.subplots(len(PANELS), 1, figsize=(10, 7), sharex=True)
        for gpu, rows in mine.group_by("gpu", "pci_bus_id", maintain_order=True):
            label = f"GPU {gpu[0]}" if gpu[0] is not None else str(gpu[1])
            x = rows["time"].to_list() if timed else list(range(rows.height))
            for ax, (column, _) in zip(axes, PANELS, strict=True):
                ax.plot(x, rows[column].to_list(), label=label, linewidth=1)
        for ax, (_, title) in zip(axes, PANELS, strict=True):
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
        if timed and events is not None and not events.is_empty():
            window = pl.col("time").is_between(mine["time"].min(), mine["time"].max())
            xids = events.filter((pl.col("host").fill_null(host) == host) & (pl.col("kind") == "xid") & window)
            for row in xids.iter_rows(named=True):
                for ax in axes:
                    ax.axvline(row["time"], color="red", linestyle="--", linewidth=1)
                axes[0].annotate(
                    f"Xid {row['xid']}", (row["time"], 1), xycoords=("data", "axes fraction"), color="red", fontsize=8, va="top"
                )
        axes[0].legend(loc="upper left", fontsize=7, ncol=4)
        axes[0].set_title("GPU health (the dump names no host)" if host == "unknown-host" else f"{host}: GPU health")
        axes[-1].set_xlabel("time (UTC)" if timed else "sample")
        if timed:
            time_axis(axes[-1])
        fig.tight_layout()
        path = out_dir / f"gpu_{_safe(host)}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
