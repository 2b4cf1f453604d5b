"""NCCL's error-return chains take the meaning of the WARN line that starts them.

When a NCCL call fails, NCCL prints one WARN line that names what failed, then one INFO line per
stack frame as the error code travels up (`init.cc:1012 -> 2`), all from the same process and
thread (`host:pid:tid [gpu]`). The catalog's generic chain patterns (NCCL019-NCCL023) read the
code alone (2, a system error, is taken for the network). Where a specific pattern matched the
same thread's WARN line shortly before, the chain is that failure unwinding and takes its
category: a container that hides GPUs from NVML is a setup problem even though it surfaces as
`-> 2`.

Enters: FINDINGS. Leaves: FINDINGS, chain rows re-categorised; nothing else changes.
"""

from __future__ import annotations

import polars as pl

CHAIN_PATTERNS = ["NCCL019", "NCCL020", "NCCL021", "NCCL022", "NCCL023"]
THREAD = r"(\S+:\d+:\d+) \[\d+\] "  # host:pid:tid [cuda device], as NCCL prefixes every line
MAX_CHAIN_LINES = 200  # a chain follows its WARN at once; further away it is another failure


def explain_chains(findings: pl.DataFrame) -> pl.DataFrame:
    """`findings` with each NCCL return-chain row given the category of its thread's WARN before it."""
    if findings.is_empty() or not findings["pattern"].is_in(CHAIN_PATTERNS).any():
        return findings
    keyed = findings.with_row_index("_row").with_columns(_thread=pl.col("text").str.extract(THREAD))
    warns = (
        keyed.filter(
            ~pl.col("pattern").is_in(CHAIN_PATTERNS)
            & pl.col("text").str.contains("NCCL WARN", literal=True)
            & pl.col("_thread").is_not_null()
        )
        .select("file", "_thread", _warn_line="line", _warn_category="category")
        .sort("_warn_line")
    )
    chains = keyed.filter(pl.col("pattern").is_in(CHAIN_PATTERNS) & pl.col("_thread").is_not_null()).sort("line")
    if warns.is_empty() or chains.is_empty():
        return findings
    explained = chains.join_asof(
        warns,
        left_on="line",
        right_on="_warn_line",
        by=["file", "_thread"],
        strategy="backward",
        tolerance=MAX_CHAIN_LINES,
        check_sortedness=False,  # both sides are sorted by line just above
    ).filter(pl.col("_warn_category").is_not_null())
    categories = explained.select("_row", "_warn_category")
    return (
        keyed.join(categories, on="_row", how="left")
        .with_columns(category=pl.coalesce("_warn_category", "category"))
        .sort("_row")
        .drop("_row", "_thread", "_warn_category")
    )
