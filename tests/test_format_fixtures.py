"""The format-derived and public fixtures are well-formed, and the generator reproduces the committed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_generator
from forensics.schema import Category

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GENERATOR = FIXTURES / "generate" / "make_format_incidents.py"
STATES = {"crashed", "hung", "slow", "diverged", "healthy", "unknown"}
EXPECTED = sorted(FIXTURES.glob("incidents/*/expected.json")) + sorted(FIXTURES.glob("public/*/expected.json"))
PUBLIC = sorted(p.parent for p in FIXTURES.glob("public/*/expected.json"))


def _generator():
    return load_generator("make_format_incidents")


@pytest.mark.parametrize("path", EXPECTED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_expected_json_follows_the_contract(path):
    expected = json.loads(path.read_text())
    assert expected["category"] in {c.value for c in Category}
    assert expected["state"] in STATES
    ranks = expected.get("culprit_ranks", [])
    assert isinstance(ranks, list) and all(isinstance(r, int) and r >= 0 for r in ranks)
    assert all(isinstance(h, str) and h for h in expected.get("culprit_hosts", []))


@pytest.mark.parametrize("folder", PUBLIC, ids=lambda p: p.name)
def test_public_incident_cites_its_thread(folder):
    source = (folder / "SOURCE.md").read_text()
    url = json.loads((folder / "expected.json").read_text())["source"].removeprefix("public: ")
    assert url.startswith("https://github.com/") and url in source
    assert (folder / "console.log").stat().st_size > 0


def test_public_set_is_broad():
    categories = {json.loads((f / "expected.json").read_text())["category"] for f in PUBLIC}
    assert len(PUBLIC) >= 6
    assert len(categories) >= 6


def test_generator_reproduces_committed_fixtures(tmp_path):
    _generator().main(tmp_path)
    made = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    assert made, "generator wrote nothing"
    for rel in sorted(made):
        committed = FIXTURES / "incidents" / rel
        assert committed.read_bytes() == (tmp_path / rel).read_bytes(), f"{rel} differs from the generator output"


def test_hostile_fixture_lists_every_file():
    folder = FIXTURES / "incidents" / "hostile_mixed_encodings"
    listed = set(json.loads((folder / "expected.json").read_text())["inputs"])
    on_disk = {p.name for p in folder.iterdir()} - {"expected.json"}
    assert listed == on_disk
