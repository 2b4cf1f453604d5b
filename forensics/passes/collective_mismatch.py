"""Name the rank that called a different collective, from DETAIL fingerprint-mismatch errors.

Notes:
    With TORCH_DISTRIBUTED_DEBUG=DETAIL each rank that meets a peer running another
    collective raises `Detected mismatch ... Rank A is running ..., but Rank B is running
    ...` (pattern DIST023), naming itself (A) and the first differing peer (B). The odd
    one out is named by most ranks, while it names somebody else: in a 4-rank job where
    rank 1 ran ALLGATHER, ranks 0, 2 and 3 name rank 1 and rank 1 names rank 0. The
    culprit is the rank named by the most distinct other ranks; a tie names no one, and
    so does a single accusation: "A differs from B" says as much about A as about B.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

MISMATCH_PATTERN = "DIST023"


def odd_rank_out(findings: pl.DataFrame) -> pl.DataFrame:
    mismatches = findings.filter(pl.col("pattern") == MISMATCH_PATTERN).with_columns(
        reporter=pl.col("captures").str.json_path_match("$.rank").cast(pl.Int32, strict=False),
        named=pl.col("captures").str.json_path_match("$.other_rank").cast(pl.Int32, strict=False),
        own_op=pl.col("captures").str.json_path_match("$.op"),
        named_op=pl.col("captures").str.json_path_match("$.other_op"),
        seq=pl.col("captures").str.json_path_match("$.seq"),
    )
    if mismatches.is_empty():
        return empty(FINDINGS)
    votes = (
        mismatches.drop_nulls(["reporter", "named"])
        .group_by("named")
        .agg(
            voters=pl.col("reporter").n_unique(),
            named_op=pl.col("named_op").mode().first(),
            others_op=pl.col("own_op").mode().first(),
            seq=pl.col("seq").first(),
        )
        .sort(["voters", "named"], descending=[True, False])
    )
    if votes.is_empty() or votes["voters"][0] < 2 or (votes.height > 1 and votes["voters"][0] == votes["voters"][1]):
        return empty(FINDINGS)
    winner = votes.row(0, named=True)
    culprit = winner["named"]
    # Cite the culprit's own mismatch line when it logged one, else the first line naming it.
    cited = (
        mismatches.sort((pl.col("reporter") != culprit), "file", "line")
        .filter((pl.col("reporter") == culprit) | (pl.col("named") == culprit))
        .head(1)
    )
    text = (
        f"rank {culprit} ran {winner['named_op']} where {winner['voters']} other {'rank' if winner['voters'] == 1 else 'ranks'}"
        f" ran {winner['others_op']}"
        f" (collective #{winner['seq']}): named by its peers' fingerprint-mismatch errors"
    )
    return conform(
        cited.with_columns(
            pattern=pl.lit("DESYNC002"),
            title=pl.lit(f"Rank {culprit} called a different collective than its peers"),
            category=pl.lit("COLLECTIVE_TIMEOUT"),
            severity=pl.lit("critical"),
            role=pl.lit("initiating"),
            rank=pl.lit(culprit, pl.Int32),
            host=pl.lit(None, pl.String),
            text=pl.lit(text),
            captures=pl.struct(
                voters=pl.lit(winner["voters"]), op=pl.lit(winner["named_op"]), others_op=pl.lit(winner["others_op"])
            ).struct.json_encode(),
        ),
        FINDINGS,
    )
