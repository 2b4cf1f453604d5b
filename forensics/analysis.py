"""What a finished analysis hands the report: the incident's frames, the verdict, the catalog."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from forensics.catalog.load import Catalog
from forensics.incident import Incident
from forensics.verdict import Verdict


@dataclass
class Analysis:
    incident: Incident
    verdict: Verdict
    catalog: Catalog
    world_size: int | None
    unmatched: pl.DataFrame


class InputError(ValueError):
    """The folder cannot be analyzed at all (missing, not a folder, nothing readable)."""
