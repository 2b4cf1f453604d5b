"""Per-call NCCL logs (NCCL_DEBUG_SUBSYS=COLL): the process behind in a communicator's
operations, and the one calling another operation at the same count.

Notes:
    Every rank of a communicator issues the same collectives in the same order, so the
    communicator's operation counter (`opCount`) runs in step on all of them. From the
    `nccl_ops` table of ingest.nccl:
    - NCCLOP001 (COLLECTIVE_TIMEOUT, initiating): a strict minority of the processes
      logged their last call at a lower count than the rest: they never issued the
      operation the rest are in (the NVIDIA/nccl#1193 excerpt: one process at 139d while
      the others reached 139e).
    - NCCLOP002 (COLLECTIVE_TIMEOUT, initiating): at one count, a strict minority of the
      processes called another collective, or the same one with another element count or
      datatype (ROCm/rccl#429: rank 2 in AllGather where ranks 0, 1 and 3 ran AllReduce).
      Send and Recv pair different calls by design and are never compared.
    A communicator is the same across processes by its commId where Init lines name it,
    else by its size; a process with two communicators of one unnamed size blurs them,
    so such a size is left alone. A finding cites the process's call that decided it,
    with its global rank where the topology knows it.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, citing, empty

PROCESS = ["host", "pid"]
POINT_TO_POINT = ["Send", "Recv"]


def op_count_findings(ops: pl.DataFrame | None) -> pl.DataFrame:
    """NCCLOP001/NCCLOP002 findings (see Notes)."""
    if ops is None or ops.is_empty():
        return empty(FINDINGS)
    calls = _communicators(ops)
    return pl.concat([_behind(calls), _odd_call(calls)])


def _communicators(ops: pl.DataFrame) -> pl.DataFrame:
    """Calls with `group`: the commId, else the size where no process has two unnamed communicators of it."""
    group = pl.coalesce("comm_id", pl.format("nranks={}", "nranks"))
    calls = ops.filter(pl.col("op_count").is_not_null()).with_columns(group=group)
    blurred = (
        calls.filter(pl.col("comm_id").is_null())
        .group_by("group", *PROCESS)
        .agg(pl.col("comm").n_unique().alias("comms"))
        .filter(pl.col("comms") > 1)
        .select("group")
        .unique()
    )
    return calls.join(blurred, on="group", how="anti")


def _process() -> pl.Expr:
    """`process 615 on host (GPU 2)`: the process a call came from, as NCCL's header names it."""
    return pl.format(
        "process {} on {}{}",
        "pid",
        "host",
        pl.when(pl.col("cuda_dev").is_not_null()).then(pl.format(" (GPU {})", "cuda_dev")).otherwise(pl.lit("")),
    )


def _behind(calls: pl.DataFrame) -> pl.DataFrame:
    last = calls.sort("op_count", "line").group_by("group", *PROCESS, maintain_order=True).last()
    stats = last.group_by("group").agg(
        processes=pl.len(),
        highest=pl.col("op_count").max(),
        lowest=pl.col("op_count").min(),
        behind=(pl.col("op_count") == pl.col("op_count").min()).sum(),
    )
    minority = stats.filter((pl.col("lowest") < pl.col("highest")) & (pl.col("behind") * 2 < pl.col("processes")))
    rows = last.join(minority, on="group").filter(pl.col("op_count") == pl.col("lowest"))
    return citing(
        rows,
        pattern="NCCLOP001",
        title=pl.format(
            "{} logged its last NCCL call at operation {} while {} of {} processes reached {}: they wait for it",
            _process(),
            pl.col("op_count").map_elements(hex, return_dtype=pl.String),
            pl.col("processes") - pl.col("behind"),
            "processes",
            pl.col("highest").map_elements(hex, return_dtype=pl.String),
        ),
        category="COLLECTIVE_TIMEOUT",
        severity="error",
        role="initiating",
        captures=pl.struct("op", op_count="op_count", others_reached="highest", communicator="group").struct.json_encode(),
    )


def _odd_call(calls: pl.DataFrame) -> pl.DataFrame:
    collective = calls.filter(~pl.col("op").is_in(POINT_TO_POINT)).with_columns(
        signature=pl.format("{} count {} datatype {}", "op", "count", "datatype")
    )
    per_process = collective.sort("line").unique(["group", "op_count", *PROCESS], keep="first", maintain_order=True)
    at_count = ["group", "op_count"]
    tally = per_process.with_columns(
        same=pl.len().over(*at_count, "signature"),
        processes=pl.len().over(at_count),
        usual=pl.col("signature").mode().first().over(at_count),
    )
    odd = tally.filter((pl.col("processes") >= 3) & (pl.col("same") * 2 < pl.col("processes")))
    rows = odd.sort("op_count", "line").unique(["group", *PROCESS], keep="first", maintain_order=True)
    return citing(
        rows,
        pattern="NCCLOP002",
        title=pl.format(
            "{} called {} as operation {} where the others called {}: mismatched collectives",
            _process(),
            "signature",
            pl.col("op_count").map_elements(hex, return_dtype=pl.String),
            "usual",
        ),
        category="COLLECTIVE_TIMEOUT",
        severity="error",
        role="initiating",
        captures=pl.struct("signature", "usual", op_count="op_count", communicator="group").struct.json_encode(),
    )
