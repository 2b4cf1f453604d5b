"""Training-dynamics figures: drawn when the metrics hold something to show, never empty."""

from __future__ import annotations

import polars as pl

from forensics.ingest.metrics import extract_metrics
from forensics.passes.numerics import numerics_table
from forensics.passes.periodicity import find_periodicity, spike_periodogram, step_times
from forensics.report.metric_figures import periodicity_figure, step_time_heatmap, training_curves
from tests.conftest import lines_frame


def _ranks_logging(ranks: int, steps: int) -> pl.DataFrame:
    frames = [
        lines_frame(
            [
                f"step {s} | loss {3.0 / s + 0.01 * r:.4f} | data_time 0.010s | step_time {1.0 + 0.5 * (r == 2):.3f}s"
                for s in range(1, steps + 1)
            ],
            file=f"rank_{r}.log",
            rank=r,
        )
        for r in range(ranks)
    ]
    return extract_metrics(pl.concat(frames))


def test_loss_and_step_time_panels_and_a_heatmap_are_drawn(tmp_path):
    metrics = _ranks_logging(ranks=4, steps=12)
    curves = training_curves(metrics, numerics_table(metrics), tmp_path)
    heatmap = step_time_heatmap(step_times(metrics), tmp_path)
    assert curves == tmp_path / "training.png" and heatmap == tmp_path / "step_times.png"
    assert curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and heatmap.stat().st_size > 1000


def test_no_figure_without_stepped_metrics_or_with_one_rank(tmp_path):
    no_steps = extract_metrics(lines_frame(["{'train_runtime': 326.3445, 'train_samples_per_second': 4.903}"]))
    assert training_curves(no_steps, None, tmp_path) is None
    one_rank = _ranks_logging(ranks=1, steps=12)
    assert step_time_heatmap(step_times(one_rank), tmp_path) is None
    assert not list(tmp_path.iterdir())


def test_a_flat_measure_gets_no_panel(tmp_path):
    flat = extract_metrics(lines_frame([f" iteration {i}/ 100 | lm loss: 2.0 | loss scale: 1.0 |" for i in range(1, 20)]))
    assert training_curves(flat, None, tmp_path) is None


def test_figures_stay_small_for_many_ranks_and_steps(tmp_path):
    """256 ranks x 3000 steps: the heatmap is binned to at most 1000 columns, the curves draw 16 of 256 logs."""
    import numpy as np

    ranks, steps = 256, 3000
    grid = np.tile(np.arange(1, steps + 1), ranks)
    rank = np.repeat(np.arange(ranks), steps)
    times = pl.DataFrame({"rank": rank.astype("int32"), "step": grid, "step_time_s": 1.0 + (rank == 7) * 0.5})
    heatmap = step_time_heatmap(times, tmp_path)
    assert heatmap is not None and heatmap.stat().st_size < 2_000_000
    metrics = times.with_columns(file=pl.format("rank_{}.log", "rank"), loss=3.0 / pl.col("step"))
    from forensics.schema import METRICS, conform

    curves = training_curves(conform(metrics, METRICS), None, tmp_path)
    assert curves is not None and curves.stat().st_size < 2_000_000


def test_periodicity_figure_from_a_periodic_stall(tmp_path):
    lines = [f"[Rank 0/2] Step {s}, Loss: 2.0, data_time: 5ms, step_time: {900 if s % 10 == 3 else 100}ms" for s in range(1, 81)]
    lines += [f"[Rank 1/2] Step {s}, Loss: 2.0, data_time: 5ms, step_time: {900 if s % 10 == 3 else 100}ms" for s in range(1, 81)]
    metrics = extract_metrics(lines_frame(lines))
    found = find_periodicity(metrics)
    assert found["period_steps"].to_list() == [10]
    times = step_times(metrics)
    path = periodicity_figure(times, found.row(0, named=True), spike_periodogram(times), tmp_path)
    assert path.name == "periodicity.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
