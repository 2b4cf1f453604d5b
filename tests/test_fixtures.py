"""Every fixture incident's expected verdict holds (category and culprit ranks)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics.flow import analyze

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


DYNAMIC = [f for f in INCIDENTS if "dynamics" in _expected(f)]


@pytest.mark.parametrize("folder", DYNAMIC, ids=lambda p: p.name)
def test_dynamics_onset_and_period(folder, analyses):
    """The straggler's onset, its slow trace phase, the first bad numerics step and the period (with the event that explains it)."""
    want = _expected(folder)["dynamics"]
    tables = _analysis(folder, analyses).incident.tables
    if "straggler" in want:
        row = tables["stragglers"].filter(pl.col("rank") == want["straggler"]["rank"]).row(0, named=True)
        assert want["straggler"]["onset_from"] <= row["onset_step"] <= want["straggler"]["onset_to"], row
    if "trace_phase" in want:
        slow = tables["trace_phases"].filter(pl.col("kind") == "annotation").sort("excess_share", descending=True).row(0, named=True)
        assert slow["rank"] == want["trace_phase"]["rank"] and want["trace_phase"]["phase"] in slow["phase"].lower(), slow
        collectives = tables["trace_phases"].filter(pl.col("kind") == "collective").sort("per_step_ms").row(0, named=True)
        assert collectives["rank"] == want["trace_phase"]["rank"], "the slow rank waits least in collectives (mirror effect)"
        assert tables["trace_stragglers"]["rank"].to_list() == [want["trace_phase"]["rank"]]
    if "numerics" in want:
        first = tables["numerics"].filter(pl.col("kind") == want["numerics"]["kind"]).sort("step").row(0, named=True)
        assert want["numerics"]["onset_from"] <= first["step"] <= want["numerics"]["onset_to"], first
    if "period" in want:
        row = tables["periodicity"].row(0, named=True)
        assert row["period_steps"] == want["period"]["steps"]
        assert want["period"]["explained_by"] in (row["explained_by"] or "").lower()


@pytest.mark.parametrize("folder", [f for f in INCIDENTS if _expected(f)["category"] == "NO_FAILURE"], ids=lambda p: p.name)
def test_healthy_runs_show_no_straggler_and_no_numerical_anomaly(folder, analyses):
    tables = _analysis(folder, analyses).incident.tables
    assert tables["stragglers"].is_empty()
    assert tables["numerics"].is_empty()


def test_fixture_set_is_broad():
    categories = {_expected(f)["category"] for f in INCIDENTS}
    assert len(INCIDENTS) >= 12
    assert len(categories) >= 8


PUBLIC = sorted(p.parent for p in (ROOT / "public").glob("*/expected.json"))


def _quotes_are_verbatim(analysis) -> list[tuple]:
    """(file, line, quoted) for every evidence quote that is not its line's text."""
    pieces = set(analysis.incident.lines.select("file", "line", "text").iter_rows())  # a split line has several
    verdict = analysis.verdict
    rows = [e for h in verdict.hypotheses for e in h.evidence] + ([verdict.first_failure] if verdict.first_failure else []) + verdict.proofs
    wrong = [
        (e["file"], e["line"], e["text"]) for e in rows if e.get("text") is not None and (e["file"], e["line"], e["text"]) not in pieces
    ]
    return wrong


@pytest.mark.parametrize("folder", INCIDENTS + PUBLIC, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_quote_is_the_cited_line_verbatim(folder, analyses):
    assert _quotes_are_verbatim(_analysis(folder, analyses)) == []


def _advice_of_roles(roles: set[str]) -> set[str]:
    from forensics.catalog import load_catalog

    return {fix for p in load_catalog() if p.role in roles for fix in p.immediate}


@pytest.mark.parametrize("folder", INCIDENTS + PUBLIC, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_what_to_do_now_comes_first_and_never_from_cascade_or_teardown(folder, analyses):
    from forensics.report.markdown import render_markdown

    analysis = _analysis(folder, analyses)
    headings = [line for line in render_markdown(analysis).splitlines() if line.startswith("## ")]
    if "## What to do now" in headings:
        assert headings.index("## What to do now") == 0, headings
        immediate = analysis.verdict.hypotheses[0].fixes["immediate"]
        leading = _advice_of_roles({"initiating", "symptom"})
        assert not [f for f in immediate if f in _advice_of_roles({"cascade", "teardown"}) and f not in leading]


@pytest.mark.parametrize("folder", INCIDENTS + PUBLIC, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_finding_id_is_a_catalog_entry(folder, analyses):
    analysis = _analysis(folder, analyses)
    ids = analysis.incident.findings["pattern"].unique().to_list()
    assert [i for i in ids if analysis.catalog.entry(i) is None] == []
