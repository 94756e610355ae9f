"""The GPU stage: engines behind one protocol (engine.py), padding (batcher.py), the pure batch
handler (handler.py), the consume-infer-produce-commit loop (worker.py) and what it reports to
Prometheus (metrics.py).

What does not belong here: Kafka clients (kafka_io/), record schemas (schemas/), job state (jobs/).
"""

# The engines --engine names; here, not in engine.py, so the CLI lists them without importing numpy.
ENGINES = ("auto", "tensorrt", "torch", "onnxruntime")
