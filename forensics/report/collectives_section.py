"""The "Collectives and NCCL" section of the postmortem, from frames already computed.

Renders only: where each group of ranks stopped (folded into rank ranges so 1,024
ranks fit on a screen), Flight Recorder mismatches, a compact NCCL picture (hosts x
ranks x GPUs, versions, transports) and the NCCL warnings by kind. Every value that
came from a log goes through `markup.cell`, so backticks, pipes and HTML in it cannot
break the page.
"""

from __future__ import annotations

import polars as pl

from forensics.report.markup import cell, plural, ranges, table, where

MAX_ROWS = 20


def _present(tables: dict[str, pl.DataFrame], name: str) -> pl.DataFrame | None:
    frame = tables.get(name)
    return frame if frame is not None and not frame.is_empty() else None


def _state(frame: pl.DataFrame) -> str:
    rows = [
        (
            cell(r["ranks"]),
            r["n_ranks"],
            cell(r["pg"]),
            cell(r["last_enqueued"]),
            cell(r["last_completed"]),
            cell(r["timed_out_seq"]),
            cell(r["op_type"]),
            cell(r["state"]),
        )  # fmt: skip
        for r in frame.head(MAX_ROWS).iter_rows(named=True)
    ]
    out = table(["ranks", "n", "PG", "last enqueued", "last completed", "timed out at", "op", "state"], rows)
    if frame.height > MAX_ROWS:
        out += f"\n\n{frame.height - MAX_ROWS} more groups of ranks are in `frames/collective_state.parquet`."
    return out


def _fr(frame: pl.DataFrame) -> str:
    rows = [
        (cell(r["pg"]), r["seq"], cell(r["problem"]), cell(r["ranks"]), cell(r["expected"]), cell(r["found"]))
        for r in frame.head(MAX_ROWS).iter_rows(named=True)
    ]
    return table(["PG", "collective #", "problem", "ranks", "others recorded", "these recorded"], rows)


def _nccl(tables: dict[str, pl.DataFrame]) -> list[str]:
    out: list[str] = []
    topology = _present(tables, "nccl_topology")
    versions = _present(tables, "nccl_versions")
    transports = _present(tables, "nccl_transports")
    facts = []
    if versions is not None:
        pairs = versions.select("nccl_version", "cuda_version").unique().sort("nccl_version", "cuda_version")
        text = ", ".join(f"NCCL {v} (CUDA {c})" for v, c in pairs.iter_rows())
        facts.append(cell(text) + (" — **versions differ across processes**" if pairs.height > 1 else ""))
    if transports is not None:
        used = transports.group_by("transport").agg(pl.col("host").n_unique().alias("hosts")).sort("transport")
        facts.append("transports: " + ", ".join(f"{cell(t)} ({plural(h, 'host')})" for t, h in used.iter_rows()))
    if topology is not None:
        world = topology["nranks"].max()
        hosts = topology["host"].n_unique()
        facts.append(f"largest communicator: {plural(world, 'rank')} on {plural(hosts, 'host')}")
    if facts:
        out.append("NCCL: " + "; ".join(facts) + ".")
    if topology is not None:
        default = topology.filter(pl.col("nranks") == topology["nranks"].max())
        per_host = default.group_by("host").agg(
            pl.col("rank").unique().sort(), pl.col("pci_bus_id").n_unique().alias("gpus"),
            pl.col("cuda_dev").unique().sort(),
        ).sort("host")  # fmt: skip
        rows = [
            (cell(r["host"]), cell(ranges(r["rank"])), r["gpus"], cell(ranges(r["cuda_dev"])))
            for r in per_host.head(MAX_ROWS).iter_rows(named=True)
        ]
        out.append(table(["host", "ranks", "GPUs", "CUDA devices"], rows))
        if per_host.height > MAX_ROWS:
            out.append(f"{per_host.height - MAX_ROWS} more hosts are in `frames/nccl_topology.parquet`.")
    return out


def _warns(frame: pl.DataFrame) -> str:
    kinds = (
        frame.sort("time", "file", "line", nulls_last=True)
        .group_by("kind", maintain_order=True)
        .agg(
            pl.col("rank").drop_nulls().unique().sort(),
            pl.col("file").first(),
            pl.col("line").first(),
            pl.col("msg").first(),
            pl.len().alias("n"),
        )  # fmt: skip
    )
    rows = [
        (cell(r["kind"]), r["n"], cell(ranges(r["rank"])) or "—", where(r["file"], r["line"]), cell(r["msg"]))
        for r in kinds.iter_rows(named=True)
    ]
    return table(["NCCL WARN kind", "lines", "ranks", "first", "first message"], rows)


def render_collectives(tables: dict[str, pl.DataFrame]) -> str:
    """Markdown for the collectives section; empty string when there is nothing to show."""
    parts: list[str] = []
    state = _present(tables, "collective_state")
    if state is not None:
        parts += ["### Where each rank stopped", _state(state)]
    fr = _present(tables, "fr_mismatches")
    if fr is not None:
        parts += ["### Flight Recorder: collectives the ranks disagree on", _fr(fr)]
    nccl = _nccl(tables)
    if nccl:
        parts += ["### NCCL", *nccl]
    warns = _present(tables, "nccl_warns")
    if warns is not None:
        parts += ["### NCCL warnings", _warns(warns)]
    if not parts:
        return ""
    return "\n\n".join(["## Collectives and NCCL", *parts]) + "\n"
