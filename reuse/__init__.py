"""Results reused by content and model fingerprint: the reuse key of a record (keys.py, over the
model's fingerprint, fingerprint.py) and the bounded-memory index from a key to where its cached
result lives (index.py).

Groundwork: pure code, tested on its own; no worker or CLI uses it yet. It imports only schemas/,
the standard library and numpy, so any stage can take it.
"""
