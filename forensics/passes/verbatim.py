"""Every quote is the cited line, verbatim: a finding's `text` is its line's text.

Notes:
    Catalog findings quote their line already. Passes also conclude things in words
    ("rank 37 last completed work #4408 while 63 other ranks reached #4409") and cite the
    line the conclusion rests on. Such a sentence is the tool speaking, not the log: it
    becomes the finding's `title`, and `text` becomes the cited line as read. A finding
    citing a line of a file read as data, not text (a CSV sample, an nvidia-smi -q
    block) keeps its title and quotes nothing (`text` null): the report then points to
    the line without putting words in its mouth. A finding that cites a file but no line
    (a profiler trace's conclusion) is all tool: its sentence becomes the title.
"""

from __future__ import annotations

import polars as pl


def quote_lines(findings: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """`findings` with `text` = the cited line's text, and any other sentence moved to `title`.

    A physical line split into pieces (at a carriage return, at a glued `[rankN]:`) keeps the
    piece a finding quotes; a finding that quotes none of them gets the line's first piece.
    """
    if findings.is_empty():
        return findings
    cited = lines.select("file", "line", "text").join(findings.select("file", "line").unique(), on=["file", "line"], how="semi")
    own_piece = findings.select("file", "line", "text").join(cited, on=["file", "line", "text"], how="semi").unique()
    first_piece = cited.unique(["file", "line"], keep="first", maintain_order=True).rename({"text": "_line_text"})
    joined = (
        findings.join(first_piece, on=["file", "line"], how="left", maintain_order="left")
        .join(own_piece.with_columns(_own=pl.lit(True)), on=["file", "line", "text"], how="left", maintain_order="left")
        .with_columns(_line_text=pl.when(pl.col("_own")).then(pl.col("text")).otherwise(pl.col("_line_text")))
    )
    lineless = pl.col("line").is_null() & pl.col("text").is_not_null() & (pl.col("text").str.strip_chars() != "")
    spoken = (pl.col("text").is_not_null() & pl.col("_line_text").is_not_null() & (pl.col("text") != pl.col("_line_text"))) | lineless
    return joined.with_columns(
        title=pl.when(spoken).then(pl.col("text")).otherwise(pl.col("title")),
        text=pl.col("_line_text"),
    ).drop("_line_text", "_own")
