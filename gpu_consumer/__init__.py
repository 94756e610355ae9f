"""The GPU stage: tensors.<model> records in, results and dead letters out, batched for the engine.

The GPU loop, step by step, and where each step lives:

    poll windows   windows.py: windows()            a poll window: --max-window records, or what
                                                    came within --max-linger-ms
    prepare        window_inference.py: prepare()            decode, check, sort by length, cut into
                                                    padded executed batches (batcher.py)
    execute        window_inference.py: execute(), run on pipeline.py's engine thread (engines/: protocol.py,
                   the one protocol; factory.py picks a backend: onnxruntime_engine.py,
                   torch_engine.py, tensorrt_engine.py)
    emit           window_inference.py: Emitter, run on pipeline.py's emit thread: postprocess, encode,
                   produce; the broker's delivery reports confirm each window's outputs
    commit         steps.py: the commit step the loop hands each window to owns the commit.
                   PipelinedStep._commit() is the one place offsets are written: those of the
                   longest prefix of windows whose every output is confirmed (ledger.py:
                   Ledger.take_committable()). --exactly-once swaps in TransactionalStep, whose
                   _commit() commits them inside the transaction (kafka_io/transactions.py).

worker.py holds the loop (run(): one loop for both steps; serve(): the worker process) and says
the commit rule in full; pipeline.py keeps at most --max-windows-in-flight windows between poll and
commit. The records' schemas are schemas/avro/tensor_record.avsc (in), inference_result.avsc and
dead_letter.avsc (out). Also here: poison isolation (isolation.py: a failing batch bisected down
to the records that fail it), and what the worker reports to Prometheus (metrics.py).

What does not belong here: Kafka clients (kafka_io/), record schemas (schemas/), job state (jobs/),
models into the repository (model_repository/: export, import, parity checks).
"""

# The engines --engine names; here, not in engines/, so the CLI lists them without importing numpy.
# Encoders run on the first four (engines/factory.py), causal LMs on auto or the last two
# (engines/generation_factory.py).
ENCODER_ENGINES = ("tensorrt", "torch", "onnxruntime")
GENERATION_ENGINES = ("vllm", "transformers")
ENGINES = ("auto", *ENCODER_ENGINES, *GENERATION_ENGINES)
