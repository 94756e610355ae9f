"""`nearline run` on one machine: the embedded broker and worker processes it starts and stops
(local.py), the run itself, from submit to written results (runner.py), and signals that stop
it cleanly (signals.py). Also how many CPUs a worker on this host may use (cpus.py), which sizes
the workers' thread pools by default.

What does not belong here: the workers' own loops (preprocess_app/, gpu_consumer/).
"""
