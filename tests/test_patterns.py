"""Every pattern's examples hold under the real two-stage matcher, and the catalog lints clean."""

from __future__ import annotations

import dataclasses

import pytest

from forensics.catalog import load_catalog
from forensics.catalog.validate import example_results, lint_pattern
from forensics.flow import analyze

CATALOG = load_catalog()


@pytest.mark.parametrize("pattern", CATALOG, ids=lambda p: p.id)
def test_pattern_examples(pattern):
    problems = example_results([pattern])
    assert not problems, "\n".join(map(str, problems))


@pytest.mark.parametrize("pattern", CATALOG, ids=lambda p: p.id)
def test_pattern_lints_clean(pattern):
    problems = lint_pattern(pattern)
    assert not problems, "\n".join(map(str, problems))


def test_a_fix_may_name_only_what_the_regex_captures_and_one_fix_must_always_apply():
    oom = next(p for p in load_catalog() if p.id == "OOM001")
    assert not lint_pattern(oom)
    typo = dataclasses.replace(oom, immediate=("Free {freee} more", *oom.immediate[1:]))
    assert any("freee" in str(problem) for problem in lint_pattern(typo))
    only_filled = dataclasses.replace(oom, immediate=("Ask for less than {requested}",))
    assert any("always applies" in str(problem) for problem in lint_pattern(only_filled))


@pytest.mark.parametrize(
    ("line", "first_fix"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.20 GiB is free.",
            "The step asked for 2.00 GiB with 1.20 GiB of 79.11 GiB free",
        ),
        # The pre-2.0 wording names no free memory: the sized advice is left out, the generic one leads.
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.62 GiB already allocated)",
            "Lower the micro-batch size",
        ),
    ],
)
def test_advice_uses_what_the_line_captured_and_only_when_it_did(tmp_path, line, first_fix):
    (tmp_path / "rank_0.log").write_text(line + "\n")
    fixes = analyze(tmp_path).verdict.hypotheses[0].fixes["immediate"]
    assert fixes[0].startswith(first_fix)
