"""Read `patterns/<family>/<ID>-<name>.toml` files into `Pattern` objects.

Loading checks only the shape of each file (fields present, right types); whether a
pattern is good (examples hold, literals are rare and required) is `validate`'s job.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from forensics.schema import Category, Role, Severity

TIERS = ("specific", "generic")
REQUIRED = ("id", "name", "title", "category", "severity", "role", "literals", "regex", "meaning")


class CatalogError(ValueError):
    """A pattern file that cannot be used at all."""


@dataclass(frozen=True)
class Pattern:
    id: str
    name: str
    title: str
    category: str
    severity: str
    role: str
    literals: tuple[str, ...]
    regex: str
    meaning: str
    causes: tuple[str, ...] = ()
    immediate: tuple[str, ...] = ()
    structural: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    match_examples: tuple[str, ...] = ()
    no_match_examples: tuple[str, ...] = ()
    # The line reports a job-wide quantity (an all-reduced loss, the loss scaler): the
    # rank that happens to print it (rank 0, the last rank) is not a culprit.
    rank_agnostic: bool = False
    # "specific": a known message. "generic": a family of messages (any `CUDA error: ...`,
    # any out-of-memory wording) that speaks only for lines no specific pattern explains.
    tier: str = "specific"
    path: Path | None = field(default=None, compare=False)

    @property
    def family(self) -> str:
        return self.path.parent.name if self.path else ""


def default_catalog_dir() -> Path:
    """The repo's patterns/ in a checkout, or the copy shipped inside the wheel."""
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir.parent / "patterns", package_dir / "_patterns"):
        if candidate.is_dir():
            return candidate
    raise CatalogError(f"no patterns/ directory next to {package_dir}")


def _strings(data: dict, key: str, path: Path) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CatalogError(f"{path}: '{key}' must be a list of strings")
    return tuple(value)


def load_pattern(path: Path) -> Pattern:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: not valid TOML: {exc}") from exc
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise CatalogError(f"{path}: missing {', '.join(missing)}")
    if data["category"] not in Category.__members__:
        raise CatalogError(f"{path}: unknown category {data['category']!r}")
    if data["role"] not in {r.value for r in Role}:
        raise CatalogError(f"{path}: unknown role {data['role']!r}")
    if data["severity"] not in {s.value for s in Severity}:
        raise CatalogError(f"{path}: unknown severity {data['severity']!r}")
    examples = data.get("examples", {})
    if not isinstance(data.get("rank_agnostic", False), bool):
        raise CatalogError(f"{path}: 'rank_agnostic' must be true or false")
    if data.get("tier", "specific") not in TIERS:
        raise CatalogError(f"{path}: 'tier' must be one of {', '.join(TIERS)}")
    return Pattern(
        id=data["id"],
        name=data["name"],
        title=data["title"],
        category=data["category"],
        severity=data["severity"],
        role=data["role"],
        literals=_strings(data, "literals", path),
        regex=data["regex"],
        meaning=data["meaning"].strip(),
        causes=_strings(data, "causes", path),
        immediate=_strings(data, "immediate", path),
        structural=_strings(data, "structural", path),
        references=_strings(data, "references", path),
        match_examples=_strings(examples, "match", path),
        no_match_examples=_strings(examples, "no_match", path),
        rank_agnostic=data.get("rank_agnostic", False),
        tier=data.get("tier", "specific"),
        path=path,
    )


def load_catalog(directory: Path | None = None) -> list[Pattern]:
    """All patterns under `directory`, sorted by id; duplicate ids are an error."""
    directory = directory or default_catalog_dir()
    patterns = [load_pattern(p) for p in sorted(directory.glob("*/*.toml"))]
    seen: dict[str, Path | None] = {}
    for pattern in patterns:
        if pattern.id in seen:
            raise CatalogError(f"duplicate id {pattern.id}: {seen[pattern.id]} and {pattern.path}")
        seen[pattern.id] = pattern.path
    return sorted(patterns, key=lambda p: p.id)
