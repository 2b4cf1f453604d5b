"""ranks.png: one bar per rank from its first to its last timestamped line, its first error marked,
the end of a rank that died (crashed, killed, exited) marked too, and the title naming the rank
whose lines stopped first when it stopped well before the others.

Rendering only: the RANKS table and LINES (for the time of each rank's first error line, or
the last time logged before it) in,
a path out. Drawn for a multi-rank incident with at least MIN_RANKS timed ranks whose lines
span at least MIN_SPAN_S (bars of no length are a blank chart); the bar's
colour is the rank's status, so the rank that stopped first, or crashed while the others
waited, stands out. Bounded: one pixel row per rank past MAX_LABELS labelled ranks.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.report.plotting import pyplot, save, time_axis

MIN_RANKS = 2
MIN_SPAN_S = 1.0
MAX_LABELS = 32
MAX_HEIGHT_IN = 12
DIED = ("crashed", "killed", "exited")
# A rank stopped first when its last line came at least this share of the job's span before the next one's.
FIRST_STOP_SHARE = 0.05
STATUS_COLOURS = {
    "crashed": "tab:red", "killed": "tab:purple", "stalled": "tab:orange", "timed_out": "tab:olive",
    "exited": "tab:pink", "silent": "tab:gray", "finished": "tab:green", "running": "tab:blue",
}  # fmt: skip


def rank_timeline(ranks: pl.DataFrame, lines: pl.DataFrame, out_dir: Path) -> Path | None:
    """The figure, or None when fewer than MIN_RANKS ranks have a first and last time."""
    timed = ranks.filter(pl.col("first_time").is_not_null() & pl.col("last_time").is_not_null()).sort("rank")
    if timed.height < MIN_RANKS or (timed["last_time"].max() - timed["first_time"].min()).total_seconds() < MIN_SPAN_S:
        return None
    # An untimed error line (a traceback's) takes the last time its file logged before it.
    error_times = lines.sort("file", "line").select(
        first_error_file="file", first_error_line="line", error_time=pl.col("time").forward_fill().over("file")
    )
    timed = timed.join(error_times, on=["first_error_file", "first_error_line"], how="left")
    plt = pyplot()
    height = min(MAX_HEIGHT_IN, 1.5 + 0.25 * min(timed.height, MAX_LABELS) + timed.height / 100)
    fig, ax = plt.subplots(figsize=(10, height))
    rows = list(range(timed.height))
    starts, ends = timed["first_time"].to_list(), timed["last_time"].to_list()
    colours = [STATUS_COLOURS.get(status, "black") for status in timed["status"].to_list()]
    ax.hlines(rows, starts, ends, colors=colours, linewidth=max(1.0, min(8.0, 200 / timed.height)))
    ax.scatter(starts, rows, marker="|", c=colours, zorder=2)  # a rank whose lines share one time is a tick, not nothing
    errors = timed.with_row_index("row").filter(pl.col("error_time").is_not_null())
    if not errors.is_empty():
        ax.scatter(errors["error_time"].to_list(), errors["row"].to_list(), marker="x", color="black", zorder=3, label="first error")
    died = timed.with_row_index("row").filter(pl.col("status").is_in(DIED))
    if not died.is_empty():
        ax.scatter(
            died["last_time"].to_list(), died["row"].to_list(), marker="s", facecolors="none", edgecolors="black", zorder=3, label="died"
        )
    if not errors.is_empty() or not died.is_empty():
        ax.legend(loc="lower right", fontsize="small")
    step = max(1, timed.height // MAX_LABELS)
    ax.set_yticks(rows[::step], [f"rank {r}" for r in timed["rank"].to_list()[::step]])
    ax.invert_yaxis()
    ax.set_xlabel("time (UTC)")
    time_axis(ax)
    statuses = ", ".join(
        f"{status} ({colour.removeprefix('tab:')})" for status, colour in STATUS_COLOURS.items() if status in set(timed["status"].to_list())
    )
    ax.set_title(
        f"{timed.height} ranks{first_to_stop(timed)}: first to last timestamped line; colour is the status: {statuses}", fontsize="small"
    )
    return save(fig, out_dir, "ranks.png")


def first_to_stop(timed: pl.DataFrame) -> str:
    """`, rank 5 stopped first (14:02:11)` when one rank's last line came FIRST_STOP_SHARE of the
    job's span or more before every other rank's; empty otherwise."""
    ends = timed.sort("last_time").select("rank", "last_time")
    if ends.height < 2:
        return ""
    span = (timed["last_time"].max() - timed["first_time"].min()).total_seconds()
    first, second = ends.row(0, named=True), ends.row(1, named=True)
    if span <= 0 or (second["last_time"] - first["last_time"]).total_seconds() < FIRST_STOP_SHARE * span:
        return ""
    return f", rank {first['rank']} stopped first ({first['last_time']:%H:%M:%S})"
