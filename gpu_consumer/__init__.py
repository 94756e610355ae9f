"""The GPU stage: engines behind one protocol (engine.py), padding (batcher.py), the pure batch
handler (handler.py) and the consume-infer-produce-commit loop (worker.py)."""
