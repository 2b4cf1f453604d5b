"""Holistic Trace Analysis 0.5.0 vs forensics on the same real traces, in one run.

Each side runs in its own child process (HTA from its own venv, /work/htaenv by
default) doing the same work: load the set's traces, temporal breakdown, comm/comp
overlap. We report each side's wall time and peak RSS (the child's ru_maxrss), and
the ratios. `--record-expected` instead stores HTA's numbers for every corpus set it
can analyze into tests/data/hta_expected.json, the parity oracle of the test suite.

    python benchmarks/traces_vs_hta.py                      # the two benchmark sets
    python benchmarks/traces_vs_hta.py --record-expected    # refresh the parity oracle
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FORENSICS_SHARED", REPO / ".." / "shared")).resolve()
CORPUS = SHARED / "corpus" / "traces"
HTA_PYTHON = Path(os.environ.get("HTA_PYTHON", "/work/htaenv/bin/python"))
EXPECTED = REPO / "tests" / "data" / "hta_expected.json"

# HTA reads a directory (or a rank -> file map); each set gets a temp dir of symlinks.
HTA_CHILD = r"""
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
trace_dir = sys.argv[1]
out = {"ok": False}
try:
    analysis = TraceAnalysis(trace_dir=trace_dir)
    tb = analysis.get_temporal_breakdown(visualize=False)
    ov = analysis.get_comm_comp_overlap(visualize=False)
    rows = tb.merge(ov, on="rank", how="left").to_dict("records")
    out = {"ok": True, "rows": [{k: (None if v != v else (int(v) if k == "rank" else float(v)))
                                 for k, v in r.items()} for r in rows]}
except Exception as err:  # HTA failing is a result we record
    out = {"ok": False, "error": f"{type(err).__name__}: {err}"}
import resource
out["seconds"] = time.perf_counter() - t0
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
# HTA parses several ranks in a multiprocessing pool: report its largest worker too.
out["peak_rss_children_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
print(json.dumps(out))
"""

FORENSICS_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from forensics.ingest.traces import load_traces
from forensics.passes.trace_breakdown import trace_breakdown
loads = load_traces([Path(p) for p in sys.argv[1:]])
rows = trace_breakdown(loads)
print(json.dumps({"ok": True, "rows": rows, "seconds": time.perf_counter() - t0,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""


FIXTURES = REPO / "fixtures" / "traces"


def fixture_sets() -> dict[str, list[Path]]:
    """Our synthetic traces, so that the parity tests also run without the corpus."""
    sets = {"fixtures/straggler_4rank": sorted((FIXTURES / "straggler_4rank").glob("*.json*"))}
    for case in ("ns_resolution", "legacy_2021", "truncated", "cpu_only"):
        sets[f"fixtures/edge/{case}"] = sorted((FIXTURES / "edge" / case).glob("*.json*"))
    return sets


def corpus_sets() -> dict[str, list[Path]]:
    """Every set HTA might analyze: the two multi-rank sets and each single-rank file."""
    sets = {
        "param_dlrm_8rank": sorted((CORPUS / "param_dlrm_8rank").glob("*.json")),
        "hta_sampled_2rank": sorted((CORPUS / "hta_sampled_2rank").glob("*.json.gz")),
    }
    for path in sorted((CORPUS / "hta_single_rank").rglob("*.json.gz")):
        sets[f"hta_single_rank/{path.relative_to(CORPUS / 'hta_single_rank')}"] = [path]
    for path in sorted((CORPUS / "hta_edge_cases").rglob("*.json.gz")):
        sets[f"hta_edge_cases/{path.parent.name}"] = [path]
    return sets


def _run_child(cmd: list[str], env: dict | None = None) -> tuple[dict, float, int]:
    """Run one child; return its JSON answer, wall seconds and peak RSS in MiB.

    Each child reports its own getrusage(RUSAGE_SELF).ru_maxrss (and that of its largest
    worker process): RUSAGE_CHILDREN seen from here would give the maximum over all
    children so far, hiding a smaller one behind a bigger.
    """
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    answer = json.loads(lines[-1]) if lines else {"ok": False, "error": proc.stderr[-2000:]}
    return answer, wall, max(answer.get("peak_rss_mib", -1), answer.get("peak_rss_children_mib", -1))


def run_hta(paths: list[Path]) -> tuple[dict, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            (Path(tmp) / path.name).symlink_to(path)
        return _run_child([str(HTA_PYTHON), "-c", HTA_CHILD, tmp])


def run_forensics(paths: list[Path]) -> tuple[dict, float, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return _run_child([sys.executable, "-c", FORENSICS_CHILD, *map(str, paths)], env=env)


def record_expected() -> None:
    """Store HTA's per-rank temporal breakdown + overlap for every set it can analyze."""
    expected: dict[str, dict] = {}
    for name, paths in {**fixture_sets(), **corpus_sets()}.items():
        answer, wall, _ = run_hta(paths)
        root = REPO if name.startswith("fixtures/") else CORPUS
        files = [str(p.relative_to(root)) for p in paths]
        expected[name] = {"root": "repo" if root == REPO else "corpus", "files": files, **answer}
        print(f"{name}: {'ok' if answer['ok'] else answer['error'][:120]} ({wall:.1f}s)", file=sys.stderr)
    EXPECTED.parent.mkdir(parents=True, exist_ok=True)
    EXPECTED.write_text(json.dumps({"hta_version": "0.5.0", "sets": expected}, indent=1) + "\n")


def benchmark(names: list[str]) -> None:
    sets = corpus_sets()
    # Forensics runs first so that its peak RSS is not hidden behind HTA's.
    for name in names:
        paths = sets[name]
        mb = sum(p.stat().st_size for p in paths) / 1e6
        ours, our_wall, our_rss = run_forensics(paths)
        hta, hta_wall, hta_rss = run_hta(paths)
        print(f"{name} ({len(paths)} file(s), {mb:.1f} MB on disk)")
        print(f"  HTA 0.5.0 : {hta_wall:7.2f} s wall  peak RSS {hta_rss:6d} MiB  ok={hta['ok']}")
        print(f"  forensics : {our_wall:7.2f} s wall  peak RSS {our_rss:6d} MiB  ok={ours['ok']}")
        print(f"  speedup {hta_wall / our_wall:.1f}x, memory {our_rss / hta_rss:.2f} of HTA's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-expected", action="store_true")
    parser.add_argument("sets", nargs="*", default=["hta_single_rank/df_index_resolver/df_index_resolver.json.gz",
                                                     "param_dlrm_8rank"])
    args = parser.parse_args()
    if not CORPUS.is_dir():
        sys.exit(f"corpus not found at {CORPUS}")
    if args.record_expected:
        record_expected()
    else:
        benchmark(args.sets)


if __name__ == "__main__":
    main()
