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
    if "--idle" in sys.argv:
        ranks = sorted(analysis.t.traces.keys())
        idle = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)[0]
        out["idle"] = [{"rank": int(r["rank"]), "stream": int(r["stream"]), "idle_category": r["idle_category"],
                        "idle_time": float(r["idle_time"])} for r in idle.to_dict("records")]
    if "--kernel-stats" in sys.argv:
        per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=100000, duration_ratio=1.0,
                                                       include_memory_kernels=True)[1]
        out["kernel_stats"] = [{"kernel_type": r["kernel_type"], "name": r["name"], "rank": int(r["rank"]),
                                "sum": float(r["sum (us)"]), "max": float(r["max (us)"]), "min": float(r["min (us)"]),
                                "mean": float(r["mean (us)"]), "std": None if r["stddev"] != r["stddev"] else float(r["stddev"])}
                               for r in per_kernel.to_dict("records")]
    if "--kernel-types" in sys.argv:
        kinds = analysis.get_gpu_kernel_breakdown(visualize=False)[0]
        out["kernel_types"] = [{"kernel_type": r["kernel_type"], "sum": int(r["sum"]),
                                "percentage": float(r["percentage"])} for r in kinds.to_dict("records")]
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


def _tree_rss_mib(root: int) -> float:
    """Summed RSS of `root` and all its descendants, from /proc (HTA parses ranks in a pool)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        children = [pid for pid, ppid in parents.items() if ppid in frontier and pid not in tree]
        tree.update(children)
        frontier = children
    total = 0
    for pid in tree:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError):
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def _run_child(cmd: list[str], env: dict | None = None) -> tuple[dict, float, dict]:
    """Run one child; return its JSON answer, wall seconds and memory in MiB.

    Memory: `largest` = the biggest single process's ru_maxrss (the child reports its own
    and its workers'); `tree` = the peak of the process tree's summed RSS, sampled every
    20 ms while it runs (can miss a spike shorter than that).
    """
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    tree_peak = 0.0
    while proc.poll() is None:
        tree_peak = max(tree_peak, _tree_rss_mib(proc.pid))
        time.sleep(0.02)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    answer = json.loads(lines[-1]) if lines else {"ok": False, "error": stderr[-2000:]}
    largest = max(answer.get("peak_rss_mib", -1), answer.get("peak_rss_children_mib", -1))
    return answer, wall, {"largest": largest, "tree": round(tree_peak)}


def run_hta(paths: list[Path], *extra: str) -> tuple[dict, float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            (Path(tmp) / path.name).symlink_to(path)
        return _run_child([str(HTA_PYTHON), "-c", HTA_CHILD, tmp, *extra])


def run_forensics(paths: list[Path]) -> tuple[dict, float, dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return _run_child([sys.executable, "-c", FORENSICS_CHILD, *map(str, paths)], env=env)


# Sets whose idle-time breakdown (every rank and stream) and per-kernel statistics are recorded too.
DETAIL_SETS = ("param_dlrm_8rank", "hta_sampled_2rank")


def record_expected() -> None:
    """Store HTA's per-rank temporal breakdown + overlap (and, for DETAIL_SETS, the idle-time
    breakdown of every rank and stream and the per-kernel statistics) for every set it can analyze."""
    expected: dict[str, dict] = {}
    sets = {**fixture_sets(), **corpus_sets()}
    for name, paths in sets.items():
        extra = ("--kernel-types", "--idle", "--kernel-stats") if name in DETAIL_SETS else ("--kernel-types",)
        answer, wall, _ = run_hta(paths, *extra)
        root = REPO if name.startswith("fixtures/") else CORPUS
        files = [str(p.relative_to(root)) for p in paths]
        expected[name] = {"root": "repo" if root == REPO else "corpus", "files": files, **answer}
        print(f"{name}: {'ok' if answer['ok'] else answer['error'][:120]} ({wall:.1f}s)", file=sys.stderr)
    EXPECTED.parent.mkdir(parents=True, exist_ok=True)
    EXPECTED.write_text(json.dumps({"hta_version": "0.5.0", "sets": expected}, indent=1) + "\n")


def benchmark(names: list[str], repeat: int) -> None:
    """Alternate the two tools `repeat` times per set; report each one's best wall time.

    Best-of-N, interleaved, because the machine may be shared: a neighbour's load then
    inflates single runs of either tool, not one tool systematically.
    """
    sets = corpus_sets()
    for name in names:
        paths = sets[name]
        mb = sum(p.stat().st_size for p in paths) / 1e6
        runs: dict[str, list[tuple[float, dict, bool]]] = {"forensics": [], "hta": []}
        for _ in range(repeat):
            for tool, run in (("forensics", run_forensics), ("hta", run_hta)):
                answer, wall, memory = run(paths)
                runs[tool].append((wall, memory, answer["ok"]))
        best = {tool: min(r[0] for r in rs) for tool, rs in runs.items()}
        largest = {tool: max(r[1]["largest"] for r in rs) for tool, rs in runs.items()}
        tree = {tool: max(r[1]["tree"] for r in rs) for tool, rs in runs.items()}
        print(f"{name} ({len(paths)} file(s), {mb:.1f} MB on disk), best of {repeat}")
        for tool, label in (("hta", "HTA 0.5.0"), ("forensics", "forensics")):
            walls = ", ".join(f"{r[0]:.2f}" for r in runs[tool])
            print(
                f"  {label:10s}: {best[tool]:6.2f} s wall (runs: {walls})  peak RSS: largest process"
                f" {largest[tool]:4d} MiB, process tree {tree[tool]:4d} MiB  ok={all(r[2] for r in runs[tool])}"
            )
        print(
            f"  speedup {best['hta'] / best['forensics']:.1f}x; peak memory"
            f" {largest['forensics'] / largest['hta']:.2f} (largest process),"
            f" {tree['forensics'] / tree['hta']:.2f} (process tree) of HTA's"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-expected", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("sets", nargs="*", default=["hta_single_rank/df_index_resolver/df_index_resolver.json.gz", "param_dlrm_8rank"])
    args = parser.parse_args()
    if not CORPUS.is_dir():
        sys.exit(f"corpus not found at {CORPUS}")
    if args.record_expected:
        record_expected()
    else:
        benchmark(args.sets, args.repeat)


if __name__ == "__main__":
    main()
