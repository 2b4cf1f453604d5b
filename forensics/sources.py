"""Registry of the ingest steps and passes beyond text logs and the pattern catalog.

Each entry takes the Incident and a progress callback and merges its frames and
findings in. A failure inside one entry marks its files instead of ending the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from forensics.incident import Incident

Step = Callable[[Incident, Callable[[str], None]], None]

SOURCES: list[Step] = []
PASSES: list[Step] = []

# Markdown sections rendered from an incident's tables (collectives, GPU health, traces).
SECTIONS: list[Callable[[Incident], str | None]] = []

# Figure writers: (incident, figures directory) -> paths of the PNGs written.
FIGURES: list[Callable[[Incident, Path], list[Path]]] = []
