"""Ids made by passes are catalog entries too (patterns/derived/), and stay in step with the code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import regex

from forensics.catalog import load_full
from forensics.catalog.load import CatalogError, load_derived, load_derived_entry
from forensics.catalog.validate import validate_derived

PACKAGE = Path(__file__).resolve().parents[1] / "forensics"
# A finding id as code spells it: OOM001, HANG006, GPU-ECC-UNCORRECTABLE, TRACE-STRAGGLER, GPU-XID (+ code).
FINDING_ID = regex.compile(r"(?:[A-Z]{2,}[0-9]{3}|(?:GPU|TRACE|PCIE|KERN)(?:-[A-Z]{2,})+)")


def _id_literals() -> dict[str, str]:
    """Every string constant in the package that is spelled like a finding id, with its module."""
    found: dict[str, str] = {}
    for module in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and FINDING_ID.fullmatch(node.value):
                found.setdefault(node.value, str(module.relative_to(PACKAGE.parent)))
    return found


def test_every_id_the_code_spells_is_in_the_catalog():
    catalog = load_full()
    literals = _id_literals()
    assert len(literals) > 40  # the scan sees the pass-made ids at all
    assert {i: m for i, m in literals.items() if catalog.entry(i) is None} == {}


def test_derived_entries_name_the_modules_that_emit_them():
    assert validate_derived(load_derived()) == []


def test_numbered_entry_names_its_codes_only():
    catalog = load_full()
    assert catalog.entry("GPU-XID79").id == "GPU-XID"
    assert catalog.entry("gpu-xid13").id == "GPU-XID"
    assert catalog.entry("GPU-XIDX") is None
    assert catalog.entry("HANG001").id == "HANG001"
    assert catalog.entry("HANG0011") is None


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_derived_entry_with_a_regex_is_refused(tmp_path):
    entry = _write(
        tmp_path / "X001-x.toml",
        'id = "X001"\nname = "x"\ntitle = "t"\nmeaning = "m"\nemitted_by = ["forensics/verdict.py"]\n'
        'immediate = ["a"]\nstructural = ["b"]\nregex = "x"\n',
    )
    with pytest.raises(CatalogError, match="no regex"):
        load_derived_entry(entry)


def test_a_stale_derived_entry_is_a_problem(tmp_path):
    entry = load_derived_entry(
        _write(
            tmp_path / "NOPE001-gone.toml",
            'id = "NOPE001"\nname = "gone"\ntitle = "t"\nmeaning = "m"\nemitted_by = ["forensics/verdict.py", "forensics/missing.py"]\n'
            'immediate = ["a"]\nstructural = ["b"]\n',
        )
    )
    problems = [str(p) for p in validate_derived([entry])]
    assert "NOPE001: forensics/verdict.py no longer emits NOPE001" in problems
    assert "NOPE001: emitted_by module forensics/missing.py does not exist" in problems
