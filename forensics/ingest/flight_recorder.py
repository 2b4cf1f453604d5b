"""PyTorch Flight Recorder dumps -> one row per recorded collective (formats.md 3).

A dump is one file per global rank, named `<prefix><rank>` with no extension, holding
a dict (`version`, `pg_config`, `pg_status`, `entries`, ...) as a pickle written by
TorchScript's pickler or as JSON. Pickles go through `safe_pickle`, which builds plain
data only: a dump that asks for anything else is refused and reported, never run.

Entries become the FR_ENTRIES frame (shapes and dtypes kept as strings, e.g.
`[[3, 4]]`, so they compare across ranks exactly like torchfrtrace compares them);
`pg_status` becomes FR_PG_STATUS (what each rank last enqueued/started/completed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from forensics.incident import FileStatus, SourceResult
from forensics.ingest.text import read_bytes
from forensics.safe_pickle import MAX_PICKLE_BYTES, load_plain
from forensics.schema import TIME, InputStatus, conform, empty

FR_ENTRIES: dict[str, pl.DataType] = {
    "file": pl.String,
    "rank": pl.Int32,  # global rank, from the file name
    "record_id": pl.Int64,
    "pg_id": pl.Int64,
    "pg_name": pl.String,  # process_group[0]: the PG GUID, same on every rank
    "pg_desc": pl.String,
    "collective_seq_id": pl.Int64,
    "p2p_seq_id": pl.Int64,
    "op_id": pl.Int64,
    "op": pl.String,  # profiling_name, e.g. nccl:all_reduce
    "input_sizes": pl.String,
    "output_sizes": pl.String,
    "input_dtypes": pl.String,
    "output_dtypes": pl.String,
    "state": pl.String,  # scheduled | started | completed
    "time_created": TIME,
    "retired": pl.Boolean,
    "timeout_ms": pl.Int64,
    "is_p2p": pl.Boolean,
    "stack": pl.String,  # innermost Python frame, "name at file:line"
}

FR_PG_STATUS: dict[str, pl.DataType] = {
    "file": pl.String,
    "rank": pl.Int32,
    "pg_name": pl.String,
    "pg_desc": pl.String,
    "pg_ranks": pl.String,  # pg_config ranks, verbatim: "[0, 1]"
    "last_enqueued": pl.Int64,
    "last_started": pl.Int64,
    "last_completed": pl.Int64,
    "version": pl.String,
}

_RAW_ENTRY: dict[str, pl.DataType] = {
    "record_id": pl.Int64,
    "pg_id": pl.Int64,
    "process_group": pl.List(pl.String),
    "collective_seq_id": pl.Int64,
    "p2p_seq_id": pl.Int64,
    "op_id": pl.Int64,
    "profiling_name": pl.String,
    "time_created_ns": pl.Int64,
    "input_sizes": pl.List(pl.List(pl.Int64)),
    "output_sizes": pl.List(pl.List(pl.Int64)),
    "input_dtypes": pl.List(pl.String),
    "output_dtypes": pl.List(pl.String),
    "state": pl.String,
    "retired": pl.Boolean,
    "timeout_ms": pl.Int64,
    "is_p2p": pl.Boolean,
    "frames": pl.List(pl.Struct({"name": pl.String, "filename": pl.String, "line": pl.Int64})),
}

_TRAILING_RANK = re.compile(r"(\d+)$")
_DUMP_KEYS = (b"pg_config", b"pg_status", b"entries", b"nccl_comm_state")
# TORCH_NCCL_TRACE_BUFFER_SIZE is a ring of a few thousand entries; more is not a real dump.
MAX_ENTRIES = 100_000


def sniff_flight_recorder(path: str | Path, head: bytes) -> bool:
    """Whether a file's (decompressed) head looks like an FR dump, pickle or JSON.

    A pickle must also carry a dump's name (`<prefix><rank>`): `model.pkl` holding an
    `entries` key is somebody's data, not a Flight Recorder dump.
    """
    if not head:
        return False
    keys = sum(key in head for key in _DUMP_KEYS)
    if head[:1] == b"\x80":  # pickle protocol >= 2; dumps are named <prefix><rank>, no extension
        return keys >= 1 and rank_of_dump(path) is not None
    if head.lstrip()[:1] == b"{":
        return b'"pg_config"' in head or (b'"entries"' in head and b'"version"' in head)
    return False


def rank_of_dump(path: str | Path) -> int | None:
    match = _TRAILING_RANK.search(Path(path).name)
    return int(match.group(1)) if match else None


def read_dump(path: Path, max_bytes: int = MAX_PICKLE_BYTES) -> tuple[dict | None, str | None]:
    """(dump dict, None) or (None, why it could not be used). Never raises on content."""
    try:
        payload = read_bytes(path, limit=max_bytes)
    except OSError as exc:
        return None, f"unreadable: {exc}"
    data = payload.data
    if payload.problem:
        return None, f"incomplete dump: {payload.problem}"
    if data.lstrip()[:1] == b"{":
        try:
            dump = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            return None, f"malformed JSON dump: {exc}"
    else:
        dump, problem = load_plain(data, max_bytes)
        if problem:
            return None, problem
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        return None, "not a Flight Recorder dump (no entries list)"
    return dump, None


def _clean(entry: Any) -> dict:
    """One entry with every field of the wrong type dropped (used only when a dump is odd)."""
    if not isinstance(entry, dict):
        return {}
    out = {}
    for key, dtype in _RAW_ENTRY.items():
        value = entry.get(key)
        try:
            pl.Series([value], dtype=dtype, strict=True)
        except Exception:  # noqa: BLE001 -- any mismatch means "drop this field"
            continue
        out[key] = value
    return out


def _shapes(col: str) -> pl.Expr:
    """list[list[int]] -> "[[3, 4], [5]]", the text torchfrtrace prints and compares."""
    inner = pl.lit("[") + pl.element().cast(pl.List(pl.String)).list.join(", ") + pl.lit("]")
    return pl.lit("[") + pl.col(col).list.eval(inner).list.join(", ") + pl.lit("]")


def _dtypes(col: str) -> pl.Expr:
    return pl.lit("[") + pl.col(col).list.join(", ") + pl.lit("]")


def entries_frame(dump: dict, file: str, rank: int | None) -> pl.DataFrame:
    """One FR_ENTRIES row per entry of the dump (its newest MAX_ENTRIES; the caller says when more were cut)."""
    entries = [e for e in dump.get("entries", [])[-MAX_ENTRIES:] if isinstance(e, dict)]
    if not entries:
        return empty(FR_ENTRIES)
    rows = [{**e, "process_group": list(e["process_group"])} if isinstance(e.get("process_group"), tuple) else e for e in entries]
    try:
        raw = pl.from_dicts(rows, schema=_RAW_ENTRY)
    except Exception:  # noqa: BLE001 -- a hand-edited or hostile dump: keep the well-typed fields
        raw = pl.from_dicts([_clean(e) for e in rows], schema=_RAW_ENTRY)
    frame = raw.select(
        pl.lit(file).alias("file"),
        pl.lit(rank, pl.Int32).alias("rank"),
        "record_id",
        "pg_id",
        pl.col("process_group").list.get(0, null_on_oob=True).alias("pg_name"),
        pl.col("process_group").list.get(1, null_on_oob=True).alias("pg_desc"),
        "collective_seq_id",
        "p2p_seq_id",
        "op_id",
        pl.col("profiling_name").alias("op"),
        _shapes("input_sizes").alias("input_sizes"),
        _shapes("output_sizes").alias("output_sizes"),
        _dtypes("input_dtypes").alias("input_dtypes"),
        _dtypes("output_dtypes").alias("output_dtypes"),
        "state",
        pl.from_epoch("time_created_ns", time_unit="ns").dt.cast_time_unit("us").dt.replace_time_zone("UTC").alias("time_created"),
        "retired",
        "timeout_ms",
        "is_p2p",
        pl.col("frames")
        .list.first()
        .struct.with_fields(
            (pl.field("name") + pl.lit(" at ") + pl.field("filename") + pl.lit(":") + pl.field("line").cast(pl.String)).alias("text")
        )
        .struct.field("text")
        .alias("stack"),
    )
    return conform(frame, FR_ENTRIES)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def pg_status_frame(dump: dict, file: str, rank: int | None) -> pl.DataFrame:
    config, status = _dict(dump.get("pg_config")), _dict(dump.get("pg_status"))
    rows = []
    for key in sorted(set(config) | set(status), key=str):
        cfg, st = _dict(config.get(key)), _dict(status.get(key))
        rows.append(
            {
                "file": file,
                "rank": rank,
                "pg_name": _str(cfg.get("name")) or str(key),
                "pg_desc": _str(cfg.get("desc")),
                "pg_ranks": _str(cfg.get("ranks")),
                "last_enqueued": _int(st.get("last_enqueued_collective")),
                "last_started": _int(st.get("last_started_collective")),
                "last_completed": _int(st.get("last_completed_collective")),
                "version": _str(dump.get("version")),
            }
        )
    return pl.DataFrame(rows, schema=FR_PG_STATUS) if rows else empty(FR_PG_STATUS)


def load_flight_recorder(root: Path, paths: list[str]) -> SourceResult:
    """Read the dumps at `paths` (relative to `root`) into `fr_entries` and `fr_pg_status`."""
    entries, statuses, status_rows = [], [], []
    for rel in sorted(paths):
        rank = rank_of_dump(rel)
        dump, problem = read_dump(root / rel)
        if dump is None:
            statuses.append(FileStatus(rel, InputStatus.SKIPPED, problem))
            continue
        frame = entries_frame(dump, rel, rank)
        entries.append(frame)
        status_rows.append(pg_status_frame(dump, rel, rank))
        notes = [] if rank is not None else ["no rank in the file name; entries kept without a rank"]
        if (count := len(dump.get("entries", []))) > MAX_ENTRIES:
            notes.append(f"{count:,} entries, over the {MAX_ENTRIES:,} a ring buffer holds: the newest {MAX_ENTRIES:,} read")
        note = "; ".join(notes) or None
        statuses.append(FileStatus(rel, InputStatus.PARSED if note is None else InputStatus.PARTIAL, note, frame.height))
    tables = {
        "fr_entries": pl.concat(entries) if entries else empty(FR_ENTRIES),
        "fr_pg_status": pl.concat(status_rows) if status_rows else empty(FR_PG_STATUS),
    }
    return SourceResult(tables=tables, statuses=statuses)
