"""Incidents of a batch in a process of their own: `python -m forensics.batch.worker`.

Enters: Jobs as JSON, one per line on stdin. Leaves: each one's index row as one JSON line on
stdout, in order; anything else the analysis prints goes to stderr. The parent (batch/run.py)
sends the next job only after the last row, under a wall-clock timeout and an address-space
cap, so an incident that segfaults, exhausts memory or never ends costs that incident only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from forensics.batch.run import Job, run_job


def main() -> None:
    # Only rows travel on the real stdout: fd 1 itself now points at stderr, so neither Python
    # nor a native library printing to it can garble a row.
    rows = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        spec = json.loads(line)
        job = Job(
            spec["incident_id"],
            Path(spec["path"]),
            Path(spec["out"]),
            tuple(Path(p) for p in spec["pattern_dirs"]),
            figures=spec["figures"],
        )
        rows.write(json.dumps(run_job(job), default=str) + "\n")
        rows.flush()


if __name__ == "__main__":
    main()
