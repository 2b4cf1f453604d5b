"""Flight Recorder dumps compared across ranks: who is missing from a collective, who ran another.

Notes:
    Like torchfrtrace, entries are matched across the ranks that dumped by (process group,
    collective_seq_id) (`_matched`): a rank whose last recorded collective is behind the
    others' is missing from the next one (missing_ranks), and ranks that recorded another
    op, input sizes or dtypes at one sequence number than the majority are mismatched.
    Members of a process group that left no dump at all while every rank that did dump waits
    in a collective it never completed are suspects too (`_without_dump`, no_dump), while
    they are fewer than the ranks that dumped. Rows name their ranks as ranges
    (passes/rank_ranges.py); localize_hang (passes/collectives.py) turns them into findings.
"""

from __future__ import annotations

import re

import polars as pl

from forensics.passes.rank_ranges import rank_ranges
from forensics.schema import empty

DEFAULT_PG = "default"
FR_MISMATCHES: dict[str, pl.DataType] = {
    "pg": pl.String,
    "seq": pl.Int64,
    "problem": pl.String,  # missing_ranks | no_dump | COLLECTIVE_TYPE_MISMATCH | SIZE_OR_SYNTAX_MISMATCH | DTYPE | STATE
    "ranks": pl.String,  # the odd ones out
    "expected": pl.String,  # what the majority recorded
    "found": pl.String,
}


def flight_recorder_mismatches(fr_entries: pl.DataFrame | None, fr_pg_status: pl.DataFrame | None) -> pl.DataFrame:
    """FR_MISMATCHES rows, by sequence number: both kinds of Notes."""
    if fr_entries is None or fr_entries.is_empty():
        return empty(FR_MISMATCHES)
    no_dump = _without_dump(fr_entries, fr_pg_status) if fr_pg_status is not None else empty(FR_MISMATCHES)
    return pl.concat([_matched(fr_entries), no_dump]).sort("seq", "pg")


def _matched(fr_entries: pl.DataFrame) -> pl.DataFrame:
    """torchfrtrace-style matching of collectives across the ranks that dumped."""
    coll = fr_entries.filter(~pl.col("is_p2p").fill_null(False) & pl.col("collective_seq_id").is_not_null())
    if coll.is_empty():
        return empty(FR_MISMATCHES)
    coll = coll.with_columns(pl.col("pg_name").fill_null(DEFAULT_PG))
    # One row per (pg, seq, rank): coalesced groups record several ops under one seq.
    per = coll.group_by("pg_name", "collective_seq_id", "rank").agg(
        pl.col("op").sort().str.join("+"), pl.col("input_sizes").str.join(";"),
        pl.col("input_dtypes").str.join(";"), pl.col("state").first(),
    )  # fmt: skip
    spans = coll.group_by("pg_name", "rank").agg(
        pl.col("collective_seq_id").min().alias("first"), pl.col("collective_seq_id").max().alias("last")
    )
    out: list[dict] = []
    for (pg,), ranks in spans.group_by("pg_name", maintain_order=True):
        members = set(ranks["rank"].to_list())
        top = ranks["last"].max()
        start = ranks["first"].max()  # older seqs may have left some ring buffers
        behind = ranks.filter(pl.col("last") < top).sort("rank")
        if not behind.is_empty():
            seq = behind["last"].min() + 1
            missing = behind.filter(pl.col("last") < seq)["rank"].to_list()
            present = per.filter((pl.col("pg_name") == pg) & (pl.col("collective_seq_id") == seq))
            out.append({"pg": pg, "seq": seq, "problem": "missing_ranks", "ranks": rank_ranges(missing),
                        "expected": present["op"].mode().sort().first() if present.height else None,
                        "found": f"last recorded #{behind['last'].min()}"})  # fmt: skip
        shared = per.filter((pl.col("pg_name") == pg) & (pl.col("collective_seq_id") >= start))
        for (seq,), group in shared.group_by("collective_seq_id", maintain_order=True):
            if group.height < 2 or set(group["rank"].to_list()) - members:
                continue
            for col, problem in (("op", "COLLECTIVE_TYPE_MISMATCH"), ("input_sizes", "SIZE_OR_SYNTAX_MISMATCH"),
                                 ("input_dtypes", "COLLECTIVE_DTYPE_MISMATCH")):  # fmt: skip
                if group[col].n_unique() < 2:
                    continue
                majority = group[col].mode().sort().first()
                odd = group.filter(pl.col(col) != majority)
                out.append({"pg": pg, "seq": seq, "problem": problem, "ranks": rank_ranges(odd["rank"].to_list()),
                            "expected": majority, "found": ", ".join(sorted(set(odd[col].to_list())))})  # fmt: skip
                break
    if not out:
        return empty(FR_MISMATCHES)
    return pl.DataFrame(out, schema=FR_MISMATCHES).sort("seq", "pg")


def _without_dump(fr_entries: pl.DataFrame, fr_pg_status: pl.DataFrame) -> pl.DataFrame:
    """Members of a PG (its pg_config ranks) that left no dump while every rank that did dump
    waits in a collective it never completed: the dump set's missing ranks are the suspects,
    while they are fewer than the ranks that dumped."""
    dumped = set(fr_entries["rank"].drop_nulls().to_list())
    configs = fr_pg_status["pg_ranks"].drop_nulls().to_list()
    world = max(configs, key=lambda ranks: len(re.findall(r"\d+", ranks)), default=None)
    # torch 2.13's gloo dumps key the default PG's config '' while its entries say '0': the
    # default PG spans the world, the widest rank list of any config.
    descs = fr_entries.select("pg_name", _desc="pg_desc").drop_nulls().unique("pg_name")
    status = (
        fr_pg_status.filter(pl.col("last_enqueued").is_not_null())
        .join(descs, on="pg_name", how="left")
        .with_columns(pg_ranks=pl.coalesce("pg_ranks", pl.when(pl.coalesce("pg_desc", "_desc") == "default_pg").then(pl.lit(world))))
    )
    out: list[dict] = []
    for (pg,), group in status.filter(pl.col("pg_ranks").is_not_null()).group_by("pg_name", maintain_order=True):
        members = {int(r) for r in re.findall(r"\d+", group["pg_ranks"][0])}
        absent = sorted(members - dumped)
        # Waiting: the rank's status says a collective is not complete, or its newest entry is not
        # (gloo's pg_status calls a timed-out collective completed; its entries stay `scheduled`).
        newest = fr_entries.filter(pl.col("pg_name") == pg).sort("collective_seq_id").group_by("rank").last()
        unfinished = set(newest.filter(pl.col("state") != "completed")["rank"].to_list())
        waiting = group.filter((pl.col("last_completed").fill_null(-1) < pl.col("last_enqueued")) | pl.col("rank").is_in(unfinished))
        # Suspects only while the dumps are most of the group: with most dumps missing, they were
        # not collected, and naming thousands of ranks says nothing.
        if not absent or len(absent) >= len(members & dumped) or waiting.height < group.height:
            continue
        seq = int(newest["collective_seq_id"].min()) if unfinished else int(waiting["last_completed"].fill_null(-1).min()) + 1
        ops = fr_entries.filter((pl.col("pg_name") == pg) & (pl.col("collective_seq_id") == seq))["op"]
        out.append({"pg": pg, "seq": seq, "problem": "no_dump", "ranks": rank_ranges(absent),
                    "expected": ops.mode().sort().first() if ops.len() else None,
                    "found": f"no dump, while ranks {rank_ranges(sorted(set(group['rank'].to_list())))} wait in it"})  # fmt: skip
    return pl.DataFrame(out, schema=FR_MISMATCHES) if out else empty(FR_MISMATCHES)
