"""The control plane: jobs as durable objects and everything users do with them.

The job domain lives here: submit.py (inputs to raw topics, registered), registry.py (the jobs
table, JobState, status folded from the stage topics), results.py and spill.py (a job's outcome,
in input order, written as JSON Lines), columnar.py (the same as Parquet or Arrow columns),
output.py (where and in which format results go), liveness.py, dlq.py, replay.py (topics from
an offset or a time, offset resets), reprocess.py, progress.py, exit_codes.py; what batch-API
users ask of a job: job_terms.py (labels, completion window, webhook), usage.py,
openai_output.py and error_file.py (OpenAI's output and error shapes, --errors), job_records.py
(a submission's record ids). Module families:
cli/ (the command line), scheduling/ (recurring jobs), notifications/ (webhooks when a job
ends), reports/ (profile and HTML report), launch/ (`nearline run` on one machine).

What does not belong here: Kafka clients and what every worker process follows or needs, such
as cancellations and its CPUs (kafka_io/), record schemas (schemas/), preprocessing and
inference (preprocess_app/, gpu_consumer/). Imports flow one way: jobs -> stages (producers,
preprocess_app, gpu_consumer) -> kafka_io -> schemas; jobs may import any of them, none imports
jobs (tests/test_layout.py).
"""
