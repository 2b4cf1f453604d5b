"""Numerical failure read from the training metrics themselves, whatever the log's wording.

Every detector returns anomaly rows (NUMERICS: kind, file, line, rank, step, value,
reference); `numerical_findings` turns the first row of each kind into a finding that
cites its line, and the whole table goes to verdict.json as `numerics`.

Notes:
    A stream is one (file, rank); where it logs steps, a step counter that goes back (a
    restart) starts a new segment, and no detector compares across segments.
    - non_finite (METRIC001): the first loss or gradient norm that is NaN or Inf. A run
      that logs `loss nan` for hundreds of steps and completes is NUMERICAL, not healthy.
      The loss printed by one rank is usually all-reduced, so the finding names a rank
      only when exactly one rank went bad at the first bad step while another rank logged
      a finite loss at that same step: the NaN started there and the gradient all-reduce
      then carried it to every replica.
    - loss_scale_collapse (METRIC002): the fp16 dynamic loss scale fell below
      COLLAPSED_SCALE, or to 1/SCALE_DROP of the largest value logged. The start differs
      by framework (DeepSpeed and torch's GradScaler 2^16, fairseq 128, icefall 1.0), so
      the absolute floor is far below any of them.
    - grad_explosion (METRIC003): a finite gradient norm EXPLOSION times the median of
      the same stream's TRAIL norms before it (at least MIN_TRAIL of them), or at least
      ABSURD_GRAD_NORM whatever came before: an excerpt that starts after the blow-up has
      no calm norms to compare with, and no trained network's gradient is that large.
    - loss_spike (METRIC004, info): a loss at least SPIKE_RISE above the median of its
      TRAIL predecessors, and at least SPIKE_Z robust z-scores (median/MAD of the stream's
      relative step-to-step changes) out: an anomaly worth a look, not a failure.
      Spikes and divergence judge only segments of MIN_LOSS_POINTS positive losses.
    - divergence (METRIC005): the loss smoothed over SMOOTH points climbs to DIVERGED_RATIO
      times its best value so far, having lost at least half the progress made from
      its start, and never comes back below that line to the end of the stream (at least
      PERSIST points): training is undoing itself without a single NaN.
    - loss_collapse (METRIC010): the loss drops from at least ZERO_FROM straight to zero (at
      most ZERO_LOSS either side) and stays there for ZERO_POINTS logs or more. No real
      objective gets there from that height in one logging interval: the loss is no longer
      being computed from the data (every step skipped on fp16 overflow, every label masked,
      a NaN turned to zero, labels leaked into the inputs). Cites the first zero; the
      reference is the loss before it.
    - loss_jump (METRIC011): a positive loss JUMP times the median of its TRAIL predecessors
      (one suffices) that never again comes below STAY times that median, over at least
      PERSIST more logs to the end of the stream: a level shift the run does not recover
      from, which an excerpt too short for `divergence` still shows.
    - plateau (METRIC008, info): a stream logged from the start of training (first step
      at most PLATEAU_FIRST_STEP) over at least PLATEAU_POINTS losses whose smoothed loss
      never fell PLATEAU_LEARNED below its start: the model is not learning (learning rate
      zero, frozen weights, masked labels). Cites the stream's first smoothed point; the
      reference is its best. An excerpt from the middle of a run is not judged.
    - loss_explosion (METRIC009): a positive loss EXPLODED times the lowest loss logged
      before it (two earlier points suffice) and at least MIN_EXPLOSION_LOSS. The lowest is
      the stream's own, or in a file several ranks write, any rank's: replicas of one model
      never sit three orders of magnitude apart.
    - replica_divergence (METRIC007): a rank whose loss departs from its peers' at one
      step and stays apart (`replicas.departed_ranks`); one finding per such rank.
    Besides non_finite's own rule, a finding names a rank when the anomaly shows on that one
    rank while other ranks log losses in the same files (`_sole_rank`).
"""

from __future__ import annotations

import polars as pl

from forensics.passes.replicas import departed_ranks
from forensics.schema import FINDINGS, conform, empty

COLLAPSED_SCALE = 2.0**-6  # 64x below the lowest start (icefall 1.0): the gradients overflow fp16 even scaled down
SCALE_DROP = 2.0**12
EXPLOSION = 100.0
ABSURD_GRAD_NORM = 1e8  # healthy runs in the corpus log norms up to ~1e4 (icefall's scaled ones)
TRAIL = 20
MIN_TRAIL = 5
SPIKE_RISE = 0.5
SPIKE_Z = 6.0
SMOOTH = 5
DIVERGED_RATIO = 2.0
PERSIST = 3
MIN_LOSS_POINTS = 10
EXPLODED = 1_000.0  # a loss this many times its lowest earlier value has blown up, however few points show it
MIN_EXPLOSION_LOSS = 100.0  # and is large in absolute terms: no aux loss of 1e-5 rising to 0.01 counts
ZERO_FROM = 1.0
ZERO_LOSS = 1e-4
ZERO_POINTS = 2
JUMP = 3.0
STAY = 2.0
PLATEAU_POINTS = 40
PLATEAU_FIRST_STEP = 10
PLATEAU_LEARNED = 0.05

NUMERICS = {
    "kind": pl.String, "file": pl.String, "line": pl.Int64, "rank": pl.Int32, "step": pl.Int64,
    "value": pl.Float64, "reference": pl.Float64,
}  # fmt: skip
# kind -> (pattern, title, severity); the first row of each kind becomes the finding.
KINDS = {
    "non_finite": ("METRIC001", "The logged {field} turned NaN/Inf", "critical"),
    "loss_scale_collapse": ("METRIC002", "The fp16 loss scale collapsed (overflow after overflow)", "critical"),
    "grad_explosion": (
        "METRIC003",
        f"The gradient norm exploded (over {EXPLOSION:.0f}x its recent median, or past {ABSURD_GRAD_NORM:,.0f})",
        "error",
    ),
    "loss_spike": ("METRIC004", "The loss spiked far above its recent median", "info"),
    "divergence": ("METRIC005", "The loss diverged: it climbed back up and stayed up", "error"),
    "loss_explosion": ("METRIC009", f"The loss exploded (over {EXPLODED:,.0f}x its lowest earlier value)", "error"),
    "loss_collapse": ("METRIC010", "The loss dropped straight to zero and stayed there", "error"),
    "loss_jump": ("METRIC011", f"The loss jumped {JUMP:.0f}x its recent median and stayed up", "error"),
    "plateau": ("METRIC008", "The loss has not improved since the start (plateau)", "info"),
    "replica_divergence": ("METRIC007", "Loss departed from the other ranks' and stayed apart (replicas disagree)", "error"),
}
PER_RANK_KINDS = {"replica_divergence"}  # one finding per rank, naming it
STREAM = [pl.col("file"), pl.col("rank").fill_null(-1)]


def _segmented(rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` in line order with `segment`: the stream's count of step-counter resets so far."""
    reset = (pl.col("step") < pl.col("step").forward_fill().shift(1)).fill_null(False)
    return rows.sort("file", "line").with_columns(segment=reset.cum_sum().over(STREAM))


def _anomalies(rows: pl.DataFrame, kind: str, value: str | pl.Expr, reference: pl.Expr | None = None) -> pl.DataFrame:
    return rows.select(
        kind=pl.lit(kind),
        file="file",
        line="line",
        rank="rank",
        step="step",
        value=pl.col(value) if isinstance(value, str) else value,
        reference=reference if reference is not None else pl.lit(None, pl.Float64),
    ).cast(NUMERICS)


def non_finite(metrics: pl.DataFrame) -> pl.DataFrame:
    bad = metrics.filter(~pl.col("loss").is_finite() | ~pl.col("grad_norm").is_finite())
    value = pl.when(pl.col("loss").is_finite().not_()).then("loss").otherwise("grad_norm")
    return _anomalies(bad, "non_finite", value)


def loss_scale_collapse(metrics: pl.DataFrame) -> pl.DataFrame:
    scales = metrics.filter(pl.col("loss_scale").is_finite())
    if scales.is_empty():
        return pl.DataFrame(schema=NUMERICS)
    top = scales["loss_scale"].max()
    collapsed = scales.filter((pl.col("loss_scale") < COLLAPSED_SCALE) | (pl.col("loss_scale") * SCALE_DROP <= top))
    return _anomalies(collapsed, "loss_scale_collapse", "loss_scale", pl.lit(top))


def _trailing_median(column: str) -> pl.Expr:
    return pl.col(column).shift(1).rolling_median(window_size=TRAIL, min_samples=MIN_TRAIL).over([*STREAM, "segment"])


def grad_explosion(metrics: pl.DataFrame) -> pl.DataFrame:
    norms = _segmented(metrics.filter(pl.col("grad_norm").is_finite())).with_columns(trailing=_trailing_median("grad_norm"))
    exploded = norms.filter((pl.col("grad_norm") > EXPLOSION * pl.col("trailing")) | (pl.col("grad_norm") >= ABSURD_GRAD_NORM))
    return _anomalies(exploded, "grad_explosion", "grad_norm", pl.col("trailing"))


def _losses(metrics: pl.DataFrame) -> pl.DataFrame:
    """Finite losses per stream segment, in line order; only segments of MIN_LOSS_POINTS or more
    that are all positive (a policy or adversarial loss that crosses zero has no ratios)."""
    segment = [*STREAM, "segment"]
    losses = _segmented(metrics.filter(pl.col("loss").is_finite()))
    keep = (pl.len().over(segment) >= MIN_LOSS_POINTS) & (pl.col("loss").min().over(segment) > 0)
    return losses.filter(keep)


def loss_spikes(metrics: pl.DataFrame) -> pl.DataFrame:
    losses = _losses(metrics)
    segment = [*STREAM, "segment"]
    change = (pl.col("loss") / pl.col("loss").shift(1) - 1).over(segment)
    mad = (pl.col("change") - pl.col("change").median()).abs().median().over(segment) * 1.4826
    scored = losses.with_columns(trailing=_trailing_median("loss"), change=change).with_columns(
        z=(pl.col("change") - pl.col("change").median().over(segment)) / mad
    )
    spiked = scored.filter((pl.col("loss") > (1 + SPIKE_RISE) * pl.col("trailing")) & (pl.col("z") >= SPIKE_Z))
    return _anomalies(spiked, "loss_spike", "loss", pl.col("trailing"))


def divergence(metrics: pl.DataFrame) -> pl.DataFrame:
    segment = [*STREAM, "segment"]
    smooth = pl.col("loss").rolling_median(window_size=SMOOTH, min_samples=SMOOTH).over(segment)
    scored = (
        _losses(metrics)
        .with_columns(smooth=smooth)
        .with_columns(
            best=pl.col("smooth").cum_min().over(segment),
            start=pl.col("smooth").drop_nulls().first().over(segment),
        )
    )
    bad = (pl.col("smooth") >= DIVERGED_RATIO * pl.col("best")) & (
        pl.col("smooth") - pl.col("best") >= 0.5 * (pl.col("start") - pl.col("best"))
    )
    # The last run of bad points reaching the segment's end: the loss never came back.
    runs = scored.with_columns(bad=bad.fill_null(False)).with_columns(
        run=(pl.col("bad") != pl.col("bad").shift(1)).fill_null(True).cum_sum().over(segment)
    )
    tail = runs.filter(pl.col("bad") & (pl.col("run") == pl.col("run").max().over(segment)))
    lasting = tail.filter(pl.len().over(segment) >= PERSIST)
    onset = lasting.group_by(segment, maintain_order=True).first()
    return _anomalies(onset, "divergence", "smooth", pl.col("best"))


def loss_explosion(metrics: pl.DataFrame) -> pl.DataFrame:
    """Losses EXPLODED times their stream's lowest earlier value, or, in a file several ranks
    write, any rank's: orders of magnitude, which no noise and no schedule explains, and which
    data-parallel replicas (the same weights, different batches) never show between them. Two
    earlier points suffice, so a short excerpt is judged too."""
    losses = _segmented(metrics.filter(pl.col("loss").is_finite() & (pl.col("loss") > 0)))
    shared = pl.col("rank").n_unique().over("file") > 1
    within = [pl.when(shared).then(pl.lit(0)).otherwise(pl.col("rank").fill_null(-1)), "file", "segment"]
    lowest = pl.col("loss").cum_min().shift(1).over(within)
    earlier = pl.int_range(pl.len()).over(within)
    exploded = losses.with_columns(lowest=lowest, earlier=earlier).filter(
        (pl.col("earlier") >= 2) & (pl.col("loss") >= EXPLODED * pl.col("lowest")) & (pl.col("loss") >= MIN_EXPLOSION_LOSS)
    )
    return _anomalies(exploded, "loss_explosion", "loss", pl.col("lowest"))


def loss_collapse(metrics: pl.DataFrame) -> pl.DataFrame:
    segment = [*STREAM, "segment"]
    losses = _segmented(metrics.filter(pl.col("loss").is_finite()))
    zero = pl.col("loss").abs() <= ZERO_LOSS
    run = (zero != zero.shift(1)).fill_null(True).cum_sum().over(segment)
    scored = losses.with_columns(before=pl.col("loss").shift(1).over(segment), run=run)
    zeros = scored.filter(zero).with_columns(length=pl.len().over([*segment, "run"]))
    onset = zeros.filter((pl.col("before") >= ZERO_FROM) & (pl.col("length") >= ZERO_POINTS))
    return _anomalies(onset, "loss_collapse", "loss", pl.col("before"))


def loss_jump(metrics: pl.DataFrame) -> pl.DataFrame:
    segment = [*STREAM, "segment"]
    losses = _segmented(metrics.filter(pl.col("loss").is_finite() & (pl.col("loss") > 0)))
    trailing = pl.col("loss").shift(1).rolling_median(window_size=TRAIL, min_samples=1).over(segment)
    lowest_from_here = pl.col("loss").reverse().cum_min().reverse().over(segment)
    left = (pl.len() - pl.int_range(pl.len())).over(segment)  # this log and those after it
    scored = losses.with_columns(trailing=trailing, lowest_from_here=lowest_from_here, left=left)
    jumped = scored.filter(
        (pl.col("loss") >= JUMP * pl.col("trailing"))
        & (pl.col("lowest_from_here") >= STAY * pl.col("trailing"))
        & (pl.col("left") > PERSIST)
    )
    return _anomalies(jumped, "loss_jump", "loss", pl.col("trailing"))


def plateau(metrics: pl.DataFrame) -> pl.DataFrame:
    segment = [*STREAM, "segment"]
    smooth = pl.col("loss").rolling_median(window_size=SMOOTH, min_samples=SMOOTH).over(segment)
    scored = (
        _losses(metrics.filter(pl.col("step").is_not_null()))
        .filter((pl.len().over(segment) >= PLATEAU_POINTS) & (pl.col("step").min().over(segment) <= PLATEAU_FIRST_STEP))
        .with_columns(smooth=smooth)
        .with_columns(start=pl.col("smooth").drop_nulls().first().over(segment), best=pl.col("smooth").min().over(segment))
    )
    stuck = scored.filter(pl.col("best") > (1 - PLATEAU_LEARNED) * pl.col("start"))
    first = stuck.filter(pl.col("smooth").is_not_null()).sort("file", "line").group_by(segment, maintain_order=True).first()
    return _anomalies(first, "plateau", "smooth", pl.col("best"))


def replica_divergence(metrics: pl.DataFrame) -> pl.DataFrame:
    return _anomalies(departed_ranks(metrics), "replica_divergence", "loss", pl.col("median"))


def _first_rank_to_go_bad(bad: pl.DataFrame, metrics: pl.DataFrame) -> int | None:
    """The one rank whose value went non-finite at a step where another rank still logged a
    finite loss: the rank the NaN started on. None when that is not what the logs show."""
    stepped = bad.filter(pl.col("step").is_not_null() & pl.col("rank").is_not_null())
    if stepped.is_empty():
        return None
    onset = stepped["step"].min()
    first = stepped.filter(pl.col("step") == onset)["rank"].unique()
    peers_fine = metrics.filter((pl.col("step") == onset) & pl.col("loss").is_finite() & ~pl.col("rank").is_in(first.implode()))
    return int(first[0]) if first.len() == 1 and not peers_fine.is_empty() else None


def _sole_rank(bad: pl.DataFrame, metrics: pl.DataFrame) -> int | None:
    """The one rank an anomaly shows on, where other ranks log losses beside it in the same
    files without it (replicas of one model: the bad loss is that rank's own). None otherwise."""
    ranks = bad["rank"].drop_nulls().unique()
    if ranks.len() != 1 or bad["rank"].null_count():
        return None
    peers = metrics.filter(pl.col("file").is_in(bad["file"].unique().implode()) & pl.col("loss").is_finite() & (pl.col("rank") != ranks[0]))
    return int(ranks[0]) if not peers.is_empty() else None


def numerics_table(metrics: pl.DataFrame) -> pl.DataFrame:
    """Every numerical anomaly in the metrics (NUMERICS schema), in file and line order."""
    if metrics.is_empty():
        return pl.DataFrame(schema=NUMERICS)
    detectors = (
        non_finite, loss_scale_collapse, grad_explosion, loss_spikes, divergence, loss_explosion, loss_collapse, loss_jump,
        plateau, replica_divergence,
    )  # fmt: skip
    return pl.concat([detect(metrics) for detect in detectors]).sort("file", "line", "kind")


def numerical_findings(table: pl.DataFrame, metrics: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """One NUMERICAL finding per anomaly kind (FINDINGS schema), citing the kind's first line."""
    if table.is_empty():
        return empty(FINDINGS)
    cited = lines.select("file", "line", "text", "host", "time")
    found = []
    per_rank = pl.when(pl.col("kind").is_in(list(PER_RANK_KINDS))).then(pl.col("rank"))
    for (kind, own_rank), rows in table.with_columns(_own=per_rank).group_by("kind", "_own", maintain_order=True):
        pattern, title, severity = KINDS[kind]
        first_rank = _first_rank_to_go_bad(rows, metrics) if kind == "non_finite" else own_rank
        if first_rank is None and kind != "non_finite":
            first_rank = _sole_rank(rows, metrics)
        if first_rank is not None:
            rows = rows.filter(pl.col("rank") == first_rank)
        first = (
            rows.drop("_own").join(cited, on=["file", "line"], how="left").sort([pl.col("time").is_null(), "time", "file", "line"]).head(1)
        )
        first_row = metrics.join(first.select("file", "line"), on=["file", "line"], how="semi")
        field = "grad norm" if kind == "non_finite" and first_row.filter(~pl.col("loss").is_finite()).is_empty() else "loss"
        found.append(
            first.with_columns(
                pattern=pl.lit(pattern),
                title=pl.lit(title.format(field=field)),
                category=pl.lit("NUMERICAL"),
                severity=pl.lit(severity),
                role=pl.lit("initiating"),
                rank=pl.lit(first_rank, pl.Int32),
                captures=pl.struct(
                    step="step", value=pl.col("value"), reference=pl.col("reference"), rows=pl.lit(rows.height)
                ).struct.json_encode(),
            )
        )
    return conform(pl.concat(found, how="diagonal_relaxed"), FINDINGS)
