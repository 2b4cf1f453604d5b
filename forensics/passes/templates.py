"""Cluster error lines that no pattern explains into templates, for the UNKNOWN section.

Notes:
    A line is error-like when it holds an exception name, `Error`, an ERROR log level, `FATAL`, `failed` or
    `Traceback`-ending exception text. Numbers, hex ids, paths and quoted strings are
    masked so that the same message from 1,024 ranks becomes one template with a count
    and its first occurrence (file:line). No finding -> these are what a human reads.
"""

from __future__ import annotations

import polars as pl

ERROR_LIKE = (
    r"(?:\b[A-Z]\w*(?:Error|Exception)\b: |\bFATAL\b|\bfatal error\b|\b(?:Error|ERROR)\b[:\]]|"
    r"\bERROR(?: \[| - | \| )|"  # a logger's level: detectron2 `ERROR [12/20 18:16:20 d2.engine.train_loop]:`, `- ERROR -`, loguru `| ERROR |`
    r"\bfailed\b|\bSegmentation fault\b|\bAborted\b|\bcore dumped\b)"
)
NOISE = (
    r"CUDA kernel errors might be asynchronously|For debugging consider passing|Compile with `?TORCH_USE_CUDA_DSA"
    r"|frame #\d+: |^\S*\s+File \""  # stack frames are context of an exception, not errors themselves
)


def error_template(text: pl.Expr) -> pl.Expr:
    """The message with its launcher prefix and leading timestamp dropped and its numbers, hex ids, paths and
    quoted strings masked."""
    return (
        text.str.replace(r"^(?:\S*\[(?:rank|default)\d+\]:\s?)+", "")
        .str.replace_all(r"0x[0-9a-fA-F]+", "<hex>")
        .str.replace_all(r"(?:/[\w.\-]+){2,}", "<path>")
        .str.replace_all(r"'[^']*'|\"[^\"]*\"", "<str>")
        .str.replace_all(r"\d+(?:\.\d+)?", "<n>")
        .str.replace(r"^\[?<n>[-/]<n>[-/]<n>[ T]<n>:<n>:<n>(?:[.,]<n>)?(?:Z|[+-]<n>:?<n>)?\]?:?\s*", "")  # a leading date and time
        .str.replace(r"^[IWEF]<n> <n>:<n>:<n>(?:\.<n>)?\s+(?:<n>\s+)?", "")  # glog's `E0709 17:05:38.162555 1234 `
        .str.replace_all(r"\s+", " ")
        .str.strip_chars()
        .str.slice(0, 240)
    )


def unmatched_error_templates(lines: pl.DataFrame, findings: pl.DataFrame, limit: int = 20) -> pl.DataFrame:
    """(template, count, ranks, first file, first line, example text), most frequent first."""
    columns = {"template": pl.String, "count": pl.UInt32, "ranks": pl.UInt32, "file": pl.String, "line": pl.Int64, "text": pl.String}
    if lines.is_empty():
        return pl.DataFrame(schema=columns)
    explained = findings.select("file", "line").unique()
    errors = (
        lines.lazy()
        .filter(pl.col("text").str.contains(ERROR_LIKE) & ~pl.col("text").str.contains(NOISE))
        .join(explained.lazy(), on=["file", "line"], how="anti")
        .with_columns(template=error_template(pl.col("text")))
        .sort(["file", "line"])
        .group_by("template")
        .agg(
            count=pl.len(),
            ranks=pl.col("rank").n_unique(),
            file=pl.col("file").first(),
            line=pl.col("line").first(),
            text=pl.col("text").first(),
        )
        .sort(["count", "file", "line"], descending=[True, False, False])
        .head(limit)
        .collect()
    )
    return errors.select(list(columns)).cast(columns)
