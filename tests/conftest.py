"""Shared helpers: build incident folders and frames the way real runs leave them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import polars as pl
import pytest

from forensics.schema import FINDINGS, LINES, conform

GENERATORS = Path(__file__).resolve().parents[1] / "fixtures" / "generate"


def load_generator(name: str) -> ModuleType:
    """Import a fixture generator script (fixtures/generate/<name>.py) as a module."""
    spec = importlib.util.spec_from_file_location(name, GENERATORS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write `files` (relative path -> text or bytes) under `root`; return `root`."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def lines_frame(texts: list[str], file: str = "rank_0.log", rank: int | None = 0) -> pl.DataFrame:
    """A LINES frame holding `texts` as consecutive lines of one file and rank."""
    frame = pl.DataFrame({"file": file, "line": range(1, len(texts) + 1), "rank": rank, "text": texts})
    return conform(frame, LINES)


def findings_frame(rows: list[dict]) -> pl.DataFrame:
    """A FINDINGS frame from partial rows (missing columns are null)."""
    if not rows:
        return pl.DataFrame(schema=FINDINGS)
    keys = sorted({k for row in rows for k in row})
    return conform(pl.DataFrame([{k: row.get(k) for k in keys} for row in rows], infer_schema_length=None), FINDINGS)


@pytest.fixture
def incident(tmp_path: Path):
    """Factory: incident(files) -> a fresh incident folder under tmp_path."""
    counter = iter(range(1_000_000))

    def make(files: dict[str, str | bytes]) -> Path:
        return write_files(tmp_path / f"incident{next(counter)}", files)

    return make


def find_traces(directory: Path) -> list[Path]:
    """The trace files of a fixture folder (`*.json`, `*.json.gz`), sorted."""
    return sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
