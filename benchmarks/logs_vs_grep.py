"""Whole-incident log analysis speed, as a ratio to GNU grep doing far less, in the same run.

Builds a synthetic incident of RANKS rank logs (real line shapes: torchtitan-style metric
lines, NCCL INFO init lines, c10d warnings; one rank OOMs, the rest time out), then times
as whole processes, best of --repeat:

  baseline  `grep -E -c` with the catalog's prefilter literals over every file
            (finds candidate lines only: no parsing, no timestamps, no verdict)
  forensics `forensics analyze` (discover, ingest, all passes, verdict, report)

    python benchmarks/logs_vs_grep.py [--ranks 64] [--lines 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forensics.catalog import load_catalog

METRIC = "[rank{r}]:[titan] 2025-06-16 22:{m:02d}:{s:02d},322 - root - INFO - step: {step}  loss:  6.1384  memory: 49.66GiB(52.28%)  tps: 5,856  tflops: 339.16  mfu: 34.29%"
NCCL = "[rank{r}]:node{h}:{pid}:{pid} [{d}] NCCL INFO Channel 01/02 :    0   1   2   3   4   5   6   7"
WARN = "[rank{r}]:[W616 22:{m:02d}:{s:02d}.489301002 ProcessGroupNCCL.cpp:2111] [PG ID 1 PG GUID 1 Rank {r}] a warning that repeats"
OOM = "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total capacity of 63.59 GiB of which 242.31 MiB is free."
TIMEOUT = "[rank{r}]:[E616 23:{m:02d}:{s:02d}.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, OpType=ALLREDUCE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600061 milliseconds before timing out."


def build_incident(root: Path, ranks: int, lines: int) -> int:
    root.mkdir(parents=True, exist_ok=True)
    total = 0
    for r in range(ranks):
        body = []
        for i in range(lines):
            m, s = divmod(i // 10 % 3600, 60)
            if i % 50 == 0:
                body.append(NCCL.format(r=r, h=r // 8, pid=1000 + r, d=r % 8))
            elif i % 97 == 0:
                body.append(WARN.format(r=r, m=m, s=s))
            else:
                body.append(METRIC.format(r=r, m=m, s=s, step=i))
        body.append(OOM.format(r=r) if r == ranks // 2 else TIMEOUT.format(r=r, m=10, s=r % 60))
        text = "\n".join(body) + "\n"
        (root / f"rank_{r}.log").write_text(text)
        total += len(text)
    return total


def best_of(command: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("grep") is None:
        sys.exit("GNU grep is needed for the baseline")
    work = Path(tempfile.mkdtemp(prefix="forensics-bench-"))
    try:
        incident = work / "incident"
        size = build_incident(incident, args.ranks, args.lines)
        literals = sorted({lit for p in load_catalog() for lit in p.literals})
        alternation = "|".join(re.escape(lit) for lit in literals)
        files = sorted(str(p) for p in incident.glob("*.log"))
        grep = best_of(["grep", "-E", "-c", alternation, *files], args.repeat)
        forensics = best_of([sys.executable, "-m", "forensics.cli", "analyze", str(incident), "--out", str(work / "out")], args.repeat)
        mb = size / 1e6
        print(f"incident: {args.ranks} rank logs, {args.ranks * (args.lines + 1):,} lines, {mb:.0f} MB")
        print(f"grep -E -c (catalog literals, {len(literals)}): {grep:6.2f} s  {mb / grep:7.0f} MB/s")
        print(f"forensics analyze (everything):        {forensics:6.2f} s  {mb / forensics:7.0f} MB/s")
        print(f"ratio forensics / grep: {forensics / grep:.2f}x the time")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
