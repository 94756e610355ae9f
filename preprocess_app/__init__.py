"""The CPU stage: raw.text / raw.image records in, tensors.<model> records and dead letters out.

What belongs here: pure preprocessing (text.py: tokenize; image.py: decode, resize, crop), the
outputs it emits (outputs.py), the tokenizers and image specs it loads per model (models.py),
its faust wiring (app.py: create_app, and Batches: backpressure, the step, the producer), the
commit rule (acks.py: a batch's events are acked once its outputs are stored) and what it
reports to Prometheus (metrics.py). What does not: Kafka client settings (kafka_io/), record
schemas (schemas/), batching for the engine (gpu_consumer/).
"""
