"""Classify native crashes by where they happened: the failed assert's location or the backtrace's frames.

A native crash report (a failed C assert, a segfault caught by UCX or Open MPI) says how a
process died, not why. Its location often does: a segfault in `mz_zip_writer_add_mem` is
torch.save's checkpoint writer; `llmc/dataloader.h: dataloader_init: Assertion … failed`
is the data loader. This is tier 3 of the evidence for native code, as
`traceback_context` is for Python.

Notes:
    * Crash lines are the findings of NATIVE_CRASHES. Their location is the crash line
      itself (an assert names file and function) and the native frame lines (NATIVE_FRAME:
      `lib.so(symbol+0x..)`, c10's `frame #N:`, gdb's `#N 0x..`) of the same file and rank
      in the WINDOW lines that follow it.
    * The first matching entry of CONTEXTS decides; the finding cites the crash line and
      names the deciding frame in its captures. A crash line that a specific (non-UNKNOWN)
      pattern already explains is left alone.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

NATIVE_CRASHES = ["GEN010", "GEN015", "PY002"]
NATIVE_FRAME = r"\.so(?:\.\d+)*\([^)]*\)|frame #\d+:|^\s*#\d+\s+0x[0-9a-f]+"
WINDOW = 40
# (pattern id, category, title, locations that decide it)
CONTEXTS = [
    (
        "CTX007",
        "CHECKPOINT_IO",
        "Native crash inside checkpoint serialization (torch.save / torch.load's zip writer or reader)",
        r"mz_zip_(?:writer|reader)|PyTorchStream(?:Writer|Reader)|caffe2::serialize",
    ),
    ("CTX008", "DATA_PIPELINE", "Native crash or failed assert inside data-loading code", r"(?i)data_?loader|dataset"),
]


def classify_native_crashes(lines: pl.DataFrame, findings: pl.DataFrame) -> pl.DataFrame:
    """CTX007/CTX008 findings for native crash lines whose location names a subsystem (FINDINGS schema)."""
    crashes = findings.filter(pl.col("pattern").is_in(NATIVE_CRASHES))
    if crashes.is_empty():
        return empty(FINDINGS)
    explained = findings.filter(pl.col("category") != "UNKNOWN").select("file", "line").unique()
    crashes = crashes.join(explained, on=["file", "line"], how="anti").unique(["file", "line"])
    frames = lines.filter(pl.col("text").str.contains(NATIVE_FRAME)).select(
        "file", pl.col("rank").alias("frame_rank"), pl.col("line").alias("frame_line"), pl.col("text").alias("frame")
    )
    own_line = crashes.select("file", "line", frame_line=pl.col("line"), frame=pl.col("text"))
    below = (
        crashes.select("file", "line", "rank")
        .join(frames, on="file")
        .filter(
            (pl.col("frame_line") > pl.col("line"))
            & (pl.col("frame_line") <= pl.col("line") + WINDOW)
            & (pl.col("frame_rank").is_null() | pl.col("rank").is_null() | (pl.col("frame_rank") == pl.col("rank")))
        )
        .select("file", "line", "frame_line", "frame")
    )
    locations = pl.concat([own_line, below])
    hits = []
    for pattern, category, title, where in CONTEXTS:
        deciding = (
            locations.filter(pl.col("frame").str.contains(where)).sort("frame_line").group_by("file", "line", maintain_order=True).first()
        )
        hits.append(
            crashes.drop("pattern", "title", "category", "severity", "role", "captures")
            .join(deciding, on=["file", "line"])
            .with_columns(
                pattern=pl.lit(pattern),
                title=pl.lit(title),
                category=pl.lit(category),
                severity=pl.lit("error"),
                role=pl.lit("initiating"),
                captures=pl.struct("frame", "frame_line").struct.json_encode(),
            )
        )
    found = pl.concat(hits, how="diagonal_relaxed").unique(["file", "line"], keep="first", maintain_order=True)
    return conform(found, FINDINGS)
