"""ranks.png: the per-rank timeline of a multi-rank incident (report.rank_timeline)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from PIL import Image

from forensics.flow import analyze
from forensics.report.rank_timeline import MAX_HEIGHT_IN, rank_timeline
from forensics.schema import LINES, RANKS, conform

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _ranks(count: int) -> pl.DataFrame:
    return conform(
        pl.DataFrame(
            {
                "rank": list(range(count)),
                "first_time": [T0] * count,
                "last_time": [T0 + timedelta(seconds=600 - (r == 5) * 300) for r in range(count)],
                "status": ["crashed" if r == 5 else "timed_out" for r in range(count)],
                "first_error_file": [f"rank_{r}.log" for r in range(count)],
                "first_error_line": [2] * count,
            }
        ),
        RANKS,
    )


def _size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        return image.size


def test_a_multi_rank_incident_gets_a_rank_timeline(tmp_path):
    analysis = analyze(INCIDENTS / "cuda_oom_8rank_cascade")
    path = rank_timeline(analysis.incident.ranks, analysis.incident.lines, tmp_path)
    assert path == tmp_path / "ranks.png" and _size(path)[0] == 1000


def test_one_rank_or_no_timestamps_draws_nothing(tmp_path):
    lines = conform(pl.DataFrame({"file": "rank_0.log", "line": [1]}), LINES)
    assert rank_timeline(_ranks(1), lines, tmp_path) is None
    untimed = _ranks(4).with_columns(first_time=None)
    assert rank_timeline(untimed, lines, tmp_path) is None and not (tmp_path / "ranks.png").exists()


def test_a_thousand_ranks_stay_one_screen_tall(tmp_path):
    lines = conform(pl.DataFrame({"file": [f"rank_{r}.log" for r in range(1024)], "line": 2, "time": T0}), LINES)
    path = rank_timeline(_ranks(1024), lines, tmp_path)
    assert _size(path)[1] <= MAX_HEIGHT_IN * 100


def test_ranks_whose_lines_all_share_one_second_draw_no_blank_chart(tmp_path):
    lines = conform(pl.DataFrame({"file": "rank_0.log", "line": [1]}), LINES)
    instant = _ranks(4).with_columns(last_time=pl.col("first_time"))
    assert rank_timeline(instant, lines, tmp_path) is None and not (tmp_path / "ranks.png").exists()


def test_the_title_names_the_rank_that_stopped_well_before_the_others():
    from forensics.report.rank_timeline import first_to_stop

    ranks = _ranks(8)  # rank 5's lines stop 300 s into a 600 s job
    assert first_to_stop(ranks) == ", rank 5 stopped first (00:05:00)"
    together = ranks.with_columns(last_time=pl.lit(T0 + timedelta(seconds=600)))
    assert first_to_stop(together) == ""


def test_a_time_axis_reads_as_clock_times_not_minutes_and_microseconds():
    from forensics.report.plotting import pyplot, time_axis

    plt = pyplot()
    fig, ax = plt.subplots()
    start = datetime(2025, 7, 9, 17, 5, 38, tzinfo=UTC)
    ax.plot([start + timedelta(seconds=s) for s in range(5)], range(5))
    time_axis(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()] + [ax.xaxis.get_offset_text().get_text()]
    plt.close(fig)
    assert not any("000000" in label for label in labels), labels
    assert "2025-Jul-09 17:05" in labels  # the date and hour the ticks share, said once
