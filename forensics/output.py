"""Write an analysis to OUT: postmortem.md, verdict.json, figures/, postmortem.html, frames/*.parquet.

Only fixed names under OUT are written: nothing derived from input file names or log
content becomes a path, so no input can direct a write outside OUT. Reports and frames
are written to a temporary name and renamed into place; a figure or section that fails
is left out and named in the report's analysis errors, so a run killed mid-write never
leaves a half verdict.json that looks whole. OUT/.forensics-written lists what the run
wrote; the next run into the same OUT removes exactly those files first (the figures
and frames of another incident must not linger) and nothing else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from forensics import __version__, sources
from forensics.analysis import Analysis
from forensics.report.html import render_html
from forensics.report.markdown import render_markdown
from forensics.report.verdict_json import render_json
from forensics.schema import SCHEMA_VERSION

FRAMES = ("inputs", "lines", "findings", "metrics", "ranks")
MANIFEST = ".forensics-written"


def write_report(analysis: Analysis, out: Path | str, frames: bool = False, html: bool = False, figures: bool = True) -> list[Path]:
    """Write postmortem.md, verdict.json, figures/ (unless not `figures`; postmortem.html with
    `html`, frames/ with `frames`) under `out`; return what was written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous(out)
    drawn: list[Path] = []
    figures_dir = out / "figures"
    for draw in sources.FIGURES if figures else ():
        figures_dir.mkdir(exist_ok=True)
        drawn += _isolated(analysis, draw.__name__, draw, analysis.incident, figures_dir) or []
    written = [out / "postmortem.md", out / "verdict.json"]
    sections = [text for render in sources.SECTIONS if (text := _isolated(analysis, render.__name__, render, analysis.incident))]
    markdown = render_markdown(analysis, drawn, sections)
    _atomic(written[0], lambda tmp: tmp.write_text(markdown, encoding="utf-8"))
    _atomic(written[1], lambda tmp: tmp.write_text(render_json(analysis), encoding="utf-8"))
    if html:
        written.append(out / "postmortem.html")
        page = render_html(markdown, f"Postmortem: {analysis.incident.root.name}", drawn)
        _atomic(written[-1], lambda tmp: tmp.write_text(page, encoding="utf-8"))
    if frames:
        frames_dir = out / "frames"
        frames_dir.mkdir(exist_ok=True)
        incident = analysis.incident
        named = {name: getattr(incident, name) for name in FRAMES} | dict(incident.tables)
        for name, frame in sorted(named.items()):
            if name.isidentifier():
                path = frames_dir / f"{name}.parquet"
                _atomic(path, partial(write_frame, frame, name))
                written.append(path)
    everything = written + drawn
    _atomic(out / MANIFEST, lambda tmp: tmp.write_text(json.dumps(sorted(p.relative_to(out).as_posix() for p in everything), indent=1)))
    return everything


def write_frame(frame: pl.DataFrame, name: str, path: Path) -> None:
    """One frame as Parquet, with the frame's name and SCHEMA_VERSION in the file metadata."""
    table = frame.to_arrow()
    metadata = {
        **(table.schema.metadata or {}),
        b"forensics.frame": name.encode(),
        b"forensics.schema_version": str(SCHEMA_VERSION).encode(),
        b"forensics.version": __version__.encode(),
    }
    pq.write_table(table.replace_schema_metadata(metadata), path)


def _isolated(analysis: Analysis, name: str, make: Callable[..., object], *args: object) -> object:
    """`make(*args)`, or None when it fails: one figure or section never takes the report down.

    The failure is recorded with the analysis errors, so the report says what is missing.
    """
    try:
        return make(*args)
    except Exception as exc:  # noqa: BLE001  a drawing or rendering bug on odd data must not cost the postmortem
        analysis.incident.step_errors.append(f"{name} failed: {type(exc).__name__}: {str(exc)[:200]}")
        return None


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Write through `write(tmp)` then rename over `path`: readers see the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _remove_previous(out: Path) -> None:
    """Delete the files an earlier run listed in OUT's manifest, and only those, inside OUT."""
    try:
        listed = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return
    root = out.resolve()
    for rel in listed if isinstance(listed, list) else []:
        if not isinstance(rel, str):
            continue
        path = (out / rel).resolve()
        if path.parent.is_relative_to(root) and path.is_file() and not path.is_symlink():
            path.unlink()
