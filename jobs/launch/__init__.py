"""`nearline run` on one machine: the embedded broker and worker processes it starts and stops
(local.py), the run itself, from submit to written results (runner.py), and signals that stop
it cleanly (signals.py).

What does not belong here: the workers' own loops (preprocess_app/, gpu_consumer/), and the
process helpers they use (kafka_io/: child processes, usable CPUs).
"""
