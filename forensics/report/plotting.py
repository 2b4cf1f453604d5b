"""matplotlib on demand: importing it costs a third of a second, and most reports draw nothing."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def pyplot() -> Any:
    """matplotlib.pyplot with the file-only Agg backend (no display is ever opened)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
