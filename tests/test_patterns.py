"""Every pattern's examples hold under the real two-stage matcher, and the catalog lints clean."""

from __future__ import annotations

import pytest

from forensics.catalog import load_catalog
from forensics.catalog.validate import example_results, lint_pattern

CATALOG = load_catalog()


@pytest.mark.parametrize("pattern", CATALOG, ids=lambda p: p.id)
def test_pattern_examples(pattern):
    problems = example_results([pattern])
    assert not problems, "\n".join(map(str, problems))


@pytest.mark.parametrize("pattern", CATALOG, ids=lambda p: p.id)
def test_pattern_lints_clean(pattern):
    problems = lint_pattern(pattern)
    assert not problems, "\n".join(map(str, problems))
