"""The control plane: jobs as durable objects and everything users do with them.

The job domain lives here: submit.py (inputs to raw topics, registered), registry.py (the jobs
table, JobState, status folded from the stage topics), liveness.py, dlq.py, replay.py (topics
from an offset or a time, offset resets), reprocess.py, progress.py, exit_codes.py; what
batch-API users ask of a job: job_terms.py (labels, completion window, webhook), job_records.py
(a submission's record ids, from its raw topic or input). Module families:
cli/ (the command line), scheduling/ (recurring jobs), notifications/ (webhooks when a job
ends), reports/ (profile and HTML report), launch/ (`nearline run` on one machine).

What does not belong here: a job's results read and written out (results/), Kafka clients and
what every worker process follows (kafka_io/), the process's own runtime (runtime/), record
schemas (schemas/), preprocessing and inference (preprocess_app/, gpu_consumer/). Imports flow
one way: jobs -> model_repository, results -> stages (producers, preprocess_app, gpu_consumer)
-> kafka_io -> schemas; jobs may import any of them, none imports jobs (tests/test_layout.py).
"""
