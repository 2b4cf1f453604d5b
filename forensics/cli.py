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


@app.command()
def analyze(
    directory: Annotated[Path, typer.Argument(help="Incident folder (rank logs, NCCL output, traces, GPU dumps), or a single log file.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output folder (default: ./forensics-report/NAME/, NAME being the folder's or the file's name).")] = None,
    output_format: Annotated[OutputFormat, typer.Option("--format", help="Also print verdict.json on stdout with 'json'.")] = OutputFormat.text,
    frames: Annotated[bool, typer.Option("--frames", help="Also write the frames as OUT/frames/*.parquet.")] = False,
    fail_on: Annotated[FailOn | None, typer.Option("--fail-on", help="Exit 3 when a finding of this severity or worse exists.")] = None,
    timings: Annotated[bool, typer.Option("--timings", help="Print where the time went, stage by stage, on stderr.")] = False,
) -> None:
    """Analyze one incident folder and write postmortem.md, verdict.json and figures/."""
    from forensics.analyze import InputError, timed
    from forensics.analyze import analyze as run_analysis
    from forensics.report.verdict_json import render_json
    from forensics.output import write_report

    name = directory.resolve().stem if directory.is_file() else directory.resolve().name
    target = out if out is not None else Path("forensics-report") / name
    if overlap := _overlap(directory, target):
        raise _fail(overlap)
    try:
        analysis = run_analysis(directory, progress=_progress)
    except InputError as exc:
        raise _fail(str(exc)) from None
    try:
        with timed(analysis.incident, "report"):
            write_report(analysis, target, frames=frames)
    except OSError as exc:
        raise _fail(f"cannot write to {target}: {exc.strerror or exc}") from None
    if timings:
        _print_timings(analysis.incident.timings)
    verdict = analysis.verdict
    if output_format == OutputFormat.json:
        typer.echo(render_json(analysis), nl=False)
    else:
        typer.echo(f"{verdict.category} ({verdict.state}, confidence {verdict.confidence:.2f}): {inert(verdict.summary)}")
        typer.echo(f"report: {inert(target / 'postmortem.md')}")
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
    from forensics.passes.trace_breakdown import trace_summary_json

    if not directory.is_dir():
        raise _fail(f"{directory} is not a directory")
    rows = trace_summary_json(directory)
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
    roots: Annotated[list[Path], typer.Argument(help="Folders of incidents: each subfolder is one incident.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for incidents/<id>/, index.parquet, fleet.md.")],
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel workers (local engine).")] = 2,
    engine: Annotated[Engine, typer.Option("--engine", help="'local' process pool or a 'ray' cluster.")] = Engine.local,
) -> None:
    """Analyze every incident under ROOT(s); write per-incident reports and a fleet summary."""
    from forensics.batch.fleet import write_fleet
    from forensics.batch.run import plan, run_local, run_ray

    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise _fail(f"not a directory: {', '.join(missing)}")
    work = plan(roots, out)
    if not work:
        raise _fail("no incident folders found")
    if engine == Engine.ray:
        if importlib.util.find_spec("ray") is None:
            raise _fail("the ray engine needs Ray: pip install 'forensics[ray]'")
        rows = run_ray(work, _progress)
    else:
        rows = run_local(work, jobs, _progress)
    index = write_fleet(rows, out)
    failed = index.filter(index["error"].is_not_null()).height
    typer.echo(f"{index.height} incidents ({failed} could not be analyzed): {out / 'fleet.md'}")


@patterns_app.command("list")
def patterns_list(
    output_format: Annotated[OutputFormat, typer.Option("--format", help="'json' for machine use.")] = OutputFormat.text,
) -> None:
    """List every pattern: id, category, role, severity, title."""
    from forensics.catalog import load_catalog

    catalog = load_catalog()
    if output_format == OutputFormat.json:
        rows = [{"id": p.id, "name": p.name, "category": p.category, "role": p.role, "severity": p.severity, "title": p.title} for p in catalog]
        typer.echo(json.dumps(rows, indent=2))
        return
    for p in catalog:
        typer.echo(f"{p.id:8} {p.category:18} {p.role:10} {p.severity:8} {p.title}")


@patterns_app.command("show")
def patterns_show(pattern_id: Annotated[str, typer.Argument(help="Pattern id, e.g. OOM001.")]) -> None:
    """Explain one pattern: what it detects, why it matters, what to do."""
    from forensics.catalog import load_catalog

    catalog = {p.id.upper(): p for p in load_catalog()}
    pattern = catalog.get(pattern_id.upper())
    if pattern is None:
        raise _fail(f"no pattern with id {pattern_id!r} (see 'forensics patterns list')")
    lines = [
        f"{pattern.id} ({pattern.name}): {pattern.title}",
        f"category {pattern.category}, role {pattern.role}, severity {pattern.severity}",
        "",
        pattern.meaning,
        "",
        "Likely causes:",
        *[f"  - {c}" for c in pattern.causes],
        "What to do now:",
        *[f"  - {c}" for c in pattern.immediate],
        "How to prevent it:",
        *[f"  - {c}" for c in pattern.structural],
        "References:",
        *[f"  - {c}" for c in pattern.references],
        "",
        f"regex: {pattern.regex}",
    ]
    typer.echo("\n".join(lines))


@patterns_app.command("test")
def patterns_test() -> None:
    """Run every pattern's embedded examples through the real matcher."""
    from forensics.catalog import load_catalog
    from forensics.catalog.validate import example_results

    catalog = load_catalog()
    problems = example_results(catalog)
    for problem in problems:
        typer.echo(str(problem), err=True)
    examples = sum(len(p.match_examples) + len(p.no_match_examples) for p in catalog)
    typer.echo(f"{examples - len(problems)} passed, {len(problems)} failed")
    if problems:
        raise typer.Exit(1)


@patterns_app.command("validate")
def patterns_validate() -> None:
    """Lint the catalog: fields, regex syntax, literals, examples."""
    from forensics.catalog import load_catalog
    from forensics.catalog.load import CatalogError
    from forensics.catalog.validate import validate_catalog

    try:
        catalog = load_catalog()
    except CatalogError as exc:
        raise _fail(str(exc), code=1) from None
    problems = validate_catalog(catalog)
    for problem in problems:
        typer.echo(str(problem), err=True)
    typer.echo(f"{len(catalog)} patterns, {len(problems)} problems")
    if problems:
        raise typer.Exit(1)



if __name__ == "__main__":
    app()
