"""Proof that a run was healthy, and the signs that it stopped without saying why.

Notes:
    NO_FAILURE needs positive proof (DESIGN: "health needs proof"). `health_proofs`
    returns one row per proof, each citing a line:
    - completion: a catalog event of category NO_FAILURE (a framework's "training
      finished", torchrun's SUCCEEDED worker group, a launcher's exit 0);
    - last_step: a progress line `N/M` (Megatron `iteration N/ M`, `step N/M`) carrying
      training metrics, whose N reached M;
    - progressing: every stream (file, rank) that logs training metrics still logs them
      in its last PROGRESS_TAIL lines, has turned at least MIN_PROGRESS_STEPS steps since
      its step counter last went back (the distinct steps logged, or with no reset in
      view the counter's value; without step numbers, its lines that log a loss or the
      distinct epochs its lines name, whichever is more), and no stream was cut mid-line or
      stopped short of the total it announced, and no stream ends on an error no finding
      explains (ERRING in its last PROGRESS_TAIL lines, not a metric line and not one logged
      as a warning: rank 0 stepping while rank 290 repeats `kernel execution error.` is no
      healthy run, nor a stream's last lines STALLING at any level: reads timing out, retries),
      and no stream's losses did nothing but climb or ended climbing (CLIMBING: at least
      CLIMB_POINTS losses, each above the one before, the last CLIMB_RISE times the first, or
      the last CLIMB_POINTS each above the one before, to ENDING_HIGH times the lowest:
      PP-YOLOE's 4.8, 4.7, 8.4, 21.5;
      Caffe's 38.8, 43.7, 47.7 on its way to a saturated softmax is a run coming apart, or
      at best a loss the tool cannot read, not proof of one going well), nor its step times
      the same way (84.6 s, 142.5 s, 202.4 s per iteration: a run grinding to a halt), and
      no stream's last lines report a value as NaN (NON_FINITE: an RL run's `Reward:
      mean=nan` while its step counter turns). A pasted excerpt of a live, healthy run
      proves this much (one `step=2500` line attests 2500 steps turned); two steps from
      the start are not yet a run going on.
    `abrupt_stops` returns findings (category UNKNOWN, role symptom) for runs that end
    without a word:
    - STOP001 a text file whose last line has no newline: its writer died mid-line;
    - STOP002 a stream whose last progress line announces N of M with N < M, after which
      the stream no longer steps (no metric line in its last PROGRESS_TAIL lines) and
      no completion line follows: the run stopped mid-way. A stream still stepping at
      its end is a live run's excerpt, not a stop. Weak (severity warning): never
      outranks a real error.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, Category, conform, empty

PROGRESS_TAIL = 5
MIN_PROGRESS_STEPS = 3
# `iteration 120/ 5000`, `step 120/5000`, `iter [120/5000]`: the step and the announced total.
PROGRESS_TOTAL = r"(?i)\b(?:iteration|iter|step)\s*[:\[]?\s*(\d+)\s*/\s*(\d+)\b"
# Fields that show the training loop turning. Throughput or memory alone do not (an OOM message
# quotes memory), nor a loss scale alone: a run of fp16 overflow notes is steps being skipped.
PROGRESS_FIELDS = ("step", "loss", "epoch")
# A line that reports something going wrong, in words no pattern may know.
ERRING = r"(?i)\berror\b|\bfail(?:ed|ure)\b|\bfatal\b|\bexception\b|\babort(?:ed|ing)?\b"
# A line that reports the run stalling, logged at any level: a read that timed out, a retry.
STALLING = r"(?i)\btim(?:ed|ing) out\b|\bretry(?:ing)?\b|\bconnection (?:reset|refused|aborted)\b"
# A value logged as NaN (`Reward: mean=nan`, `PolicyEntropy: nan`, `acc=nan`): whatever it measures, no healthy run ends on one.
NON_FINITE = r"(?i)[:=]\s*(?:\w+=)?[-+]?nan\b"
# Logged at warning level: TensorFlow's `2020-06-08 05:30:15.889706: W tensorflow/...`, glog's `W0608`.
WARNING_LEVEL = r"\bWARN(?:ING)?\b|^\S+ \S+: W |^W\d{4} "
CLIMB_POINTS = 3
CLIMB_RISE = 1.2
ENDING_HIGH = 2.0
PROOFS = {"kind": pl.String, "file": pl.String, "line": pl.Int64, "rank": pl.Int32, "text": pl.String}
STREAM = ["file", "rank"]


def training_progress(metrics: pl.DataFrame) -> pl.DataFrame:
    """The metric rows that carry a PROGRESS_FIELDS value."""
    return metrics.filter(pl.any_horizontal(pl.col(name).is_not_null() for name in PROGRESS_FIELDS))


def progress_lines(lines: pl.DataFrame, metrics: pl.DataFrame) -> pl.DataFrame:
    """Metric lines that announce `N/M`, with N and M."""
    metric_lines = training_progress(metrics).select("file", "line").unique()
    return (
        lines.join(metric_lines, on=["file", "line"], how="semi")
        .with_columns(pl.col("text").str.extract_groups(PROGRESS_TOTAL).alias("_nm"))
        .with_columns(
            step=pl.col("_nm").struct.field("1").cast(pl.Int64, strict=False),
            total=pl.col("_nm").struct.field("2").cast(pl.Int64, strict=False),
        )
        .filter(pl.col("total").is_not_null() & (pl.col("total") > 0))
        .select("file", "line", "rank", "text", "step", "total")
    )


def _tails(lines: pl.DataFrame) -> pl.DataFrame:
    """The last PROGRESS_TAIL lines of every stream."""
    return lines.sort("line").group_by(STREAM, maintain_order=True).tail(PROGRESS_TAIL)


def _last_progress(progress: pl.DataFrame) -> pl.DataFrame:
    return progress.sort("line").group_by(STREAM, maintain_order=True).last()


def abrupt_stops(
    inputs: pl.DataFrame, lines: pl.DataFrame, metrics: pl.DataFrame, findings: pl.DataFrame, progress: pl.DataFrame | None = None
) -> pl.DataFrame:
    """STOP001/STOP002 findings: a file cut mid-line, a run stopped short of its announced total."""
    if lines.is_empty():
        return empty(FINDINGS)
    metrics = training_progress(metrics)
    cut_files = inputs.filter(pl.col("cut_mid_line").fill_null(False))["path"].to_list()
    cut = (
        lines.filter(pl.col("file").is_in(cut_files))
        .sort("line")
        .group_by("file", maintain_order=True)
        .last()
        .with_columns(
            pattern=pl.lit("STOP001"),
            title=pl.lit("The log ends in the middle of a line: its writer stopped abruptly"),
            severity=pl.lit("error"),
        )
    )
    completions = findings.filter(pl.col("category") == Category.NO_FAILURE)
    still_stepping = _tails(lines).join(metrics.select("file", "line").unique(), on=["file", "line"], how="semi")
    short = (
        _last_progress(progress if progress is not None else progress_lines(lines, metrics))
        .filter(pl.col("step") < pl.col("total"))
        .join(still_stepping.select(STREAM).unique(), on=STREAM, how="anti", nulls_equal=True)
    )
    if not completions.is_empty():
        done_after = short.join(completions.select("file", done_line="line"), on="file", how="inner").filter(
            pl.col("done_line") > pl.col("line")
        )
        short = short.join(done_after.select(STREAM).unique(), on=STREAM, how="anti", nulls_equal=True)
    stopped = short.with_columns(
        pattern=pl.lit("STOP002"),
        title=pl.lit("The run's last progress line is short of the total it announced"),
        severity=pl.lit("warning"),
        captures=pl.struct("step", "total").struct.json_encode(),
    )
    found = pl.concat([conform(cut, FINDINGS), conform(stopped, FINDINGS)])
    return found.with_columns(category=pl.lit(Category.UNKNOWN.value), role=pl.lit("symptom"))


def _climbing(metrics: pl.DataFrame, column: str) -> pl.DataFrame:
    """The streams whose finite positive values of `column` (loss, step time), CLIMB_POINTS or more,
    all rise to CLIMB_RISE times the first, or whose last CLIMB_POINTS rise to ENDING_HIGH times the lowest."""
    value = pl.col(column)
    series = metrics.filter(value.is_finite() & (value > 0)).sort("line")
    return (
        series.group_by(STREAM)
        .agg(
            points=pl.len(),
            rising=(value.diff().drop_nulls() > 0).all(),
            rise=value.last() / value.first(),
            ending_high=(value.tail(CLIMB_POINTS).diff().drop_nulls() > 0).all() & (value.last() >= ENDING_HIGH * value.min()),
        )
        .filter((pl.col("points") >= CLIMB_POINTS) & (pl.col("rising") & (pl.col("rise") >= CLIMB_RISE) | pl.col("ending_high")))
    )


def _last_step_count() -> pl.Expr:
    return (pl.col("step") == pl.col("step").last()).sum()


def _steps_since_reset(metrics: pl.DataFrame) -> pl.DataFrame:
    """Per stream: steps turned since its step counter last went back (a restart, or an
    epoch-local counter after a global one): the distinct steps logged after a reset; with its
    last step logged once (or as often as the steps before it) and either no reset in view or a reset back to where the stream
    began (the next epoch of an epoch-local counter), the counter's value where it is higher
    (a resumed run's counter starts at its checkpoint, so after a restart mid-way only the
    steps seen count; a bar re-drawn at one count is stuck); its metric lines where none
    carries a step: those that log a loss, or the distinct epochs the lines name where that is
    more (`epoch 2, learning rate 0.001`: three epochs turned is a run going on)."""
    reset = (pl.col("step") < pl.col("step").shift(1)).fill_null(False)
    stepped = (
        metrics.filter(pl.col("step").is_not_null())
        .sort("line")
        .with_columns(
            _run=reset.cum_sum().over(STREAM, order_by="line"), _stream_start=pl.col("step").first().over(STREAM, order_by="line")
        )
        .filter(pl.col("_run") == pl.col("_run").max().over(STREAM))
        .group_by(STREAM)
        .agg(
            # The counter counts from where the stream began: no reset in view, or one back to
            # that start (an epoch-local counter starting its next epoch, not a resumed run).
            counts=pl.col("step").first() <= pl.col("_stream_start").first(),
            # Logged once, or no more often than the steps before it (several processes
            # printing each step into one file): a bar re-drawn at its last count is stuck.
            once=(_last_step_count() == 1)
            | (_last_step_count() <= pl.col("step").unique_counts().reverse().slice(1).max()).fill_null(False),
            seen=pl.col("step").n_unique(),
            value=pl.col("step").max(),
        )
        .select(*STREAM, steps=pl.when(pl.col("counts") & pl.col("once")).then(pl.max_horizontal("seen", "value")).otherwise("seen"))
    )
    # Without step numbers: its lines that log a loss, or the distinct epochs its lines name,
    # whichever says more (an epoch logged ten times without a loss is one epoch).
    said = pl.max_horizontal(pl.col("loss").count(), pl.col("epoch").drop_nulls().n_unique())
    unstepped = metrics.group_by(STREAM).agg(steps=said, _any=pl.col("step").is_not_null().any()).filter(~pl.col("_any"))
    return pl.concat([stepped, unstepped.drop("_any")], how="vertical_relaxed")


def health_proofs(lines: pl.DataFrame, metrics: pl.DataFrame, findings: pl.DataFrame, progress: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per proof of health: (kind, file, line, rank, text)."""
    completion = findings.filter(pl.col("category") == Category.NO_FAILURE).with_columns(kind=pl.lit("completion"))
    proofs = [conform(completion, PROOFS)]
    metrics = training_progress(metrics)
    if lines.is_empty() or metrics.is_empty():
        return pl.concat(proofs)
    last = _last_progress(progress if progress is not None else progress_lines(lines, metrics))
    proofs.append(conform(last.filter(pl.col("step") >= pl.col("total")).with_columns(kind=pl.lit("last_step")), PROOFS))

    stopped = findings.filter(pl.col("pattern").is_in(["STOP001", "STOP002"]))
    metric_streams = _steps_since_reset(metrics)
    too_short = metric_streams.filter(pl.col("steps") < MIN_PROGRESS_STEPS)
    tail_metrics = _tails(lines).join(metrics.select("file", "line").unique(), on=["file", "line"], how="semi")
    ending_with_metrics = tail_metrics.select(STREAM).unique()
    all_progress = (
        not metric_streams.is_empty() and metric_streams.join(ending_with_metrics, on=STREAM, how="anti", nulls_equal=True).is_empty()
    )
    ending_on_errors = (
        _tails(lines)
        .filter(pl.col("text").str.contains(ERRING) & ~pl.col("text").str.contains(WARNING_LEVEL) | pl.col("text").str.contains(STALLING))
        .join(metrics.select("file", "line"), on=["file", "line"], how="anti")
        .join(findings.select("file", "line"), on=["file", "line"], how="anti")
    )
    ending_non_finite = _tails(lines).filter(pl.col("text").str.contains(NON_FINITE))
    climbing = not _climbing(metrics, "loss").is_empty() or not _climbing(metrics, "step_time_s").is_empty()
    healthy_looking = (
        stopped.is_empty() and too_short.is_empty() and ending_on_errors.is_empty() and ending_non_finite.is_empty() and not climbing
    )
    if all_progress and healthy_looking:
        closing = tail_metrics.sort("line").group_by(STREAM, maintain_order=True).last().with_columns(kind=pl.lit("progressing"))
        proofs.append(conform(closing, PROOFS))
    return pl.concat(proofs).sort(["kind", "file", "line"])
