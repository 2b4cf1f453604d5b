"""The format-derived and public fixtures are well-formed, and the generator reproduces the committed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.schema import Category
from tests.conftest import load_generator

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
    assert set(expected.get("acceptable_categories", [])) <= {c.value for c in Category}
    ranks = expected.get("culprit_ranks", [])
    # null: a rank started it, but the artifacts do not say which (not scored)
    assert ranks is None or (isinstance(ranks, list) and all(isinstance(r, int) and r >= 0 for r in ranks))
    assert all(isinstance(h, str) and h for h in expected.get("culprit_hosts", []))


@pytest.mark.parametrize("path", EXPECTED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_key_evidence_is_verbatim_in_the_incident(path):
    """Each key_evidence substring is on one line of one of the incident's files."""
    keys = json.loads(path.read_text()).get("key_evidence", [])
    texts = [f.read_text(errors="replace") for f in path.parent.iterdir() if f.is_file() and f.name not in ("expected.json", "SOURCE.md")]
    lines = [line for text in texts for line in text.splitlines()]
    assert all(any(key in line for line in lines) for key in keys), keys


@pytest.mark.parametrize("folder", PUBLIC, ids=lambda p: p.name)
def test_public_incident_cites_its_thread(folder):
    source = (folder / "SOURCE.md").read_text()
    url = json.loads((folder / "expected.json").read_text())["source"].removeprefix("public: ")
    assert url.startswith("https://github.com/") and url in source
    artifacts = [f for f in folder.iterdir() if f.name not in ("expected.json", "SOURCE.md")]
    assert artifacts and all(f.stat().st_size > 0 for f in artifacts)


RESERVED = FIXTURES.parent.parent / "shared" / "evaluation" / "reserved-threads.txt"


@pytest.mark.skipif(not RESERVED.exists(), reason=f"no reserved-threads list at {RESERVED}")
def test_no_public_incident_comes_from_a_reserved_thread():
    reserved = {line.strip().rstrip("/") for line in RESERVED.read_text().splitlines() if line.startswith("http")}
    used = {f.name: json.loads((f / "expected.json").read_text())["source"].removeprefix("public: ").rstrip("/") for f in PUBLIC}
    assert not {name: url for name, url in used.items() if url in reserved}


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
