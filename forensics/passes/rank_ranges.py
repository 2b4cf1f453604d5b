"""Rank lists as people read them: [0, 1, 2, 3, 7] <-> '0-3, 7'."""

from __future__ import annotations

from collections.abc import Iterable


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 3, 7, 9, 10] -> '0-3, 7, 9-10'."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def parse_ranges(text: str) -> list[int]:
    """'0-3, 7, 9-10' -> [0, 1, 2, 3, 7, 9, 10]: the inverse of rank_ranges."""
    out: list[int] = []
    for part in text.split(", "):
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out
