"""Lint the catalog: every example holds, literals are sound, regexes are safe.

A derived id is rejected when a module it names as `emitted_by` is missing or no
longer holds the id (the entry outlived the code), or when it lacks fixes.

A pattern is rejected when its regex does not compile under Polars' engine, when a
`match` example fails or a `no_match` example matches, when one of its literals is
missing from a `match` example (the prefilter would hide real hits), when a literal is
too short to be a useful prefilter, or when it lacks examples of either kind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from forensics.catalog.load import Derived, Pattern
from forensics.catalog.match import match_catalog

MIN_LITERAL_LENGTH = 5


@dataclass(frozen=True)
class Problem:
    pattern: str
    message: str

    def __str__(self) -> str:
        return f"{self.pattern}: {self.message}"


def _compiles(regex: str) -> str | None:
    try:
        pl.Series([""]).str.contains(regex)
    except Exception as exc:  # noqa: BLE001  Polars raises ComputeError with the engine's message
        return str(exc).splitlines()[0]
    return None


def lint_pattern(pattern: Pattern) -> list[Problem]:
    """Problems of one pattern on its own (shape, regex, literals)."""
    problems: list[Problem] = []

    def add(message: str) -> None:
        problems.append(Problem(pattern.id, message))

    if pattern.path is not None:
        expected = f"{pattern.id}-{pattern.name}.toml"
        if pattern.path.name != expected:
            add(f"file name should be {expected}")
    if not pattern.literals:
        add("needs at least one literal for the prefilter")
    for literal in pattern.literals:
        if len(literal) < MIN_LITERAL_LENGTH:
            add(f"literal {literal!r} is shorter than {MIN_LITERAL_LENGTH} characters")
    if error := _compiles(pattern.regex):
        add(f"regex does not compile: {error}")
        return problems
    if pattern.regex.startswith((".*", "(.*")):
        add("regex starts with .*: write it unanchored without the glue")
    if not pattern.match_examples:
        add("needs at least one 'match' example")
    if not pattern.no_match_examples:
        add("needs at least one 'no_match' example")
    for example in pattern.match_examples:
        if not any(lit in example for lit in pattern.literals):
            add(f"no literal occurs in match example {example[:60]!r}")
    if not pattern.immediate or not pattern.structural:
        add("needs immediate and structural fixes")
    groups = set(re.findall(r"\(\?P<(\w+)>", pattern.regex))
    for fix in pattern.immediate:
        if unknown := sorted(set(re.findall(r"\{(\w+)\}", fix)) - groups):
            add(f"fix names {', '.join(unknown)}, which the regex does not capture: {fix[:60]!r}")
    if all(re.search(r"\{\w+\}", fix) for fix in pattern.immediate):
        add("every immediate fix names a captured field: add one that always applies")
    return problems


def example_results(patterns: Sequence[Pattern]) -> list[Problem]:
    """Run every example through the real two-stage matcher, as analysis would."""
    problems: list[Problem] = []
    for pattern in patterns:
        for kind, examples in (("match", pattern.match_examples), ("no_match", pattern.no_match_examples)):
            if not examples:
                continue
            lines = pl.DataFrame({"file": ["example"] * len(examples), "line": list(range(1, len(examples) + 1)), "text": list(examples)})
            hit_lines = set(match_catalog(lines, [pattern])["line"].to_list())
            for index, example in enumerate(examples, start=1):
                matched = index in hit_lines
                if kind == "match" and not matched:
                    problems.append(Problem(pattern.id, f"match example does not match: {example[:80]!r}"))
                if kind == "no_match" and matched:
                    problems.append(Problem(pattern.id, f"no_match example matches: {example[:80]!r}"))
    return problems


def validate_catalog(patterns: Sequence[Pattern]) -> list[Problem]:
    problems = [problem for p in patterns for problem in lint_pattern(p)]
    broken = {p.pattern for p in problems if "does not compile" in p.message}
    problems += example_results([p for p in patterns if p.id not in broken])
    return problems


def validate_derived(entries: Sequence[Derived]) -> list[Problem]:
    """Each derived id is still emitted by the modules it names, and says what to do."""
    package_parent = Path(__file__).resolve().parents[2]
    problems: list[Problem] = []
    for entry in entries:
        if entry.path is not None and entry.path.name != f"{entry.id}-{entry.name}.toml":
            problems.append(Problem(entry.id, f"file name should be {entry.id}-{entry.name}.toml"))
        if not entry.emitted_by:
            problems.append(Problem(entry.id, "emitted_by names no module"))
        for module in entry.emitted_by:
            source = package_parent / module
            if not source.is_file():
                problems.append(Problem(entry.id, f"emitted_by module {module} does not exist"))
            elif f'"{entry.id}' not in source.read_text(encoding="utf-8"):
                problems.append(Problem(entry.id, f"{module} no longer emits {entry.id}"))
        if not entry.immediate or not entry.structural:
            problems.append(Problem(entry.id, "needs immediate and structural fixes"))
    return problems
