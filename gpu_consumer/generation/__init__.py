"""Generation on the GPU stage: causal LMs decode many sequences at once by continuous batching.

    requests.py             what one prompt record asks (token ids, sampling) and what it gets
                            (Completion)
    stops.py                where a completion ends: end-of-sequence ids, stop strings,
                            max_tokens (pure)
    sampling.py             seeded sampling per request, whatever runs beside it
    (the engines, their protocol and which one runs: gpu_consumer/engines/generation_*.py,
    vllm_engine.py, transformers_engine.py)
    main_thread.py          the worker's main thread given to the engine, the Kafka loop beside it
    step.py                 GenerationStep, the GPU loop's commit step for causal LMs (its main
                            thread), and which prompts it takes
    emit_thread.py          the step's emit thread: completions to results, and a failed engine
                            replaced, its prompts run alone
    in_flight.py            the prompts submitted and not finished, shared by the two threads
    sender.py               the producer of the step's results and dead letters, and its recovery

The engine decodes on its own thread; completions are detokenized and matched against stop
strings on the caller's thread (the post-process stage), so neither delays a decode step.
"""
