"""Every fixture incident's expected verdict holds (category and culprit ranks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.analyze import analyze

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
INCIDENTS = sorted(p.parent for p in (ROOT / "incidents").glob("*/expected.json"))


def _expected(folder: Path) -> dict:
    return json.loads((folder / "expected.json").read_text())


@pytest.fixture(scope="module")
def analyses():
    return {}


def _analysis(folder: Path, cache: dict):
    if folder not in cache:
        cache[folder] = analyze(folder)
    return cache[folder]


@pytest.mark.parametrize("folder", INCIDENTS, ids=lambda p: p.name)
def test_category(folder, analyses):
    expected = _expected(folder)
    verdict = _analysis(folder, analyses).verdict
    assert verdict.category == expected["category"], verdict.summary


@pytest.mark.parametrize("folder", INCIDENTS, ids=lambda p: p.name)
def test_culprit_ranks(folder, analyses):
    expected = _expected(folder)
    if "culprit_ranks" not in expected:
        pytest.skip("fixture states no culprit ranks")
    verdict = _analysis(folder, analyses).verdict
    assert sorted(verdict.culprit_ranks) == sorted(expected["culprit_ranks"]), verdict.summary


@pytest.mark.parametrize("folder", INCIDENTS, ids=lambda p: p.name)
def test_state(folder, analyses):
    verdict = _analysis(folder, analyses).verdict
    assert verdict.state == _expected(folder)["state"], verdict.summary


@pytest.mark.parametrize("folder", INCIDENTS, ids=lambda p: p.name)
def test_every_input_accounted_for(folder, analyses):
    incident = _analysis(folder, analyses).incident
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}
    listed = set(incident.inputs["path"].to_list())
    assert on_disk == listed
    assert incident.inputs["status"].null_count() == 0


def test_fixture_set_is_broad():
    categories = {_expected(f)["category"] for f in INCIDENTS}
    assert len(INCIDENTS) >= 12
    assert len(categories) >= 8
