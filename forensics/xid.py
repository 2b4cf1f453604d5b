"""The NVIDIA Xid catalog (forensics/data/xid_catalog.toml) as a frame and a lookup.

Kernel-log ingest joins Xid events to this frame to give each one a mnemonic, a
meaning and a fatal/severity judgement; the GPU-health pass turns those into findings.
Codes missing from the catalog stay unknown (null mnemonic) rather than guessed.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import polars as pl

from forensics.schema import Category, Role, Severity

XID_CATALOG: dict[str, pl.DataType] = {
    "xid": pl.Int32,
    "mnemonic": pl.String,
    "meaning": pl.String,
    "fatal": pl.Boolean,
    "severity": pl.String,
    "category": pl.String,
    "role": pl.String,
    "immediate": pl.String,
    "training": pl.String,
}


@dataclass(frozen=True)
class XidInfo:
    xid: int
    mnemonic: str
    meaning: str
    fatal: bool
    severity: str
    category: str
    role: str
    immediate: str
    training: str


def _validate(code: int, entry: dict) -> XidInfo:
    info = XidInfo(xid=code, **{k: entry[k] for k in XidInfo.__dataclass_fields__ if k != "xid"})
    if info.severity not in set(Severity) or info.category not in set(Category) or info.role not in set(Role):
        raise ValueError(f"xid_catalog.toml: Xid {code} has an unknown severity, category or role")
    return info


@lru_cache(maxsize=1)
def xid_catalog() -> dict[int, XidInfo]:
    """Every catalogued Xid code -> its entry (validated once, cached)."""
    text = resources.files("forensics").joinpath("data/xid_catalog.toml").read_text(encoding="utf-8")
    table = tomllib.loads(text)["xid"]
    return {int(code): _validate(int(code), entry) for code, entry in sorted(table.items(), key=lambda kv: int(kv[0]))}


def xid_frame() -> pl.DataFrame:
    """The catalog as a frame with XID_CATALOG columns, one row per code."""
    rows = [vars(info) for info in xid_catalog().values()]
    return pl.DataFrame(rows, schema=XID_CATALOG)
