"""Batch throughput on a generated year of incidents, and whether fleet.md finds what was planted.

    python benchmarks/fleet.py [--incidents 1000] [--hosts 200] [--jobs 2] [--work /tmp/forensics-fleet]

Generates the history with fixtures/generate/fleet_history.py (real-format incidents re-hosted
onto a fleet, a manifest with start times, planted lemon hosts, a lemon GPU and a nightly
failure window), runs `forensics batch --manifest` on it, then runs it again: the second run
reuses every unchanged incident, so its time against the first is the cost of a no-op re-run;
a third run with --no-figures into a fresh OUT times the analysis without matplotlib.
The baseline is what a user would do without batch: a loop of `forensics analyze`, one process
per incident, run --jobs at a time (timed on a sample, projected to the whole history). Prints
incidents per second, the ratio to the baseline and, for each planted fact, whether fleet.md
names it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "generate"))
import fleet_history  # the generator is a script of fixtures/generate, not a package


def _batch(work: Path, jobs: int, out: str = "out", *options: str) -> float:
    command = [sys.executable, "-m", "forensics.cli", "batch", "--manifest", str(work / "manifest.csv"), "--out", str(work / out)]
    started = time.perf_counter()
    subprocess.run([*command, "--jobs", str(jobs), *options], check=True, capture_output=True, env=os.environ | {"NO_COLOR": "1"})
    return time.perf_counter() - started


def _analyze_loop(work: Path, sample: int) -> float:
    """Seconds per incident of the baseline, a shell loop of `forensics analyze` (one process per
    incident), timed on the first `sample` incidents of the manifest."""
    with (work / "manifest.csv").open() as manifest:
        paths = [work / row["path"] for row in list(csv.DictReader(manifest))[:sample]]
    started = time.perf_counter()
    for n, path in enumerate(paths):
        command = [sys.executable, "-m", "forensics.cli", "analyze", str(path), "--out", str(work / "loop" / str(n))]
        subprocess.run(command, check=False, capture_output=True)
    return (time.perf_counter() - started) / len(paths)


def found(fleet_md: str, planted: dict) -> dict[str, bool]:
    """Each planted fact, and whether fleet.md states it."""
    rows = fleet_md.splitlines()
    lemon_rows = {h: next((r for r in rows if r.startswith(f"| {h} |")), "") for h in planted["lemon_hosts"]}
    window = f"Failures cluster between {planted['window_start_hour']:02d}:00"
    window_near = [f"Failures cluster between {(planted['window_start_hour'] - k) % 24:02d}:00" for k in (0, 1)]
    return {
        **{f"lemon host {h} flagged": "**lemon**" in row for h, row in lemon_rows.items()},
        f"lemon GPU {planted['lemon_gpu']} listed": planted["lemon_gpu"] in fleet_md,
        f"nightly window ({window} or an hour before)": any(w in fleet_md for w in window_near),
        f"lemon board {planted['lemon_board']} listed": any(r.startswith(f"| {planted['lemon_board']} |") for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incidents", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/forensics-fleet"))
    parser.add_argument("--loop-sample", type=int, default=20, help="incidents the analyze-loop baseline is timed on")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    planted = fleet_history.generate(args.work, args.incidents, args.hosts)
    generated = time.perf_counter() - started
    first = _batch(args.work, args.jobs)
    again = _batch(args.work, args.jobs)
    plain = _batch(args.work, args.jobs, "out-no-figures", "--no-figures")
    loop = _analyze_loop(args.work, args.loop_sample) * args.incidents / args.jobs  # the loop run `jobs` at a time
    facts = found((args.work / "out" / "fleet.md").read_text(), planted)
    print(f"{args.incidents} incidents on {args.hosts} hosts, generated in {generated:.0f} s; forensics batch --jobs {args.jobs}:")
    print(f"  first run  {first:8.1f} s  {args.incidents / first:6.2f} incidents/s")
    print(f"  re-run     {again:8.1f} s  {again / first:6.3f}x the first (every incident unchanged)")
    print(f"  no figures {plain:8.1f} s  {args.incidents / plain:6.2f} incidents/s (--no-figures, into a fresh OUT)")
    print(
        f"  baseline   {loop:8.1f} s  a loop of `forensics analyze`, {args.jobs} at a time (timed on {args.loop_sample}): batch is {loop / first:.2f}x faster"
    )
    for fact, ok in facts.items():
        print(f"  {'FOUND ' if ok else 'MISSED'} {fact}")
    print(
        json.dumps(
            {
                "first_s": round(first, 1),
                "rerun_s": round(again, 1),
                "no_figures_s": round(plain, 1),
                "loop_s": round(loop, 1),
                "found": facts,
            }
        )
    )


if __name__ == "__main__":
    main()
