"""Every reader survives any input: real fixture files cut, spliced, duplicated and salted with
random text and bytes never raise, and each reader still returns the frames it promises.

The same properties are the fuzzing entry point: `FORENSICS_FUZZ_EXAMPLES=20000 python -m pytest
tests/test_properties.py` runs each one that many times (60 by default, to keep CI fast).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import InputError
from forensics.flow import analyze
from forensics.ingest.c10d import parse_collectives, parse_exits
from forensics.ingest.dcgm import parse_dcgm
from forensics.ingest.fabric import parse_fabric
from forensics.ingest.gpu import GPU_SAMPLES
from forensics.ingest.kernel_log import parse_kernel_log
from forensics.ingest.nccl import parse_nccl
from forensics.ingest.pcie import parse_pcie
from forensics.ingest.smi_csv import parse_gpu_csv
from forensics.ingest.smi_dmon import parse_dmon
from forensics.ingest.smi_query import parse_nvidia_smi_query, parse_nvidia_smi_xml
from forensics.ingest.smi_topo import parse_topo
from forensics.ingest.traces import load_trace
from forensics.passes.nccl_ops import op_count_findings
from forensics.passes.nccl_ras import ras_findings
from forensics.passes.stacks import stack_waits
from forensics.safe_pickle import load_plain
from forensics.schema import FINDINGS, LINES, conform

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = int(os.environ.get("FORENSICS_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _texts(*globs: str) -> list[str]:
    paths = sorted(p for g in globs for p in FIXTURES.glob(g) if p.is_file())
    assert paths, f"no fixture file for {globs}"
    return [p.read_text(encoding="utf-8", errors="replace")[:200_000] for p in paths]


SMI = _texts("formats/smi_*")
LOGS = _texts(
    "incidents/gpu_*/console.log",
    "incidents/gpu_*/dmesg.txt",
    "incidents/hw_*/*.log",
    "public/nccl_*/console.log",
    "public/*watchdog*/console.log",
    "formats/lspci_*/*",
    "formats/dcgmi_*/*",
    "formats/ibstat_*/*",
    "formats/gdb_*/*.txt",
    "formats/ncclras_*/*.txt",
    "formats/ncclras_*/*.log",
)


@st.composite
def mutated(draw, seeds: list[str]) -> str:
    """A real file with up to five edits: cut, random text in, a span out, a span twice, lines joined."""
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 5))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 400)))
        op = draw(st.sampled_from(["cut", "insert", "delete", "repeat", "join"]))
        if op == "cut":
            text = text[:i]
        elif op == "insert":
            text = text[:i] + draw(st.text(max_size=40)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "repeat":
            text = text[:j] + text[i:j] * draw(st.integers(1, 20)) + text[j:]
        else:
            text = text[:i] + text[i:j].replace("\n", draw(st.sampled_from([" ", "\r", "\x00", "\x1b[0m"]))) + text[j:]
    return text


def _lines(text: str) -> pl.DataFrame:
    rows = text.split("\n")
    return conform(pl.DataFrame({"file": "fuzz.log", "line": range(1, len(rows) + 1), "text": rows}), LINES)


@FUZZ
@given(mutated(SMI))
def test_nvidia_smi_readers_return_gpu_samples_whatever_they_are_given(text):
    for reader in (parse_nvidia_smi_query, parse_nvidia_smi_xml, parse_gpu_csv, parse_dmon):
        samples, problem = reader(text, "fuzz.txt")
        assert samples.columns == list(GPU_SAMPLES), reader.__name__
        assert problem is None or isinstance(problem, str)
    topology, _ = parse_topo(text, "fuzz.txt")
    assert isinstance(topology, pl.DataFrame)


@FUZZ
@given(mutated(LOGS))
def test_line_readers_return_their_tables_whatever_the_lines(text):
    lines = _lines(text)
    assert isinstance(parse_collectives(lines), pl.DataFrame)
    assert isinstance(parse_exits(lines), pl.DataFrame)
    for reader in (parse_nccl, parse_dcgm, parse_fabric, parse_pcie):
        tables = reader(lines)
        assert all(isinstance(frame, pl.DataFrame) for frame in tables.values()), reader.__name__
    for judged in (ras_findings(lines), stack_waits(lines), op_count_findings(parse_nccl(lines)["nccl_ops"])):
        assert judged.columns == list(FINDINGS)
    events, problem = parse_kernel_log(text, "dmesg.txt")
    assert isinstance(events, pl.DataFrame) and (problem is None or isinstance(problem, str))


FR_DUMPS = [p.read_bytes() for p in sorted(FIXTURES.glob("incidents/*/nccl_trace_rank_*"))[:4]]


@FUZZ
@given(st.sampled_from(FR_DUMPS), st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=8)), max_size=6), st.integers(0, 10**6))
def test_the_pickle_loader_returns_data_or_a_reason_for_any_bytes(dump, edits, cut):
    data = bytearray(dump)
    for at, junk in edits:
        at %= max(len(data), 1)
        data[at : at + len(junk)] = junk
    value, problem = load_plain(bytes(data[: cut % (len(data) + 1)]))
    assert problem is None or isinstance(problem, str)
    assert _plain(value), "a loaded pickle holds plain data only, never an object of a class"


PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray)


def _plain(value, depth: int = 0) -> bool:
    if isinstance(value, PLAIN) or depth > 200:
        return True
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_plain(v, depth + 1) for v in value)
    return False


TRACES = sorted(FIXTURES.glob("incidents/*/traces/rank*.pt.trace.json.gz"))[:3]
TRACE_TEXTS = [gzip.decompress(p.read_bytes()).decode("utf-8")[:300_000] for p in TRACES]


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 10))
@given(mutated(TRACE_TEXTS))
def test_a_damaged_trace_loads_or_says_why(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("trace") / "rank0.pt.trace.json"
    path.write_text(text, encoding="utf-8")
    loaded = load_trace(path)
    assert isinstance(loaded.events, pl.DataFrame)
    assert loaded.problem is None or isinstance(loaded.problem, str)


@settings(FUZZ, max_examples=max(EXAMPLES // 6, 5))
@given(st.lists(mutated(LOGS + SMI), min_size=1, max_size=3), st.binary(max_size=300))
def test_a_whole_incident_of_damaged_files_is_analyzed_and_every_file_listed(tmp_path_factory, texts, junk):
    folder = tmp_path_factory.mktemp("incident")
    for i, text in enumerate(texts):
        (folder / f"rank_{i}.log").write_text(text, encoding="utf-8", errors="surrogatepass")
    (folder / "blob.bin").write_bytes(junk)
    try:
        analysis = analyze(folder)
    except InputError as refused:  # every file skipped: a clear usage error, not a crash
        assert "nothing readable" in str(refused)
        return
    listed = set(analysis.incident.inputs["path"].to_list())
    assert listed == {p.name for p in folder.iterdir()}
    assert analysis.verdict.category
