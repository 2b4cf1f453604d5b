"""What every step needs: reading an input file as text, and the Step record itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forensics.incident import Incident
from forensics.ingest.text import decode, read_bytes

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    """A named pipeline step; `kinds` are the input kinds whose files it reads (if any)."""

    name: str
    run: Callable[[Incident, Progress], None]
    kinds: tuple[str, ...] = ()


def read_text(root: Path, path: str) -> tuple[str, str | None]:
    """Decoded text of an input file and the problem met reading it (None when clean)."""
    payload = read_bytes(root / path)
    text, _ = decode(payload.data)
    return text, payload.problem
