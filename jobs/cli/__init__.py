"""The `nearline` command line: parse, call the job domain, print, and map errors to exit codes.

What belongs here: click commands and options (main.py: the root group; job_submit.py: run,
submit, produce; job_watch.py: jobs list, status, cancel; job_results.py: results, profile,
report; workers.py: workers, broker, models; ops.py: replay, offsets, dlq, reprocess;
schedule.py: schedules; options.py: shared option decorators; validators.py: their checks), the
one error-to-exit code mapping (group.NearlineGroup; the codes are jobs/exit_codes.py, which the
errors that end a wait also carry).
What does not: anything a command computes. A command body parses, calls one function of jobs/,
gpu_consumer/ or kafka_io/ and prints what it returns.
"""

import os

# numpy's OpenBLAS starts a thread per core as numpy is imported: ~0.06 CPU-s of a command's ~0.3
# on a 2-core VM (more with more cores), 2 us a record of a 30,000-record `submit --wait`. No
# command or worker does linear algebra that threads would speed up (torch and ONNX Runtime keep
# their own pools); a user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from jobs.cli.main import cli, main

__all__ = ["cli", "main"]
