"""The sink: a job's results as readers see them, from the topics to a file.

outcome.py (one entry per record, however often the topics repeat it; JSON of a result),
spill.py (the job's results and dead letters between reading and writing, in memory or on
disk, in input order), formats.py (the one list of output formats, each with its writer, one
shape for all, and its error file), job_output.py (what a writer is handed), rows.py (JSON Lines,
or columns, written a chunk of rows at a time), columnar.py (Parquet and Arrow IPC), output.py
(where `-o` goes: checked, then written atomically), kept_columns.py (a table's kept input
columns), usage.py (what a job used), timings.py (the stage timestamps `profile` and `report`
read), submitted.py (a submission's records by id), error_file.py and openai_batch.py (the error
file and OpenAI's batch output shape).

It never imports the control plane (jobs/): the registry's job is handed in by the caller
(tests/test_layout.py).
"""
