"""Per-rank GPU time breakdown of Kineto traces, with Holistic Trace Analysis 0.5.0's numbers.

Users compare these figures with HTA's on the same traces, so the definitions are HTA's
(see reference/hta-semantics.md), recomputed with whole-column Polars expressions:

Notes:
    * Ranks are aligned on the global minimum `ts`. When the traces hold two or more
      distinct `ProfilerStep#N` names, each trace keeps its CPU events that start before
      its last ProfilerStep and the GPU events launched by them (matched on
      `correlation`). A trace without any ProfilerStep is then kept whole (HTA would
      drop everything in it and fail).
    * GPU event = a row with `args.stream` (kernels, memcpy, memset, cuda_sync).
    * Kernel type by name, HTA's regexes: COMMUNICATION `^nccl.*Kernel` (so the
      `ncclDevKernel_*` names of NCCL >= 2.19 count), MEMORY `^(Memcpy|Memset|dma)`,
      COMPUTATION anything not matching `^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)`.
    * Interval unions: sort by start, a new merged interval begins where the start
      exceeds the running maximum of the previous ends (`shift` + `cum_max`).
    * kernel_time = end of the last merged GPU interval - start of the first; idle =
      kernel_time - |union(GPU)|; compute = |union(COMPUTATION)|; non_compute = the rest.
      comp_comm_overlap = |union(COMM) & union(COMP)| / |union(COMM)|, undefined (None)
      without communication kernels. Percentages are rounded half-to-even to 2 decimals.
    * A trace without GPU events gets zeros and None percentages instead of an error.
    * Also HTA's kernel-type breakdown (time by the set of types running at once),
      per-kernel statistics, top kernels and idle-time breakdown (host_wait / kernel_wait
      / other gaps per stream).
"""

from __future__ import annotations

import polars as pl

from forensics.ingest.traces import TraceLoad

COMMUNICATION, MEMORY, COMPUTATION, OTHER = "COMMUNICATION", "MEMORY", "COMPUTATION", "OTHER"

_SYNC_NAMES = ["Event Sync", "Context Sync"]

KERNEL_TYPE = (
    pl.when(pl.col("name").str.contains(r"^nccl.*Kernel"))
    .then(pl.lit(COMMUNICATION))
    .when(pl.col("name").str.contains(r"^(?:Memcpy|Memset|dma)"))
    .then(pl.lit(MEMORY))
    .when(~pl.col("name").str.contains(r"^(?:nccl.*Kernel|.*Memcpy|Memset|.*Sync)"))
    .then(pl.lit(COMPUTATION))
    .otherwise(pl.lit(OTHER))
    .alias("kernel_type")
)


def combined_events(loads: list[TraceLoad]) -> pl.DataFrame:
    """All traces' timing columns in one frame (`trace` = index in `loads`), aligned and step-filtered as HTA.

    Names are kept only where a later step reads them (GPU rows; ProfilerStep rows are
    flagged first), so that filtering never copies the long CPU-op names.
    """
    frames = [
        t.events.select(
            pl.lit(i, pl.Int32).alias("trace"),
            pl.lit(t.rank, pl.Int32).alias("rank"),
            "cat",
            "name",
            "ts",
            "end",
            "stream",
            "correlation",
        )
        for i, t in enumerate(loads)
    ]
    events = pl.concat(frames) if frames else pl.DataFrame()
    if events.is_empty():
        return events
    origin = events["ts"].min()
    is_step = pl.col("name").str.contains("ProfilerStep", literal=True)
    steps = events.filter(is_step)["name"].n_unique()
    launched_on_gpu = ((pl.col("stream").fill_null(-1) >= 0) & (pl.col("correlation").fill_null(-1) >= 0)) | pl.col("name").is_in(
        _SYNC_NAMES
    )
    events = events.with_columns(
        pl.col("ts") - origin,
        pl.col("end") - origin,
        is_step.alias("_step"),
        launched_on_gpu.alias("_gpu"),
        pl.when(pl.col("stream").fill_null(-1) != -1).then(pl.col("name")).alias("name"),
    )
    events = _drop_last_step(events) if steps >= 2 else events
    return events.drop("_step", "_gpu")


def _drop_last_step(events: pl.DataFrame) -> pl.DataFrame:
    last_step = events.filter(~pl.col("_gpu") & pl.col("_step")).group_by("trace").agg(pl.col("ts").max().alias("_last_step"))
    events = events.join(last_step, on="trace", how="left")
    cpu = events.filter(~pl.col("_gpu") & (pl.col("_last_step").is_null() | (pl.col("ts") < pl.col("_last_step"))))
    gpu = events.filter(pl.col("_gpu"))
    unfiltered = gpu.filter(pl.col("_last_step").is_null())
    launched = gpu.filter(pl.col("_last_step").is_not_null()).join(
        cpu.select("trace", pl.col("correlation").fill_null(-1)).unique(), on=["trace", "correlation"], how="semi"
    )
    return pl.concat([launched, unfiltered, cpu]).drop("_last_step")


def gpu_events(events: pl.DataFrame) -> pl.DataFrame:
    """Rows that ran on a GPU stream, with their HTA kernel type."""
    if events.is_empty():
        return events
    return events.filter(pl.col("stream").fill_null(-1) != -1).with_columns(KERNEL_TYPE)


def merge_intervals(intervals: pl.DataFrame, by: str = "trace") -> pl.DataFrame:
    """Union of [ts, end) intervals per `by` group: disjoint, sorted merged intervals."""
    return (
        intervals.select(by, "ts", "end")
        .sort(by, "ts")
        .with_columns((pl.col("ts") > pl.col("end").shift(1).cum_max().over(by)).fill_null(False).cum_sum().over(by).alias("_g"))
        .group_by(by, "_g")
        .agg(pl.col("ts").min(), pl.col("end").max())
        .sort(by, "ts")
        .drop("_g")
    )


def _union_stats(intervals: pl.DataFrame, prefix: str) -> pl.DataFrame:
    return (
        merge_intervals(intervals)
        .group_by("trace")
        .agg(
            (pl.col("end").sum() - pl.col("ts").sum()).alias(f"{prefix}_union"),
            pl.col("ts").first().alias(f"{prefix}_first"),
            pl.col("end").last().alias(f"{prefix}_last"),
        )
    )


def _overlap(gpu: pl.DataFrame) -> pl.DataFrame:
    """|union(COMM) & union(COMP)| per trace."""
    both = f"{COMPUTATION} overlapping {COMMUNICATION}"
    return (
        _type_sweep(gpu, [COMPUTATION, COMMUNICATION])
        .filter(pl.col("kernel_type") == both)
        .select("trace", pl.col("span").alias("overlap"))
    )


def _pctg(part: str, whole: str) -> pl.Expr:
    # Polars' half-to-even round(2) gives numpy's (so pandas', so HTA's) result bit for bit.
    return pl.when(pl.col(whole) > 0).then((100 * pl.col(part) / pl.col(whole)).round(2, mode="half_to_even"))


def breakdown_frame(loads: list[TraceLoad]) -> pl.DataFrame:
    """One row per trace: HTA's temporal breakdown and comm/comp overlap, in us and percent."""
    traces = pl.DataFrame(
        {"trace": range(len(loads)), "rank": [t.rank for t in loads], "file": [str(t.path) for t in loads]},
        schema={"trace": pl.Int32, "rank": pl.Int32, "file": pl.String},
    )
    gpu = gpu_events(combined_events(loads))
    if gpu.is_empty():
        gpu = pl.DataFrame(schema={"trace": pl.Int32, "ts": pl.Int64, "end": pl.Int64, "kernel_type": pl.String})
    comm = _union_stats(gpu.filter(pl.col("kernel_type") == COMMUNICATION), "comm")
    table = (
        traces.join(_union_stats(gpu, "gpu"), on="trace", how="left")
        .join(_union_stats(gpu.filter(pl.col("kernel_type") == COMPUTATION), "comp"), on="trace", how="left")
        .join(comm, on="trace", how="left")
        .join(_overlap(gpu), on="trace", how="left")
        .with_columns(pl.col("overlap").fill_null(0))
        .with_columns(
            (pl.col("gpu_last") - pl.col("gpu_first")).fill_null(0).alias("kernel_time_us"),
            pl.col("comp_union").fill_null(0).alias("compute_time_us"),
        )
        .with_columns((pl.col("kernel_time_us") - pl.col("gpu_union").fill_null(0)).alias("idle_time_us"))
        .with_columns((pl.col("kernel_time_us") - pl.col("compute_time_us") - pl.col("idle_time_us")).alias("non_compute_time_us"))
    )
    return table.select(
        "rank",
        "kernel_time_us",
        "idle_time_us",
        "compute_time_us",
        "non_compute_time_us",
        _pctg("idle_time_us", "kernel_time_us").alias("idle_time_pctg"),
        _pctg("compute_time_us", "kernel_time_us").alias("compute_time_pctg"),
        _pctg("non_compute_time_us", "kernel_time_us").alias("non_compute_time_pctg"),
        _pctg("overlap", "comm_union").alias("comp_comm_overlap_pctg"),
        "file",
    )


def trace_breakdown(loads: list[TraceLoad]) -> list[dict]:
    """CONTRACT.md's `forensics traces --format json` list, sorted by rank."""
    frame = breakdown_frame(loads).sort("rank", nulls_last=True).drop("file")
    return frame.to_dicts()


def _type_sweep(gpu: pl.DataFrame, kinds: list[str]) -> pl.DataFrame:
    """Time per (trace, set of kernel types running at once), from +bit/-bit edges of each type's union."""
    edges = []
    for bit, kind in enumerate(kinds):
        merged = merge_intervals(gpu.filter(pl.col("kernel_type") == kind))
        edges.append(merged.select("trace", pl.col("ts").alias("time"), pl.lit(1 << bit).alias("step")))
        edges.append(merged.select("trace", pl.col("end").alias("time"), pl.lit(-(1 << bit)).alias("step")))
    label = pl.concat_str(
        [pl.when((pl.col("running") & (1 << bit)) != 0).then(pl.lit(kind)) for bit, kind in enumerate(kinds)],
        separator=" overlapping ",
        ignore_nulls=True,
    )
    return (
        pl.concat(edges)
        .sort("trace", "time")
        .with_columns(
            pl.col("step").cum_sum().over("trace").alias("running"),
            (pl.col("time").shift(-1).over("trace") - pl.col("time")).alias("span"),
        )
        .filter(pl.col("running") > 0)
        .with_columns(label.alias("kernel_type"))
        .group_by("trace", "kernel_type")
        .agg(pl.col("span").sum())
    )


def kernel_type_breakdown(loads: list[TraceLoad], include_memory: bool = True) -> pl.DataFrame:
    """GPU time by the kernel types running at once ("COMPUTATION overlapping COMMUNICATION"), summed over ranks.

    HTA's `get_gpu_kernel_breakdown` first table: percentages of the total, 1 decimal.
    """
    kinds = [COMPUTATION, COMMUNICATION] + ([MEMORY] if include_memory else [])
    gpu = gpu_events(combined_events(loads))
    if gpu.is_empty():
        return pl.DataFrame(schema={"kernel_type": pl.String, "sum_us": pl.Int64, "percentage": pl.Float64})
    return (
        _type_sweep(gpu, kinds)
        .group_by("kernel_type")
        .agg(pl.col("span").sum().alias("sum_us"))
        .sort("sum_us", "kernel_type", descending=[True, False])
        .with_columns((100 * pl.col("sum_us") / pl.col("sum_us").sum()).round(1, mode="half_to_even").alias("percentage"))
    )


def kernel_stats(loads: list[TraceLoad]) -> pl.DataFrame:
    """Per (kernel type, kernel name, rank): count and sum/max/min/mean/std (ddof=1, 0 for one call) of durations."""
    gpu = gpu_events(combined_events(loads))
    if gpu.is_empty():
        return pl.DataFrame(
            schema={
                "kernel_type": pl.String,
                "name": pl.String,
                "rank": pl.Int32,
                "count": pl.UInt32,
                "sum_us": pl.Int64,
                "max_us": pl.Int64,
                "min_us": pl.Int64,
                "mean_us": pl.Float64,
                "std_us": pl.Float64,
            }
        )
    return (
        gpu.with_columns((pl.col("end") - pl.col("ts")).alias("dur"))
        .group_by("kernel_type", "name", "rank")
        .agg(
            pl.len().alias("count"),
            pl.col("dur").sum().alias("sum_us"),
            pl.col("dur").max().alias("max_us"),
            pl.col("dur").min().alias("min_us"),
            pl.col("dur").mean().alias("mean_us"),
            pl.col("dur").std(ddof=1).fill_null(0.0).alias("std_us"),
        )
        .sort("kernel_type", "name", "rank")
    )


def top_kernels(loads: list[TraceLoad], n: int = 10) -> pl.DataFrame:
    """The `n` kernels with the most GPU time over all ranks, with their share of all kernel time."""
    stats = kernel_stats(loads)
    return (
        stats.group_by("kernel_type", "name")
        .agg(
            pl.col("count").sum(),
            pl.col("sum_us").sum(),
            pl.col("max_us").max(),
            pl.col("rank").n_unique().alias("ranks"),
        )
        .with_columns((100 * pl.col("sum_us") / pl.col("sum_us").sum()).round(2).alias("pctg"))
        .sort("sum_us", "name", descending=[True, False])
        .head(n)
    )


KERNEL_WAIT_US = 30  # HTA's default consecutive_kernel_delay
_KERNEL_CATS = ["kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events"]


def idle_time_breakdown(loads: list[TraceLoad], kernel_wait_us: int = KERNEL_WAIT_US) -> pl.DataFrame:
    """Per rank and stream, the idle gaps before each kernel/memcpy/memset, split as HTA does.

    host_wait: the launching runtime call started after the previous event on the stream
    ended (the CPU was late); kernel_wait: otherwise, a gap under `kernel_wait_us` (launch
    overhead); other: the rest. Like HTA: on the aligned, last-step-filtered trace; a GPU
    event's launch is the *last* CPU event carrying its correlation id.
    """
    schema = {"rank": pl.Int32, "stream": pl.Int64, "idle_category": pl.String, "idle_time_us": pl.Int64, "idle_time_ratio": pl.Float64}
    events = combined_events(loads)
    if events.is_empty():
        return pl.DataFrame(schema=schema)
    on_stream = pl.col("stream").fill_null(-1) != -1
    kernels = events.filter(on_stream, pl.col("cat").is_in(_KERNEL_CATS))
    if kernels.is_empty():
        return pl.DataFrame(schema=schema)
    # CPU side as HTA defines it: not on a stream and not a device sync event.
    runtime = (
        events.filter(
            ~on_stream
            & pl.col("correlation").is_not_null()
            & (pl.col("correlation") != -1)
            & ~pl.col("name").fill_null("").is_in(_SYNC_NAMES)
        )
        .sort("trace", "ts", maintain_order=True)
        .group_by("trace", "correlation", maintain_order=True)
        .agg(pl.col("ts").last().alias("ts_runtime"))
    )
    host_wait = (pl.col("ts_runtime") > pl.col("prev_end")).fill_null(False)
    category = (
        pl.when(host_wait)
        .then(pl.lit("host_wait"))
        .when((pl.col("gap") < kernel_wait_us).fill_null(False))
        .then(pl.lit("kernel_wait"))
        .otherwise(pl.lit("other"))
    )
    # HTA quirk, kept for parity: a GPU event with no CPU partner gets index_correlation 0
    # and so takes the timestamp of the file's first event as its "launch" (when kept).
    origin = min(t.events["ts"].min() for t in loads if not t.events.is_empty())
    anchors = pl.DataFrame(
        {
            "trace": [i for i, t in enumerate(loads) if t.first_event_kept and not t.events.is_empty()],
            "anchor": [t.events["ts"][0] - origin for t in loads if t.first_event_kept and not t.events.is_empty()],
        },
        schema={"trace": pl.Int32, "anchor": pl.Int64},
    )
    return (
        kernels.join(runtime, on=["trace", "correlation"], how="left")
        .join(anchors, on="trace", how="left")
        .with_columns(pl.coalesce("ts_runtime", "anchor").alias("ts_runtime"))
        .sort("trace", "stream", "ts", maintain_order=True)
        # Materialized before use: evaluated inside when/then, the window saw other rows.
        .with_columns(pl.col("end").shift(1).over("trace", "stream").alias("prev_end"))
        .with_columns(gap=pl.col("ts") - pl.col("prev_end"))
        .with_columns(category.alias("idle_category"))
        .group_by("trace", "rank", "stream", "idle_category")
        .agg(pl.col("gap").sum().alias("idle_time_us"))
        .with_columns((pl.col("idle_time_us") / pl.col("idle_time_us").sum().over("trace", "stream")).alias("idle_time_ratio"))
        .sort("trace", "stream", "idle_category")
        .select(list(schema))
    )
