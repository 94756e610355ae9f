"""The worker process's runtime, apart from Kafka: the /metrics endpoint (where it is served,
metrics_endpoint.py; the server, metrics_http.py), child processes that die with their parent
(children.py), how many CPUs this process may use (cpus.py, which sizes the workers' thread pools)
and the garbage collector settled after start-up (heap.py).

Below every other package of ours: it imports none of them, so kafka_io/, the stages and jobs/
all stand on it. What talks to Kafka is kafka_io/'s; the metrics the workers export (records
consumed and produced, lag, dead letters) are kafka_io/metrics.py's, served by this endpoint.
"""
