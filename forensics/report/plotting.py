"""matplotlib on demand: importing it costs a third of a second, and most reports draw nothing."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any


@cache
def pyplot() -> Any:
    """matplotlib.pyplot with the file-only Agg backend (no display is ever opened)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def time_axis(ax: Any) -> None:
    """Label a datetime x axis with clock times a reader can use (`17:05:38`, not `05:38.000000`):
    matplotlib's concise formatter, the date and hour in the offset where the ticks share them."""
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def save(fig: Any, out_dir: Path, name: str) -> Path:
    """Lay out `fig`, write it as out_dir/name (PNG, 100 dpi), close it; the path written."""
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
    return path
