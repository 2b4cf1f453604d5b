"""Log analysis at scale, against grep-class baselines timed in the same run (`make bench`).

Builds incidents of RANKS rank logs x MB each from real line shapes (torchrun/torchtitan
start-up, NCCL INIT lines, a metric line per step, a checkpoint save every 500 steps,
c10d warnings; at the end one rank dies of a CUDA OOM and the others hit the watchdog),
then, with the files in the page cache (read once before timing), measures each command as a
whole process, wall time and peak RSS, forensics and rg as the best of TRIES runs:

  forensics   `forensics analyze` (discover, read, all passes, verdict, report, figures)
  rg -j1      ripgrep, one thread, counting lines that match any of the catalog's regexes
  grep -F     GNU grep counting lines that hold any of the catalog's literals
  naive loop  Python: per file, `re.finditer` of each catalog regex over the whole text
              (measured on the first NAIVE_FILES files only, then compared by MB/s)

It then prints the goals of issue 12 with the measured ratios, the cost per GB from the
smallest to the largest size, 251 vs 401 patterns, a 3-line incident end to end, and
appends the figures to benchmarks/results.md.

    python benchmarks/scale.py [--ranks 64 256 1024] [--mb 8] [--work /tmp/forensics-bench]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from forensics.catalog import load_catalog

HERE = Path(__file__).resolve().parent
NAIVE_FILES = 2
TRIES = 2  # forensics and rg: the best of this many runs each
CULPRIT = 5
R = "@R@"  # the rank, filled in per file

START = [
    "[rank@R@]:[titan] 2025-06-16 21:58:02,123 - root - INFO - Starting job: Llama 3 8B training",
    "[rank@R@]:[titan] 2025-06-16 21:58:04,416 - root - INFO - Building 1-D device mesh with ['dp_shard'], [1024]",
    "[rank@R@]:node@H@:4211:4211 [@D@] NCCL INFO Bootstrap : Using eth0:10.0.0.@D@<0>",
    "[rank@R@]:node@H@:4211:4211 [@D@] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so), using internal implementation",
    "[rank@R@]:node@H@:4211:4211 [@D@] NCCL INFO cudaDriverVersion 12040",
    "[rank@R@]:NCCL version 2.21.5+cuda12.4",
    "[rank@R@]:node@H@:4211:4398 [@D@] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.@D@<0>",
    "[rank@R@]:node@H@:4211:4398 [@D@] NCCL INFO comm 0x5581 rank @R@ nranks 1024 cudaDev @D@ nvmlDev @D@ busId 1b000 commId 0x7c1f - Init START",
    "[rank@R@]:node@H@:4211:4398 [@D@] NCCL INFO Channel 00/16 :    0   1   2   3   4   5   6   7",
    "[rank@R@]:node@H@:4211:4398 [@D@] NCCL INFO comm 0x5581 rank @R@ nranks 1024 cudaDev @D@ nvmlDev @D@ busId 1b000 commId 0x7c1f - Init COMPLETE",
    "[rank@R@]:[titan] 2025-06-16 21:58:20,707 - root - INFO - Training starts at step 1, total steps 100000",
]
METRIC = (
    "[rank@R@]:[titan] 2025-06-16 {h:02d}:{m:02d}:{s:02d},322 - root - INFO - step: {step}  loss:  {loss:.4f}"
    "  memory: 49.66GiB(52.28%)  tps: 5,856  tflops: 339.16  mfu: 34.29%"
)
SAVE = "[rank@R@]:[titan] 2025-06-16 {h:02d}:{m:02d}:{s:02d},411 - root - INFO - Saving the checkpoint (or staging if async is enabled)."
SAVED = "[rank@R@]:[titan] 2025-06-16 {h:02d}:{m:02d}:{s:02d},902 - root - INFO - Finished saving the checkpoint in 4.49 seconds."
WARN = (
    "[rank@R@]:[W616 {h:02d}:{m:02d}:{s:02d}.489301002 ProcessGroupNCCL.cpp:2111] [PG ID 1 PG GUID 1 Rank @R@] "
    "Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives. (function operator())"
)
OOM = [
    "[rank@R@]: Traceback (most recent call last):",
    '[rank@R@]:   File "/opt/torchtitan/train.py", line 331, in train_step',
    "[rank@R@]:     loss.backward()",
    "[rank@R@]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU @D@ has a total capacity of "
    "79.10 GiB of which 242.31 MiB is free. Including non-PyTorch memory, this process has 78.85 GiB memory in use.",
]
TIMEOUT = [
    "[rank@R@]:[E616 23:58:02.715298746 ProcessGroupNCCL.cpp:607] [Rank @R@] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7753, OpType=ALLREDUCE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600061 "
    "milliseconds before timing out.",
    "[rank@R@]:[E616 23:58:02.716002164 ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank @R@] Exception "
    "(either an error or timeout) detected by watchdog at work: 7753, last enqueued NCCL work: 7753, last completed NCCL work: 7752.",
    "[rank@R@]:terminate called after throwing an instance of 'c10::DistBackendError'",
]


@dataclass
class Run:
    seconds: float
    peak_mib: float
    output: str


def body(mb: float) -> str:
    """The lines every rank shares, about `mb` MB, with @R@ (rank), @H@ (node), @D@ (GPU) to fill in."""
    lines = list(START)
    size, step = sum(len(line) for line in lines), 0
    while size < mb * 1e6:
        step += 1
        t = 22 * 3600 + step
        h, m, s = t // 3600 % 24, t // 60 % 60, t % 60
        batch = [METRIC.format(h=h, m=m, s=s, step=step, loss=2.0 + 8.0 / (1 + step / 500))]
        if step % 500 == 0:
            batch += [SAVE.format(h=h, m=m, s=s), SAVED.format(h=h, m=m, s=s)]
        if step % 997 == 0:
            batch.append(WARN.format(h=h, m=m, s=s))
        lines += batch
        size += sum(len(line) + 1 for line in batch)
    return "\n".join(lines) + "\n"


def build(root: Path, ranks: int, mb: float) -> int:
    """Write the incident unless a complete one is already there; its size in bytes."""
    stamp = root / ".complete"
    if stamp.exists():
        return int(stamp.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shared = body(mb)
    total = 0
    for rank in range(ranks):
        ending = OOM if rank == CULPRIT else TIMEOUT
        text = shared + "\n".join(ending) + "\n"
        text = text.replace("@R@", str(rank)).replace("@H@", str(rank // 8)).replace("@D@", str(rank % 8))
        (root / f"rank_{rank}.log").write_text(text)
        total += len(text)
    stamp.write_text(str(total))
    return total


def measure(command: list[str], **kwargs: object) -> Run:
    """Wall time and peak RSS of `command` as a whole process (its own rusage, from wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)  # type: ignore[call-overload]
    output = proc.stdout.read() if proc.stdout else ""
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return Run(time.perf_counter() - start, usage.ru_maxrss / 1024, output)


def best_of(tries: int, command: list[str]) -> Run:
    """The fastest of `tries` runs: on a shared machine a slower run measures its neighbours."""
    return min((measure(command) for _ in range(tries)), key=lambda r: r.seconds)


def warm(folder: Path) -> None:
    """Read every file once so that every command below meets the same (warm) page cache."""
    for path in sorted(folder.glob("*")):
        with path.open("rb") as handle:
            while handle.read(1 << 24):
                pass


def naive_loop(files: list[Path], regexes: list[str]) -> float:
    """Seconds for the textbook loop: per file, every regex over the whole text."""
    compiled = []
    for regex in regexes:
        try:
            compiled.append(re.compile(regex, re.MULTILINE))
        except re.error:
            continue  # Rust-only syntax: the loop gets fewer patterns, which only flatters it
    start = time.perf_counter()
    for path in files:
        text = path.read_text(errors="replace")
        for pattern in compiled:
            sum(1 for _ in pattern.finditer(text))
    return time.perf_counter() - start


def forensics_cmd(incident: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "forensics.cli", "analyze", str(incident), "--out", str(out), *extra]


def synthetic_patterns(folder: Path, count: int) -> Path:
    """`count` extra valid patterns whose literals never occur: what a bigger catalog costs."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"BENCH{i:03d}-bench-{i}.toml").write_text(
            f'id = "BENCH{i:03d}"\nname = "bench-{i}"\ntitle = "bench pattern {i}"\ncategory = "UNKNOWN"\n'
            f'severity = "error"\nrole = "initiating"\nliterals = ["Q{i:03d}Z failure"]\n'
            f"regex = '''Q{i:03d}Z failure code (?P<code>\\d+)'''\n"
            'meaning = "A benchmark pattern."\nimmediate = ["nothing"]\nstructural = ["nothing"]\n\n[examples]\n'
            f'match = ["Q{i:03d}Z failure code 7"]\nno_match = ["nothing here"]\n'
        )
    return folder


def _right(verdict: str) -> bool:
    return verdict.startswith("CUDA_OOM") and f"Rank {CULPRIT} " in verdict


def verdict_of(output: str) -> str:
    return next((line for line in output.splitlines() if "confidence" in line), output.strip()[-200:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--mb", type=float, default=8.0, help="MB per rank log")
    parser.add_argument("--work", type=Path, default=Path("/tmp/forensics-bench"))
    args = parser.parse_args()
    rg = shutil.which("rg") or str(Path(sys.executable).parent / "rg")
    if not Path(rg).exists():
        sys.exit("ripgrep is needed for the baseline: pip install 'ripgrep==14.1.0'")
    patterns = load_catalog()
    regex_file, literal_file = args.work / "regexes.txt", args.work / "literals.txt"
    args.work.mkdir(parents=True, exist_ok=True)
    # one alternation for rg: its group names must not repeat, so groups lose their names
    regex_file.write_text("\n".join(re.sub(r"\(\?P<\w+>", "(?:", p.regex) for p in patterns) + "\n")
    literal_file.write_text("\n".join(sorted({lit for p in patterns for lit in p.literals})) + "\n")

    report = [f"## {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, {args.mb:g} MB per rank", ""]
    report += [
        "| ranks | GB | forensics | peak RSS | rg -j1 | grep -F | forensics / rg time | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    costs: list[tuple[int, float, float]] = []
    peaks: dict[int, float] = {}
    verdicts: dict[int, str] = {}
    ratios: dict[int, float] = {}
    for ranks in args.ranks:
        incident = args.work / f"incident_{ranks}x{args.mb:g}MB"
        print(f"building {ranks} ranks x {args.mb:g} MB ...", flush=True)
        size = build(incident, ranks, args.mb)
        gb = size / 1e9
        files = [str(p) for p in sorted(incident.glob("rank_*.log"))]
        warm(incident)
        run = best_of(TRIES, forensics_cmd(incident, args.work / "out"))
        ripgrep = best_of(TRIES, [rg, "-j1", "-c", "--no-filename", "-f", str(regex_file), str(incident)])
        grep = measure(["grep", "-c", "-h", "-F", "-f", str(literal_file), *files])
        costs.append((ranks, gb, run.seconds))
        ratios[ranks] = run.seconds / ripgrep.seconds
        verdict = verdicts[ranks] = verdict_of(run.output)
        peaks[ranks] = run.peak_mib
        print(
            f"  forensics {run.seconds:7.1f} s  {run.peak_mib:6.0f} MiB  | rg -j1 {ripgrep.seconds:6.1f} s | grep -F {grep.seconds:6.1f} s"
        )
        print(f"  {verdict}")
        report.append(
            f"| {ranks} | {gb:.2f} | {run.seconds:.1f} s | {run.peak_mib:.0f} MiB | {ripgrep.seconds:.1f} s | {grep.seconds:.1f} s "
            f"| {ratios[ranks]:.2f}x | {verdict[:60]} |"
        )
    smallest = args.work / f"incident_{args.ranks[0]}x{args.mb:g}MB"
    sample = sorted(smallest.glob("rank_*.log"))[:NAIVE_FILES]
    naive_mb_s = sum(p.stat().st_size for p in sample) / 1e6 / naive_loop(sample, [p.regex for p in patterns])
    ours_mb_s = costs[0][1] * 1e3 / costs[0][2]
    big = synthetic_patterns(args.work / "patterns_150", 150)
    with_400 = measure(forensics_cmd(smallest, args.work / "out400", "--patterns", str(big)))
    base = costs[0][2]
    tiny = args.work / "tiny"
    tiny.mkdir(exist_ok=True)
    (tiny / "rank_0.log").write_text("\n".join(OOM).replace("@R@", "0").replace("@D@", "0") + "\n")
    small = min((measure(forensics_cmd(tiny, args.work / "out_tiny")) for _ in range(3)), key=lambda r: r.seconds)

    largest = costs[-1]
    per_gb = [seconds / gb for _, gb, seconds in costs]
    goals = [
        ("whole analysis >= 0.5x the throughput of rg -j1 (largest)", f"{1 / ratios[largest[0]]:.2f}x", 1 / ratios[largest[0]] >= 0.5),
        (
            "whole analysis >= 35x the naive loop",
            f"{ours_mb_s / naive_mb_s:.0f}x ({naive_mb_s:.1f} MB/s naive)",
            ours_mb_s / naive_mb_s >= 35,
        ),
        (f"{largest[0]} ranks end to end < 60 s", f"{largest[2]:.1f} s", largest[2] < 60),
        (f"{largest[0]} ranks peak memory < 2 GiB", f"{peaks[largest[0]]:.0f} MiB", peaks[largest[0]] < 2048),
        (f"{largest[0]} ranks: right verdict (CUDA_OOM, rank {CULPRIT})", verdicts[largest[0]][:50], _right(verdicts[largest[0]])),
        ("cost linear in bytes (s/GB, largest / smallest)", f"{per_gb[-1] / per_gb[0]:.2f}", per_gb[-1] / per_gb[0] <= 1.3),
        ("401 patterns within 1.3x of 251", f"{with_400.seconds / base:.2f}x", with_400.seconds / base <= 1.3),
        ("a 3-line incident end to end < 1 s", f"{small.seconds:.2f} s", small.seconds < 1.0),
    ]
    report += ["", "| goal | measured | met |", "|---|---|---|"]
    report += [f"| {goal} | {value} | {'yes' if met else 'no'} |" for goal, value, met in goals]
    print()
    for goal, value, met in goals:
        print(f"{'MET ' if met else 'MISS'}  {goal}: {value}")
    with (HERE / "results.md").open("a") as handle:
        handle.write("\n".join(report) + "\n\n")
    print(f"\nrecorded in {HERE / 'results.md'}")


if __name__ == "__main__":
    main()
