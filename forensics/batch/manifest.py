"""A manifest names the incidents of a batch and what the logs cannot say about them.

Enters: a CSV or JSON file (a list of objects, or JSON lines) with a `path` column (relative
paths are taken from the manifest's folder) and optional `id`, `cluster`, `user`, `model`,
`world_size` and `start` (ISO 8601, UTC when it names no zone). Leaves: (path, id, metadata)
per row, in file order. The metadata goes into the index rows: columns logs never hold, and a
start and world size that win over the logs' (a log without a year is dated from its mtime).
Unknown columns are ignored; a missing `path` column or an unreadable file is an error for
the whole batch, a missing folder is that incident's error row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

META = ("cluster", "user", "model", "world_size", "start")


class ManifestError(ValueError):
    """The manifest cannot be used at all."""


@dataclass(frozen=True)
class Entry:
    path: Path
    incident_id: str | None
    meta: tuple[tuple[str, Any], ...]


def _frame(manifest: Path) -> pl.DataFrame:
    suffix = manifest.suffix.lower()
    try:
        if suffix == ".csv":
            return pl.read_csv(manifest, infer_schema=False)
        if suffix in (".jsonl", ".ndjson"):
            return pl.read_ndjson(manifest, infer_schema_length=None)
        if suffix == ".json":
            return pl.read_json(manifest, infer_schema_length=None)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ManifestError(f"cannot read manifest {manifest}: {exc}") from exc
    raise ManifestError(f"manifest {manifest}: expected .csv, .json or .jsonl")


def _start(value: Any) -> str | None:
    """ISO text as the index writes it (`2024-05-03T04:10:00Z`), or None when it is not a time."""
    if value is None or str(value).strip() == "":
        return None
    parsed = pl.Series([str(value).strip()]).str.to_datetime(time_zone="UTC", strict=False)
    if parsed.is_null().all():
        return None
    return parsed.dt.strftime("%Y-%m-%dT%H:%M:%SZ").item()


def _world_size(value: Any) -> int | None:
    try:
        size = int(str(value).strip())
    except ValueError:
        return None
    return size if size > 0 else None


def read_manifest(manifest: Path) -> list[Entry]:
    rows = _frame(manifest)
    if "path" not in rows.columns:
        raise ManifestError(f"manifest {manifest} has no 'path' column (columns: {', '.join(rows.columns) or 'none'})")
    entries = []
    for row in rows.cast(pl.String).iter_rows(named=True):
        if not row["path"]:
            continue
        path = Path(row["path"]).expanduser()
        meta = {name: row.get(name) for name in META if row.get(name) not in (None, "")}
        if "start" in meta:
            meta["start"] = _start(meta["start"])
        if "world_size" in meta:
            meta["world_size"] = _world_size(meta["world_size"])
        entries.append(
            Entry(
                path=path if path.is_absolute() else manifest.parent / path,
                incident_id=row.get("id") or None,
                meta=tuple((k, v) for k, v in meta.items() if v is not None),
            )
        )
    return entries


def with_meta(row: dict[str, Any], meta: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """The index row with the manifest's values, which win over what the logs suggest: they come
    from the scheduler, and a log without a year is dated from its file's mtime."""
    return row | dict(meta)
