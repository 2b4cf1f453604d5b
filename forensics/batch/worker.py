"""One incident of a batch in a process of its own: `python -m forensics.batch.worker`.

Enters: a Job as JSON on stdin. Leaves: its index row as JSON on stdout. The parent runs
it under a wall-clock timeout and an address-space cap (batch/run.py), so an incident that
segfaults, exhausts memory or never ends costs that incident only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from forensics.batch.run import Job, run_job


def main() -> None:
    spec = json.loads(sys.stdin.read())
    job = Job(spec["incident_id"], Path(spec["path"]), Path(spec["out"]), tuple(Path(p) for p in spec["pattern_dirs"]))
    sys.stdout.write(json.dumps(run_job(job), default=str))


if __name__ == "__main__":
    main()
