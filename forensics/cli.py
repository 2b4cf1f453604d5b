"""The `forensics` command: thin; parses options, calls the library, sets exit codes.

Exit codes (CONTRACT.md): 0 analysis completed, 2 usage or input error (one line on
stderr), 3 findings at or above --fail-on, 1 only for an internal bug.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from forensics.report.markup import inert
from forensics.schema import SEVERITY_ORDER

app = typer.Typer(
    name="forensics",
    help="Postmortems for failed, hung or slow distributed training runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
patterns_app = typer.Typer(help="The pattern catalog: list, explain, test, lint.", no_args_is_help=True)
app.add_typer(patterns_app, name="patterns")


def _version(show: bool) -> None:
    if show:
        from forensics import __version__

        typer.echo(f"forensics {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", callback=_version, is_eager=True)] = False,
) -> None:
    """Postmortems for failed, hung or slow distributed training runs."""


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


class AnalyzeFormat(StrEnum):
    text = "text"
    json = "json"
    html = "html"


class Engine(StrEnum):
    local = "local"
    ray = "ray"


class FailOn(StrEnum):
    warning = "warning"
    error = "error"
    critical = "critical"


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        typer.echo(f"forensics: {inert(message)}", err=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"forensics: error: {inert(message)}", err=True)
    return typer.Exit(code)


Figures = Annotated[
    bool,
    typer.Option("--figures/--no-figures", help="Draw figures/*.png; --no-figures skips matplotlib (most of a small incident's time)."),
]
PatternDirs = Annotated[
    list[Path] | None,
    typer.Option(
        "--patterns", help="A folder of your own pattern TOML files, added to the built-in catalog after validation (repeatable)."
    ),
]


def _catalog(user_dirs: list[Path] | None):
    """The built-in catalog plus the user's pattern folders, each validated; exit 2 on a bad one."""
    from forensics.catalog import load_full
    from forensics.catalog.load import CatalogError, load_catalog
    from forensics.catalog.validate import validate_catalog

    try:
        catalog = load_full(user_dirs or ())
        problems = [p for d in user_dirs or () for p in validate_catalog(load_catalog(d))]
    except CatalogError as exc:
        raise _fail(str(exc)) from None
    if problems:
        raise _fail(f"{len(problems)} problem(s) in --patterns: " + "; ".join(str(p) for p in problems[:5]))
    return catalog


@app.command()
def analyze(
    directory: Annotated[Path, typer.Argument(help="Incident folder (rank logs, NCCL output, traces, GPU dumps), or a single log file.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output folder (default: ./forensics-report/NAME/, NAME being the folder's or the file's name)."),
    ] = None,
    output_format: Annotated[
        AnalyzeFormat,
        typer.Option(
            "--format", help="'json': also print verdict.json on stdout; 'html': also write OUT/postmortem.html (self-contained)."
        ),
    ] = AnalyzeFormat.text,
    frames: Annotated[bool, typer.Option("--frames", help="Also write the frames as OUT/frames/*.parquet.")] = False,
    fail_on: Annotated[FailOn | None, typer.Option("--fail-on", help="Exit 3 when a finding of this severity or worse exists.")] = None,
    timings: Annotated[bool, typer.Option("--timings", help="Print where the time went, stage by stage, on stderr.")] = False,
    figures: Figures = True,
    pattern_dirs: PatternDirs = None,
) -> None:
    """Analyze one incident folder and write postmortem.md, verdict.json and figures/."""
    from forensics.analysis import InputError
    from forensics.flow import analyze as run_analysis
    from forensics.flow import timed
    from forensics.output import write_report
    from forensics.report.verdict_json import render_json

    name = directory.resolve().stem if directory.is_file() else directory.resolve().name
    target = out if out is not None else Path("forensics-report") / name
    if overlap := _overlap(directory, target):
        raise _fail(overlap)
    catalog = _catalog(pattern_dirs)
    try:
        analysis = run_analysis(directory, catalog, progress=_progress)
    except InputError as exc:
        raise _fail(str(exc)) from None
    try:
        with timed(analysis.incident, "report"):
            write_report(analysis, target, frames=frames, html=output_format == AnalyzeFormat.html, figures=figures)
    except OSError as exc:
        raise _fail(f"cannot write to {target}: {exc.strerror or exc}") from None
    if timings:
        _print_timings(analysis.incident.timings)
    verdict = analysis.verdict
    if output_format == AnalyzeFormat.json:
        typer.echo(render_json(analysis), nl=False)
    else:
        typer.echo(f"{verdict.category} ({verdict.state}, confidence {verdict.confidence:.2f}): {inert(verdict.summary)}")
        report = "postmortem.html" if output_format == AnalyzeFormat.html else "postmortem.md"
        typer.echo(f"report: {inert(target / report)}")
    if fail_on is not None:
        threshold = SEVERITY_ORDER[fail_on.value]
        severities = analysis.incident.findings.filter(analysis.incident.findings["role"] != "event")["severity"]
        if any(SEVERITY_ORDER.get(s, 0) >= threshold for s in severities.to_list()):
            raise typer.Exit(3)


def _print_timings(stages: list[tuple[str, float]]) -> None:
    """Stage, seconds and share of the total, slowest stages visible at a glance."""
    total = sum(seconds for _, seconds in stages) or 1.0
    typer.echo(f"{'stage':<24} {'seconds':>8} {'share':>6}", err=True)
    for stage, seconds in stages:
        typer.echo(f"{stage:<24} {seconds:>8.3f} {seconds / total:>6.1%}", err=True)
    typer.echo(f"{'total':<24} {total:>8.3f}", err=True)


def _overlap(directory: Path, out: Path) -> str | None:
    """Why OUT may not be used with DIR: the report must never mix with, or be read as, the input."""
    given, target = directory.resolve(), out.resolve()
    if target == given:
        return f"--out {out} is the incident folder itself: choose a folder outside it"
    if target.is_relative_to(given):
        return f"--out {out} lies inside the incident folder: the next run would read the report as input"
    if given.is_relative_to(target):
        return f"--out {out} contains the incident folder: choose a folder beside it"
    return None


TRACE_SHARES = [("idle_time_pctg", 7), ("compute_time_pctg", 9), ("non_compute_time_pctg", 10), ("comp_comm_overlap_pctg", 9)]


def _share(value: float | None, width: int) -> str:
    """A percentage right-aligned in `width`, or a dash where there is none (no kernel time)."""
    return f"{value:>{width}.2f}" if value is not None else f"{'—':>{width}}"


@app.command()
def traces(
    directory: Annotated[Path, typer.Argument(help="Folder holding torch.profiler traces (*.json, *.json.gz).")],
    output_format: Annotated[OutputFormat, typer.Option("--format", help="'json' for the contract's per-rank list.")] = OutputFormat.text,
) -> None:
    """Per-rank GPU time breakdown of profiler traces, with HTA's definitions."""
    import polars as pl

    from forensics.discover import discover
    from forensics.ingest.traces import load_traces
    from forensics.passes.trace_breakdown import trace_breakdown
    from forensics.schema import InputKind, InputStatus

    if not directory.is_dir():
        raise _fail(f"{directory} is not a directory")
    inputs = discover(directory).filter((pl.col("kind") == InputKind.TRACE) & pl.col("status").is_null())
    loads = [t for t in load_traces([directory / p for p in inputs["path"]]) if t.status != InputStatus.SKIPPED]
    rows = trace_breakdown(loads)
    if not rows:
        raise _fail(f"no readable profiler trace under {directory}")
    if output_format == OutputFormat.json:
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(f"{'rank':>5} {'kernel ms':>11} {'idle %':>7} {'compute %':>9} {'non-comp %':>10} {'overlap %':>9}")
    for r in rows:
        rank = "—" if r["rank"] is None else str(r["rank"])
        shares = [_share(r[key], width) for key, width in TRACE_SHARES]
        typer.echo(f"{rank:>5} {r['kernel_time_us'] / 1000:>11.1f} " + " ".join(shares))


@app.command()
def batch(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output folder for incidents/<id>/, findings/<id>.parquet, index.parquet, fleet.md.")
    ],
    roots: Annotated[
        list[Path] | None, typer.Argument(help="Incident archives: every folder that holds files, at any depth, is one incident.")
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel workers (local engine).")] = 2,
    engine: Annotated[Engine, typer.Option("--engine", help="'local' process pool or a 'ray' cluster.")] = Engine.local,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds one incident may take (local engine).")] = 900,
    memory_gb: Annotated[float, typer.Option("--memory-gb", min=0.5, help="Address space one incident may use, GiB (local engine).")] = 8,
    force: Annotated[bool, typer.Option("--force", help="Redo incidents unchanged since the last run into OUT.")] = False,
    figures: Figures = True,
    manifest: Annotated[
        Path | None,
        typer.Option(
            "--manifest",
            help="CSV or JSON naming incidents: a 'path' column, optional id, cluster, user, model, world_size, start (ISO).",
        ),
    ] = None,
    pattern_dirs: PatternDirs = None,
) -> None:
    """Analyze every incident under ROOT(s) or named in a manifest; write per-incident reports and a fleet summary."""
    from forensics.batch.fleet import write_fleet
    from forensics.batch.manifest import ManifestError, read_manifest
    from forensics.batch.run import Limits, plan, plan_manifest, run_local, run_ray

    roots = roots or []
    if not roots and manifest is None:
        raise _fail("give incident archives (ROOTS) or --manifest")
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise _fail(f"not a directory: {', '.join(missing)}")
    _catalog(pattern_dirs)  # refuse a bad pattern folder before the first incident
    dirs = tuple(d.resolve() for d in pattern_dirs or ())
    taken: set[str] = set()
    work = plan(roots, out, dirs, taken, figures)
    if manifest is not None:
        try:
            work += plan_manifest(read_manifest(manifest), out, dirs, taken, figures)
        except ManifestError as exc:
            raise _fail(str(exc)) from exc
    if not work:
        raise _fail("no incident folders found")
    if engine == Engine.ray:
        if importlib.util.find_spec("ray") is None:
            raise _fail("the ray engine needs Ray: pip install 'forensics[ray]'")
        rows = run_ray(work, _progress)
    else:
        rows = run_local(work, jobs, _progress, Limits(timeout, int(memory_gb * (1 << 30))), force)
    index = write_fleet(rows, out)
    failed = index.filter(index["error"].is_not_null()).height
    typer.echo(f"{index.height} incidents ({failed} could not be analyzed): {out / 'fleet.md'}")


@patterns_app.command("list")
def patterns_list(
    output_format: Annotated[OutputFormat, typer.Option("--format", help="'json' for machine use.")] = OutputFormat.text,
    pattern_dirs: PatternDirs = None,
) -> None:
    """List every catalog id: line patterns, then the ids passes derive (role 'derived')."""
    catalog = _catalog(pattern_dirs)
    rows = [
        {"id": p.id, "name": p.name, "category": p.category, "role": p.role, "severity": p.severity, "title": p.title}
        for p in catalog.patterns
    ] + [
        {"id": d.id, "name": d.name, "category": d.category or None, "role": "derived", "severity": None, "title": d.title}
        for d in catalog.derived
    ]
    if output_format == OutputFormat.json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['id']:8} {row['category'] or 'varies':18} {row['role']:10} {row['severity'] or '':8} {row['title']}")


def _bullets(heading: str, items: tuple[str, ...]) -> list[str]:
    return [heading, *[f"  - {item}" for item in items]] if items else []


@patterns_app.command("show")
def patterns_show(
    pattern_id: Annotated[str, typer.Argument(help="Catalog id, e.g. OOM001, HANG001 or GPU-XID79.")],
    pattern_dirs: PatternDirs = None,
) -> None:
    """Explain one catalog id: what it detects, why it matters, what to do, its examples."""
    from forensics.catalog import Derived

    entry = _catalog(pattern_dirs).entry(pattern_id)
    if entry is None:
        raise _fail(f"no catalog entry with id {pattern_id!r} (see 'forensics patterns list')")
    if isinstance(entry, Derived):
        header = f"made by a pass ({', '.join(entry.emitted_by)}), category {entry.category or 'set by the pass from context'}"
        tail = ["numbered: the emitted id carries a code after this id"] if entry.numbered else []
    else:
        header = f"category {entry.category}, role {entry.role}, severity {entry.severity}, tier {entry.tier}"
        tail = [
            f"regex: {entry.regex}",
            *_bullets("Matches, e.g.:", entry.match_examples),
            *_bullets("Does not match, e.g.:", entry.no_match_examples),
        ]
    lines = [
        f"{entry.id} ({entry.name}): {entry.title}",
        header,
        "",
        entry.meaning,
        "",
        *_bullets("Likely causes:", entry.causes),
        *_bullets("What to do now:", entry.immediate),
        *_bullets("How to prevent it:", entry.structural),
        *_bullets("References:", entry.references),
        "",
        *tail,
    ]
    typer.echo(inert("\n".join(lines).rstrip()))


@patterns_app.command("test")
def patterns_test(
    pattern_id: Annotated[str | None, typer.Argument(help="Run only this pattern's examples.")] = None,
    line: Annotated[str | None, typer.Option("--line", help="Which patterns match this line?")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Which patterns match which lines of this file?")] = None,
    pattern_dirs: PatternDirs = None,
) -> None:
    """Run the embedded examples through the real matcher, or ask which patterns match a
    line (--line) or the lines of a file (--file). Exit 1 on a failing example or no match."""
    import polars as pl

    from forensics.catalog.match import match_catalog
    from forensics.catalog.validate import example_results

    catalog = _catalog(pattern_dirs)
    patterns = catalog.patterns
    if pattern_id is not None:
        patterns = [p for p in patterns if p.id.upper() == pattern_id.upper()]
        if not patterns:
            raise _fail(f"no line pattern with id {pattern_id!r} (derived ids have no examples to run)")
    if line is not None or file is not None:
        texts = [line] if line is not None else _file_lines(file)
        lines = pl.DataFrame(
            {"file": "-", "line": range(1, len(texts) + 1), "text": texts}, schema={"file": pl.String, "line": pl.Int64, "text": pl.String}
        )
        found = match_catalog(lines, patterns)
        for row in found.iter_rows(named=True):
            where = f"{row['line']}: " if file is not None else ""
            typer.echo(inert(f"{where}{row['pattern']:8} {row['category']:18} {row['role']:10} {row['title']}  {row['captures']}"))
        typer.echo(f"{found.height} match(es) over {len(texts)} line(s)")
        if found.is_empty():
            raise typer.Exit(1)
        return
    problems = example_results(patterns)
    for problem in problems:
        typer.echo(inert(str(problem)), err=True)
    examples = sum(len(p.match_examples) + len(p.no_match_examples) for p in patterns)
    typer.echo(f"{examples - len(problems)} passed, {len(problems)} failed")
    if problems:
        raise typer.Exit(1)


def _file_lines(path: Path) -> list[str]:
    try:
        return path.read_bytes().decode("utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror or exc}") from None


@patterns_app.command("validate")
def patterns_validate(pattern_dirs: PatternDirs = None) -> None:
    """Lint the catalog (and --patterns folders): fields, regex syntax, literals, examples,
    and that every derived id is still emitted by the modules it names."""
    from forensics.catalog.validate import validate_catalog, validate_derived

    catalog = _catalog(pattern_dirs)
    problems = validate_catalog(catalog.patterns) + validate_derived(catalog.derived)
    for problem in problems:
        typer.echo(inert(str(problem)), err=True)
    typer.echo(f"{len(catalog.patterns)} patterns, {len(catalog.derived)} derived ids, {len(problems)} problems")
    if problems:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
