"""Generation on the GPU stage: causal LMs decode many sequences at once by continuous batching.

    requests.py   what one prompt record asks (token ids, sampling) and what it gets (Completion)
    stops.py      where a completion ends: end-of-sequence ids, stop strings, max_tokens (pure)
    engine.py     the generation engine protocol and the transformers backend
                  (ContinuousBatchingManager: paged KV cache, prefix sharing, new sequences join
                  the running batch at the next decode step)

The engine decodes on its own thread; completions are detokenized and matched against stop
strings on the caller's thread (the post-process stage), so neither delays a decode step.
"""
