"""Write an analysis to OUT: postmortem.md, verdict.json, figures/, frames/*.parquet.

Only fixed names under OUT are written: nothing derived from input file names or log
content becomes a path, so no input can direct a write outside OUT.
"""

from __future__ import annotations

from pathlib import Path

from forensics import sources
from forensics.analyze import Analysis
from forensics.report.markdown import render_markdown
from forensics.report.verdict_json import render_json

FRAMES = ("inputs", "lines", "findings", "metrics", "ranks")


def write_report(analysis: Analysis, out: Path, frames: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    figures_dir = out / "figures"
    for stale in figures_dir.glob("*.png") if figures_dir.is_dir() else []:
        stale.unlink()  # a re-run into the same OUT must not show the last input's figures
    figures: list[Path] = []
    for draw in sources.FIGURES:
        figures_dir.mkdir(exist_ok=True)
        figures += draw(analysis.incident, figures_dir)
    written = [out / "postmortem.md", out / "verdict.json"]
    sections = [text for render in sources.SECTIONS if (text := render(analysis.incident))]
    written[0].write_text(render_markdown(analysis, figures, sections), encoding="utf-8")
    written[1].write_text(render_json(analysis), encoding="utf-8")
    if frames:
        frames_dir = out / "frames"
        frames_dir.mkdir(exist_ok=True)
        incident = analysis.incident
        named = {name: getattr(incident, name) for name in FRAMES} | dict(incident.tables)
        for name, frame in sorted(named.items()):
            if name.isidentifier():
                path = frames_dir / f"{name}.parquet"
                frame.write_parquet(path)
                written.append(path)
    return written + figures
