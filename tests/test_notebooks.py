"""Every notebook (jupytext percent format) is converted and executed in a real kernel.

The notebooks end with asserts on what they show, so a wrong analysis fails here, with
the failing cell's error, not only a notebook that crashes.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import nbclient
import pytest
from nbclient.exceptions import CellExecutionError

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.py"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython colours its tracebacks


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(notebook, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's tempfile.mkdtemp() outputs land in tmp_path
    nb = jupytext.read(notebook)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    failure = None
    try:
        client.execute()
    except CellExecutionError as exc:
        failure = ANSI.sub("", str(exc))
    if failure is not None:  # outside `except`: the cell's error alone, not a chained traceback
        pytest.fail(f"{notebook.name}: a cell failed\n{failure}", pytrace=False)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code_cells and all(cell.get("execution_count") for cell in code_cells), "every code cell ran"
    assert "assert " in code_cells[-1].source, f"{notebook.name} must end with checks"


def test_there_are_at_least_three_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"incident_frames", "trace_breakdown", "fleet_duckdb"}
    assert len(NOTEBOOKS) >= 3
