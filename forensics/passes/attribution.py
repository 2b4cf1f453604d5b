"""Give a rank to findings whose line carries none, from what the line itself names.

Launcher lines (torchrun's agent and failure table, the OOM killer in dmesg) sit in
console or kernel logs without a rank prefix, yet name the worker: a `rank` capture is
the global rank; a `pid` capture maps through the pids that NCCL init lines and the
torchrun failure table tie to ranks; a `local_rank` capture is the global rank only on
a single-node job, so it is used only when at most one host is known.
A CUDA runtime message carries no rank either: the device-side assertion lines a kernel
prints (`IndexKernel.cu:93: ... Assertion ... failed.`) go straight to stderr, past the
launcher's prefix. When the next rank-tagged line of the file, within
NATIVE_RUN_MAX_LINES, opens a traceback, that rank printed them: the process that
raises is the one whose kernel failed (`attribute_native_runs`).
A Python traceback without a rank prefix is claimed by the worker a launcher names next to
it (`attribute_worker_tracebacks`), on a single node only (the launcher names a local rank):
torch.multiprocessing.spawn re-raises a worker's error after `-- Process N terminated with
the following error:`, so the traceback that opens on the next line is process N's; and
torchrun's agent reports `failed (exitcode: N) local_rank: K` right after the traceback of
the worker that raised (within AGENT_GAP lines: its SIGTERMs to the other workers come
between), so the last traceback ending before that line is worker K's. Process 0 is named only
where the job shows another process (a line of another rank, or torchrun closing another
worker): in a one-process job there is no worker to single out.
"""

from __future__ import annotations

import polars as pl

from forensics.ingest.nccl import process_ranks
from forensics.passes.frames import FRAME

NATIVE_RUN_MAX_LINES = 64  # a device assert prints one line per failing thread (up to a warp)
NATIVE_CATEGORIES = ["CUDA_ERROR", "CUDA_OOM"]
SPAWNED = r"^-- Process (\d+) terminated with the following error:"
AGENT_FAILED = r"failed \(exitcode: [1-9]\d*\) local_rank: (\d+)"
AGENT_GAP = 16


def pid_ranks(exits: pl.DataFrame | None, topology: pl.DataFrame | None) -> pl.DataFrame:
    """pid -> global rank, where exactly one rank claims the pid."""
    parts = [pl.DataFrame(schema={"pid": pl.Int64, "pid_rank": pl.Int32})]
    if exits is not None and not exits.is_empty():
        parts.append(exits.select(pl.col("pid").cast(pl.Int64), pid_rank=pl.col("rank").cast(pl.Int32)))
    if topology is not None and not topology.is_empty():
        parts.append(process_ranks(topology).select(pl.col("pid").cast(pl.Int64), pid_rank=pl.col("global_rank").cast(pl.Int32)))
    pairs = pl.concat(parts).drop_nulls().unique()
    return pairs.filter(pl.len().over("pid") == 1)


def known_hosts(lines: pl.DataFrame, exits: pl.DataFrame | None, topology: pl.DataFrame | None) -> set[str]:
    hosts = set(lines["host"].drop_nulls().unique().to_list()) if not lines.is_empty() else set()
    for frame in (exits, topology):
        if frame is not None and not frame.is_empty() and "host" in frame.columns:
            hosts |= {h.split(".")[0] for h in frame["host"].drop_nulls().unique().to_list()}
    return hosts


def attribute_ranks(findings: pl.DataFrame, pids: pl.DataFrame, single_node: bool) -> pl.DataFrame:
    if findings.is_empty():
        return findings
    captured = findings.with_columns(
        _rank=pl.col("captures").str.json_path_match("$.rank").cast(pl.Int32, strict=False),
        _local=pl.col("captures").str.json_path_match("$.local_rank").cast(pl.Int32, strict=False),
        _pid=pl.col("captures").str.json_path_match("$.pid").cast(pl.Int64, strict=False),
    ).join(pids, left_on="_pid", right_on="pid", how="left")
    local = pl.col("_local") if single_node else pl.lit(None, pl.Int32)
    return captured.with_columns(rank=pl.coalesce("rank", "_rank", "pid_rank", local)).drop("_rank", "_local", "_pid", "pid_rank")


def rank_hosts(lines: pl.DataFrame, exits: pl.DataFrame | None, topology: pl.DataFrame | None) -> pl.DataFrame:
    """rank -> short host name, from NCCL init lines, then the torchrun table, then line prefixes."""
    parts = []
    if topology is not None and not topology.is_empty():
        parts.append(process_ranks(topology).select(rank=pl.col("global_rank").cast(pl.Int32), host=pl.col("host"), source=pl.lit(0)))
    if exits is not None and not exits.is_empty():
        parts.append(exits.select(pl.col("rank").cast(pl.Int32), pl.col("host").str.split(".").list.first(), source=pl.lit(1)))
    if not lines.is_empty():
        parts.append(lines.select(pl.col("rank").cast(pl.Int32), pl.col("host"), source=pl.lit(2)))
    if not parts:
        return pl.DataFrame(schema={"rank": pl.Int32, "host": pl.String})
    return pl.concat(parts).drop_nulls(["rank", "host"]).sort("source").group_by("rank", maintain_order=True).agg(pl.col("host").first())


def fill_hosts(findings: pl.DataFrame, hosts: pl.DataFrame) -> pl.DataFrame:
    if findings.is_empty() or hosts.is_empty():
        return findings
    return (
        findings.join(hosts.rename({"host": "_host"}), on="rank", how="left", maintain_order="left")
        .with_columns(host=pl.coalesce("host", "_host"))
        .drop("_host")
    )


def attribute_native_runs(findings: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Rank for untagged CUDA runtime findings printed just before one rank's traceback (see module notes)."""
    orphans = findings.filter(pl.col("rank").is_null() & pl.col("category").is_in(NATIVE_CATEGORIES) & pl.col("line").is_not_null())
    if orphans.is_empty() or lines.is_empty():
        return findings
    tagged = (
        lines.filter(pl.col("rank").is_not_null())
        .select(
            "file",
            pl.col("line").alias("next_line"),
            next_rank="rank",
            opens_traceback=pl.col("text").str.contains("Traceback (most recent call last)", literal=True),
        )
        .sort("file", "next_line")
    )
    claimed = (
        orphans.select("file", "line")
        .unique()
        .sort("file", "line")
        .join_asof(tagged, left_on="line", right_on="next_line", by="file", strategy="forward", check_sortedness=False)
        .filter(pl.col("opens_traceback") & (pl.col("next_line") - pl.col("line") <= NATIVE_RUN_MAX_LINES))
        .select("file", "line", "next_rank")
    )
    native = pl.col("category").is_in(NATIVE_CATEGORIES)
    return (
        findings.join(claimed, on=["file", "line"], how="left", maintain_order="left")
        .with_columns(rank=pl.when(native).then(pl.coalesce("rank", "next_rank")).otherwise("rank"))
        .drop("next_rank")
    )


def attribute_worker_tracebacks(findings: pl.DataFrame, lines: pl.DataFrame, single_node: bool) -> pl.DataFrame:
    """Ranks for the findings of an untagged traceback that a launcher line names (see module notes)."""
    if not single_node or findings.is_empty() or lines.is_empty() or findings["rank"].is_not_null().all():
        return findings
    text = pl.col("text")
    untagged = lines.filter(pl.col("rank").is_null()).select("file", "line", "block")
    spawned = lines.filter(text.str.contains(SPAWNED)).select("file", block=pl.col("line") + 1, claim=text.str.extract(SPAWNED))
    agent = lines.filter(text.str.contains(AGENT_FAILED)).select("file", "line", claim=text.str.extract(AGENT_FAILED)).sort("file", "line")
    tracebacks = lines.filter(pl.col("rank").is_null() & text.str.contains(FRAME)).select("file", "block").unique()
    endings = (
        untagged.join(tracebacks, on=["file", "block"], how="semi")
        .group_by("file", "block")
        .agg(end=pl.col("line").max())
        .sort("file", "end")
    )
    reported = (
        agent.join_asof(endings, left_on="line", right_on="end", by="file", strategy="backward", check_sortedness=False)
        .filter(pl.col("line") - pl.col("end") <= AGENT_GAP)
        .select("file", "block", "claim")
    )
    claims = (
        pl.concat([spawned, reported])
        .join(untagged.select("file", "block").unique(), on=["file", "block"], how="semi")
        .with_columns(pl.col("claim").cast(pl.Int32))
        .unique(["file", "block"], keep="first", maintain_order=True)
    )
    several = lines.select((pl.col("rank") > 0).any() | text.str.contains(" closing signal SIG", literal=True).any()).item()
    claims = claims.filter((pl.col("claim") > 0) | several)
    if claims.is_empty():
        return findings
    owner = untagged.join(claims, on=["file", "block"]).select("file", "line", "claim")
    return (
        findings.join(owner, on=["file", "line"], how="left", maintain_order="left")
        .with_columns(rank=pl.coalesce("rank", "claim"))
        .drop("claim")
    )
