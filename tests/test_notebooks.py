"""Every notebook (jupytext percent format, plain Python) runs top to bottom."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.py"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(notebook, monkeypatch):
    monkeypatch.chdir(notebook.parent)
    runpy.run_path(str(notebook), run_name="__main__")


def test_there_is_a_notebook():
    assert NOTEBOOKS
