"""forensics: postmortems for failed, hung or slow distributed training runs.

The Python API is the CLI's own calls::

    import forensics

    analysis = forensics.analyze("incident/")          # load + analyze, as `forensics analyze`
    analysis.verdict.category, analysis.verdict.culprit_ranks
    analysis.incident.findings                           # polars frames (docs/frames.md)
    forensics.write_report(analysis, "out/", frames=True)  # postmortem.md, verdict.json, figures/

    incident = forensics.load_incident("incident/")     # discover + read only: inputs, lines
    analysis = forensics.analyze_incident(incident, forensics.load_catalog(["my_patterns/"]))
    markdown = forensics.render_markdown(analysis)

Names are imported on first use, so `import forensics` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> (module, attribute)
_API = {
    "analyze": ("forensics.flow", "analyze"),
    "load_incident": ("forensics.flow", "load_incident"),
    "analyze_incident": ("forensics.flow", "analyze_incident"),
    "Analysis": ("forensics.analysis", "Analysis"),
    "InputError": ("forensics.analysis", "InputError"),
    "Incident": ("forensics.incident", "Incident"),
    "Verdict": ("forensics.verdict", "Verdict"),
    "load_catalog": ("forensics.catalog.load", "load_full"),
    "Catalog": ("forensics.catalog.load", "Catalog"),
    "write_report": ("forensics.output", "write_report"),
    "render_markdown": ("forensics.report.markdown", "render_markdown"),
    "verdict_document": ("forensics.report.verdict_json", "verdict_document"),
    "FRAME_DOCS": ("forensics.schema", "FRAME_DOCS"),
    "SCHEMA_VERSION": ("forensics.schema", "SCHEMA_VERSION"),
}
__all__ = ["__version__", *_API]

if TYPE_CHECKING:
    from forensics.analysis import Analysis, InputError
    from forensics.catalog.load import Catalog
    from forensics.catalog.load import load_full as load_catalog
    from forensics.flow import analyze, analyze_incident, load_incident
    from forensics.incident import Incident
    from forensics.output import write_report
    from forensics.report.markdown import render_markdown
    from forensics.report.verdict_json import verdict_document
    from forensics.schema import FRAME_DOCS, SCHEMA_VERSION
    from forensics.verdict import Verdict


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'forensics' has no attribute {name!r}")
    module, attribute = _API[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
