"""Results reused by content and model fingerprint: the reuse key of a record (keys.py, over the
model's fingerprint, fingerprint.py), the bounded-memory index from a key to where its cached
result lives (index.py) and the local store of cached results on disk (store.py).

The preprocess worker uses it (preprocess_app/reuse.py) to answer a record from an earlier job's
result (docs/reuse.md). It imports only schemas/, the standard library and numpy, so any stage can
take it.
"""
