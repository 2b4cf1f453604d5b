"""Read `patterns/<family>/<ID>-<name>.toml` files into `Pattern` and `Derived` objects.

Loading checks only the shape of each file (fields present, right types); whether a
pattern is good (examples hold, literals are rare and required) is `validate`'s job.
`patterns/derived/` holds the ids that passes make from frames rather than from one line
(HANG001, GPU-XID79, STACK003, ...): what they mean and what to do, with no regex.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forensics.schema import Category, Role, Severity

TIERS = ("specific", "generic")
REQUIRED = ("id", "name", "title", "category", "severity", "role", "literals", "regex", "meaning")
DERIVED_DIR = "derived"
DERIVED_REQUIRED = ("id", "name", "title", "meaning", "emitted_by", "immediate", "structural")


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
    # The line reports processes waiting for something that never comes (resources left pending):
    # with nothing dying, the job hung.
    waits: bool = False
    # "specific": a known message. "generic": a family of messages (any `CUDA error: ...`,
    # any out-of-memory wording) that speaks only for lines no specific pattern explains.
    tier: str = "specific"
    path: Path | None = field(default=None, compare=False)

    @property
    def family(self) -> str:
        return self.path.parent.name if self.path else ""


@dataclass(frozen=True)
class Derived:
    """A finding id a pass emits: its meaning and advice. The pass sets category, role and
    severity from what it saw; `category` here is the usual one, "" when it varies.
    `numbered`: the emitted id is this id followed by a number (GPU-XID + 79)."""

    id: str
    name: str
    title: str
    meaning: str
    emitted_by: tuple[str, ...]
    category: str = ""
    causes: tuple[str, ...] = ()
    immediate: tuple[str, ...] = ()
    structural: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    numbered: bool = False
    rank_agnostic: bool = False
    # The finding is about a host itself (a port down), not a rank: the verdict names that host.
    host_fault: bool = False
    # The finding says processes wait for something that never comes: with nothing dying, the job hung.
    waits: bool = False
    path: Path | None = field(default=None, compare=False)
    tier = "derived"  # neither a known message nor a message family: a pass's conclusion

    def names(self, finding_id: str) -> bool:
        """True when `finding_id` is this entry's id (or, if numbered, the id plus a number)."""
        if finding_id == self.id:
            return True
        return self.numbered and finding_id.startswith(self.id) and finding_id[len(self.id) :].isdigit()


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


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: not valid TOML: {exc}") from exc


def load_pattern(path: Path) -> Pattern:
    data = _read(path)
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
    for flag in ("rank_agnostic", "waits"):
        if not isinstance(data.get(flag, False), bool):
            raise CatalogError(f"{path}: '{flag}' must be true or false")
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
        waits=data.get("waits", False),
        tier=data.get("tier", "specific"),
        path=path,
    )


def load_derived_entry(path: Path) -> Derived:
    data = _read(path)
    missing = [key for key in DERIVED_REQUIRED if key not in data]
    if missing:
        raise CatalogError(f"{path}: missing {', '.join(missing)}")
    if "regex" in data or "literals" in data:
        raise CatalogError(f"{path}: a derived id is made by a pass; it has no regex or literals")
    category = data.get("category", "")
    if category and category not in Category.__members__:
        raise CatalogError(f"{path}: unknown category {category!r}")
    for flag in ("numbered", "rank_agnostic", "host_fault", "waits"):
        if not isinstance(data.get(flag, False), bool):
            raise CatalogError(f"{path}: '{flag}' must be true or false")
    return Derived(
        id=data["id"],
        name=data["name"],
        title=data["title"],
        meaning=data["meaning"].strip(),
        emitted_by=_strings(data, "emitted_by", path),
        category=category,
        causes=_strings(data, "causes", path),
        immediate=_strings(data, "immediate", path),
        structural=_strings(data, "structural", path),
        references=_strings(data, "references", path),
        numbered=data.get("numbered", False),
        rank_agnostic=data.get("rank_agnostic", False),
        host_fault=data.get("host_fault", False),
        waits=data.get("waits", False),
        path=path,
    )


def _unique(entries: list, kind: str) -> list:
    seen: dict[str, Path | None] = {}
    for entry in entries:
        if entry.id in seen:
            raise CatalogError(f"duplicate {kind} id {entry.id}: {seen[entry.id]} and {entry.path}")
        seen[entry.id] = entry.path
    return sorted(entries, key=lambda e: e.id)


def load_catalog(directory: Path | None = None) -> list[Pattern]:
    """All line patterns under `directory` (every family but derived/), sorted by id;
    duplicate ids are an error."""
    directory = directory or default_catalog_dir()
    paths = [p for p in sorted([*directory.glob("*.toml"), *directory.glob("*/*.toml")]) if p.parent.name != DERIVED_DIR]
    return _unique([load_pattern(p) for p in paths], "pattern")


def load_derived(directory: Path | None = None) -> list[Derived]:
    """The pass-made ids of `directory/derived/`, sorted by id."""
    directory = directory or default_catalog_dir()
    entries = _unique([load_derived_entry(p) for p in sorted((directory / DERIVED_DIR).glob("*.toml"))], "derived")
    line_ids = {p.stem.split("-", 1)[0] for p in directory.glob("*/*.toml") if p.parent.name != DERIVED_DIR}
    clash = sorted(e.id for e in entries if e.id in line_ids)
    if clash:
        raise CatalogError(f"derived ids also used by line patterns: {', '.join(clash)}")
    return entries


@dataclass(frozen=True)
class Catalog:
    """Line patterns (matched over every line) and derived ids (emitted by passes)."""

    patterns: list[Pattern]
    derived: list[Derived]

    def entry(self, finding_id: str) -> Pattern | Derived | None:
        """The entry that explains `finding_id`, case-insensitively; None when unknown."""
        wanted = finding_id.upper()
        for pattern in self.patterns:
            if pattern.id.upper() == wanted:
                return pattern
        return next((d for d in self.derived if d.names(wanted)), None)

    def entries_for(self, finding_ids: Sequence[str]) -> dict[str, Pattern | Derived]:
        """Each known finding id with its entry; ids the catalog does not know are left out."""
        return {fid: entry for fid in finding_ids if (entry := self.entry(fid)) is not None}


def load_full(user_dirs: Sequence[Path] = (), directory: Path | None = None) -> Catalog:
    """The built-in catalog merged with users' pattern directories (laid out like
    `patterns/`). A user id that the built-in catalog already has is an error: ids are
    stable names in verdicts and tickets, so a user pattern adds, never replaces."""
    patterns = load_catalog(directory)
    derived = load_derived(directory)
    for user_dir in user_dirs:
        if not Path(user_dir).is_dir():
            raise CatalogError(f"{user_dir}: not a directory of patterns")
        patterns = _unique(patterns + load_catalog(Path(user_dir)), "pattern")
    return Catalog(patterns, derived)
