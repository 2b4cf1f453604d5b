"""Exception and stack steps over findings and lines: frame context, uncaught exceptions, stack dumps, DETAIL collective mismatches."""

from __future__ import annotations

from forensics.incident import Incident
from forensics.passes.collective_mismatch import odd_rank_out
from forensics.passes.duplicate_ranks import ranks_taken_twice
from forensics.passes.extension_build import stuck_at_extension_build
from forensics.passes.native_crashes import classify_native_crashes
from forensics.passes.stacks import odd_stack_out, stack_waits, what_the_stalled_rank_did
from forensics.passes.traceback_context import (
    classify_by_frames,
    demote_nonfatal,
    demote_overridden,
    missing_checkpoint_keys,
    uncaught_exceptions,
)
from forensics.steps.common import Progress


def traceback_context_pass(incident: Incident, progress: Progress) -> None:
    """Unrecognized exceptions and native crashes classified by the subsystem they happened in."""
    context = classify_by_frames(incident.lines, incident.findings)
    incident.findings = demote_overridden(incident.findings, context, incident.lines)
    incident.add_findings(context)
    incident.add_findings(classify_native_crashes(incident.lines, incident.findings))
    incident.add_findings(missing_checkpoint_keys(incident.lines, incident.findings))
    incident.add_findings(uncaught_exceptions(incident.lines, incident.findings))
    incident.findings = demote_nonfatal(incident.findings, incident.lines)


def collective_mismatch_pass(incident: Incident, progress: Progress) -> None:
    """The rank its peers' DETAIL fingerprint checks name as running another collective, and ranks
    that two processes took."""
    incident.add_findings(odd_rank_out(incident.findings))
    incident.add_findings(ranks_taken_twice(incident.lines))


def stack_dump_pass(incident: Incident, progress: Progress) -> None:
    """What each thread of a py-spy or faulthandler dump was waiting in, the odd rank out, and logs that
    all stop waiting on an extension build lock."""
    waits = stack_waits(incident.lines)
    incident.add_findings(waits)
    incident.add_findings(odd_stack_out(incident.lines, waits))
    incident.add_findings(stuck_at_extension_build(incident.lines))


def stalled_rank_pass(incident: Incident, progress: Progress) -> None:
    """A rank blamed for a hang takes the category of what its own stack dump shows it doing."""
    incident.findings = what_the_stalled_rank_did(incident.findings)
