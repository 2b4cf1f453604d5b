"""The catalog as a whole: enough patterns, every category and role covered, sane roles.

test_patterns.py checks each pattern on its own; this file checks properties that only
hold across patterns: coverage of the taxonomy, the role discipline the verdict relies on,
and that one real line is claimed by one pattern unless the overlap is deliberate.
"""

from __future__ import annotations

import re
from collections import defaultdict

import polars as pl
import pytest

from forensics.catalog import load_catalog
from forensics.catalog.match import match_catalog
from forensics.schema import Category, Role

CATALOG = load_catalog()
BY_ID = {p.id: p for p in CATALOG}

# Lines that legitimately carry two findings: a repeated or wrapped failure that is also a
# more specific one (watchdog re-raising a CUDA error, NCCL reporting an ECC error), or one
# metrics line holding two NaN values.
INTENDED_OVERLAPS = {
    frozenset({"DIST008", "CUDA001"}),
    frozenset({"HOST008", "HOST009"}),  # NumPy's `MemoryError: Unable to allocate ...` is a MemoryError too
    frozenset({"CUDA010", "HW003"}),
    frozenset({"TRUN017", "TRUN018"}),
    frozenset({"NUM001", "NUM007"}),
    frozenset({"NUM004", "NUM006"}),
    frozenset({"GEN001", "GEN002"}),  # CUDA_ERROR_OUT_OF_MEMORY: the OOM family is the more specific
    frozenset({"GEN001", "GEN010"}),
    frozenset(
        {"NUM017", "NUM026"}
    ),  # DeepLab's CheckNumerics message is itself `Loss is inf or nan.`  # a glog `Check failed:` abort whose message is a CUDA error: the CUDA family says what
    frozenset({"EVT018", "GEN007"}),  # a preemption notice that also says a checkpoint is being saved
    frozenset({"NUM010", "NUM021"}),  # an overflow (an event) whose new loss scale is near the floor (a failure)
    frozenset({"NUM011", "NUM021"}),
    frozenset({"NUM001", "NUM003"}),  # torchtitan's padded `loss:     nan` is a loss that is nan in any format
    frozenset({"DATA012", "DATA024"}),  # an image PIL cannot read, which is Jupyter's copy inside .ipynb_checkpoints
}


def _matches(texts: list[str]) -> dict[int, set[str]]:
    lines = pl.DataFrame({"file": ["x"] * len(texts), "line": list(range(len(texts))), "text": texts})
    hits: dict[int, set[str]] = defaultdict(set)
    for row in match_catalog(lines, CATALOG).select("line", "pattern").iter_rows():
        hits[row[0]].add(row[1])
    return hits


def test_catalog_is_large_enough():
    assert len(CATALOG) >= 80


def test_ids_are_unique_and_well_formed():
    ids = [p.id for p in CATALOG]
    assert len(ids) == len(set(ids))
    bad = [i for i in ids if not re.fullmatch(r"[A-Z]{2,5}\d{3}", i)]
    assert not bad, bad


@pytest.mark.parametrize("category", [c for c in Category if c not in (Category.NO_FAILURE, Category.UNKNOWN)], ids=str)
def test_every_category_can_be_named_by_a_leading_finding(category):
    leading = [p.id for p in CATALOG if p.category == category and p.role in ("initiating", "symptom")]
    assert leading, f"no initiating/symptom pattern for {category}"


def test_every_role_is_used():
    assert {p.role for p in CATALOG} == {r.value for r in Role}


def test_every_match_example_holds_one_of_its_literals():
    """The prefilter keeps a line when it holds any literal of a pattern: an example without one would be lost."""
    missing = [(p.id, example[:60]) for p in CATALOG for example in p.match_examples if not any(lit in example for lit in p.literals)]
    assert not missing, missing


def test_every_pattern_explains_itself():
    thin = [p.id for p in CATALOG if not (p.causes and p.immediate and p.structural and p.references)]
    assert not thin, thin
    assert all(ref.startswith("https://") for p in CATALOG for ref in p.references)


def test_a_line_is_claimed_by_one_pattern_unless_intended():
    examples = [(p.id, e) for p in CATALOG for e in p.match_examples]
    hits = _matches([text for _, text in examples])
    unexpected = [
        (examples[i][0], sorted(ids), examples[i][1][:70])
        for i, ids in hits.items()
        if len(ids) > 1 and frozenset(ids) not in INTENDED_OVERLAPS
    ]
    assert not unexpected, unexpected


def test_generic_xid_leaves_specific_codes_to_their_patterns():
    xids = {
        "13": "XID013",
        "31": "XID013",
        "43": "XID043",
        "45": "XID043",
        "48": "XID048",
        "63": "XID063",
        "64": "XID064",
        "74": "XID074",
        "79": "XID079",
        "94": "XID094",
        "95": "XID095",
        "119": "XID119",
        "120": "XID120",
        "154": "XID154",
        "8": "XID000",
        "109": "XID000",
        "149": "XID000",
    }
    texts = [f"[  10.000001] NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python, detail" for code in xids]
    hits = _matches(texts)
    assert [hits[i] for i in range(len(texts))] == [{pid} for pid in xids.values()]


def test_launcher_teardown_lines_never_initiate():
    agent_literals = ("failed (exitcode: ", "received by PID", "closing signal", "ChildFailedError")
    agent = [p for p in CATALOG if any(a in lit for lit in p.literals for a in agent_literals)]
    assert len(agent) >= 8
    assert all(p.role in ("symptom", "teardown") for p in agent), [(p.id, p.role) for p in agent]
    assert BY_ID["TRUN002"].category == "PROCESS_KILLED" and BY_ID["TRUN002"].role == "symptom"


def test_crowd_reactions_are_cascade_and_noise_is_symptom():
    assert BY_ID["DIST001"].role == "cascade"
    assert BY_ID["TRUN011"].role == "teardown"
    assert (BY_ID["XID043"].role, BY_ID["XID043"].severity) == ("symptom", "warning")


def test_events_do_not_count_as_failures():
    events = [p for p in CATALOG if p.role == "event"]
    assert len(events) >= 10
    assert all(p.severity == "info" for p in events), [p.id for p in events if p.severity != "info"]


def test_a_plain_traceback_header_is_not_a_finding():
    hits = _matches(["Traceback (most recent call last):", "[rank3]: Traceback (most recent call last):"])
    assert not hits
