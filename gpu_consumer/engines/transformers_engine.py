"""The transformers generation engine: a causal LM from the model repository on transformers'
continuous batching (needs no install beyond transformers).

transformers' ContinuousBatchingManager decodes on a thread of its own: a request added between
two decode steps joins the running batch at the next one, a finished sequence leaves it at once,
its KV cache lives in fixed-size blocks (a budget of `kv_cache_tokens`; a request waits while the
blocks are spent), and blocks holding a prompt prefix another request already computed are
shared (prefix sharing: a system prompt computed once). Greedy sequences (temperature 0) are
token-identical to `generate()` one prompt at a time whatever runs beside them; sampled ones draw
each token by their own seed (sampling.py), so a seeded request repeats its text beside any other.

This module's `completions()` runs on the caller's thread, the post-process stage: it reads the
manager's outputs, detokenizes them and matches stop strings (stops.py), so that work never holds
a decode step. A request with stop strings is streamed (an output per decoded token) so it can be
stopped as soon as a stop string appears; the others come back once, finished.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
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
from gpu_consumer.generation.sampling import seeded_sampler
from gpu_consumer.generation.stops import StopWatch, finished
from model_repository.config import ModelConfig

log = logging.getLogger(__name__)


def batching_config(limits: GenerationSettings) -> Any:
    """transformers' ContinuousBatchingConfig for our limits (the benchmarks' engine alone runs with
    it too): its block size is `page_size` from transformers 5.18, `block_size` before (5.17, the
    GPU image's)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    fields = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    page: dict[str, Any] = {"page_size" if "page_size" in fields else "block_size": limits.page_size}
    return ContinuousBatchingConfig(
        num_blocks=kv_blocks(limits),
        max_batch_tokens=limits.step_tokens,
        max_requests_per_batch=limits.max_sequences,
        allow_block_sharing=limits.prefix_sharing,
        seed=0,
        **page,
    )


class TransformersEngine:
    """A causal LM from the model repository on transformers' continuous batching: the CPU in
    float32, CUDA in bfloat16 (docs/guarantees.md: greedy parity with the CPU is not promised there)."""

    name = "transformers"

    def __init__(
        self, config: ModelConfig, limits: GenerationSettings | None = None, device: str | None = None
    ) -> None:
        spec = generation_of(config)
        limits = limits or GenerationSettings()
        self.max_sequences = limits.max_sequences
        self.kv_tokens = kv_blocks(limits) * limits.page_size
        self._eos = frozenset(spec.eos_token_ids)
        try:
            import torch
            from tokenizers import Tokenizer
            from transformers import AutoModelForCausalLM, GenerationConfig
            from transformers.utils import logging as transformers_logging
        except ImportError as exc:
            raise EngineLoadError(
                f"generation needs torch and transformers: pip install 'nearline[export]' ({exc.name})"
            ) from None
        transformers_logging.disable_progress_bar()  # a worker's log is not a terminal
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.device, self.precision = device, str(dtype).removeprefix("torch.")  # its results' cache keys
        folder = config.generator_path
        try:
            self._tokenizer = Tokenizer.from_file(str(config.tokenizer_path))
            model: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, attn_implementation="sdpa")
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise EngineLoadError(f"{config.name}:{config.version}: cannot load {folder}: {exc}") from None
        model = model.to(device).eval()
        generation = GenerationConfig(
            do_sample=False,
            eos_token_id=sorted(self._eos) or None,
            pad_token_id=config.tokenizer.pad_id if config.tokenizer else None,
            max_new_tokens=spec.default_max_tokens,
        )
        self._params: dict[str, SamplingParams] = {}  # in flight, by key (the sampler reads it too)
        self._manager: Any = model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=batching_config(limits)
        )
        # Sampled requests draw their tokens by their own seeds (sampling.py), before the manager's
        # threads start: the processor's argument rows are allocated then.
        processors = self._manager.logit_processor
        processors.logits_processor.append(seeded_sampler(self._params.get))
        processors.tensors_required += 1
        processors.do_processing = True
        self.busy_s = 0.0  # seconds the engine's thread spent in decode steps: the engine busy figure
        step = self._manager._generation_step

        def timed_step() -> None:
            started = time.perf_counter()
            try:
                step()
            finally:
                self.busy_s += time.perf_counter() - started

        self._manager._generation_step = timed_step
        self._lock = threading.Lock()
        self._prompt_tokens: dict[str, int] = {}
        self._watches: dict[str, StopWatch] = {}
        self._cached: dict[str, int] = {}  # prompt tokens served from shared blocks, by key (engine thread)
        self._manager.start()

    def warmup(self) -> None:
        fatal = self._manager.background_thread_status
        warm_up(self, self._eos, lambda: self._failure() if fatal.fatal_error is not None else None)
        self._count_cached_prompts()

    def submit(self, request: GenerationRequest) -> None:
        params = request.params
        if not params.greedy and params.seed is None:  # sampled as asked, not repeatable
            params = replace(params, seed=secrets.randbits(63))
        with self._lock:
            self._params[request.key] = params
            self._prompt_tokens[request.key] = len(request.prompt)
            if params.stop:
                self._watches[request.key] = StopWatch(params, self.decode)
        accepted = self._manager.add_request(
            list(request.prompt),
            request_id=request.key,
            max_new_tokens=params.max_tokens,
            eos_token_id=sorted(self._eos) or -1,
            streaming=bool(params.stop),
        )
        if accepted is None:  # the manager's thread has stopped: a fault, not the request's
            raise GenerationFailedError(f"the generation engine refused a request: {self._failure()}")

    def cancel(self, key: str) -> None:
        with self._lock:
            if self._params.pop(key, None) is None:
                return
            self._forget(key)  # outputs still coming for it find no params: dropped
            self._cached.pop(key, None)
        self._manager.cancel_request(key)

    def completions(self, timeout_s: float) -> list[Completion]:
        out: list[Completion] = []
        wait = timeout_s
        while True:
            output = self._manager.get_result(timeout=wait)
            if output is None:
                if not out and self._manager.background_thread_status.fatal_error is not None:
                    raise GenerationFailedError(f"the generation engine stopped: {self._failure()}")
                return out
            wait = 0.0  # drain what is there, without waiting again
            done = self._completion(output)
            if done is not None:
                out.append(done)

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=True))

    def close(self) -> None:
        """Stop at once: sequences still decoding are dropped (their records are not committed, so
        Kafka gives them to the next owner), where a flush would finish every one of them first."""
        self._manager.stop(block=True, timeout=30, hard_stop=True)

    def _completion(self, output: Any) -> Completion | None:
        key: str = output.request_id
        tokens: list[int] = output.generated_tokens
        with self._lock:
            params = self._params.get(key)
            watch = self._watches.get(key)
        if params is None:
            return None  # cancelled, or stopped by a stop string: what still comes is dropped
        if not output.is_finished():
            ending = watch.check(tokens) if watch is not None else None
            if ending is None:
                return None
            done = self._done(key, tokens[: ending.tokens], ending.text, ending.finish_reason)
            self.cancel(key)  # the stop string is there: decode nothing more for it
            return done
        with self._lock:
            self._params.pop(key, None)
        if output.error is not None or int(output.status) != 3:  # 3: RequestStatus.FINISHED
            completion = Completion(key, (), "", "", len(output.prompt_ids), error=str(output.error or output.status))
            with self._lock:
                self._forget(key)
            return completion
        ending = finished(tokens, params, self._eos, self.decode)
        return self._done(key, tokens[: ending.tokens], ending.text, ending.finish_reason)

    def _done(self, key: str, tokens: Sequence[int], text: str, reason: str) -> Completion:
        with self._lock:
            prompt = self._prompt_tokens.get(key, 0)
            cached = self._cached.pop(key, 0)
            self._forget(key)
        return Completion(key, tuple(tokens), text, reason, prompt, min(cached, prompt))

    def _forget(self, key: str) -> None:
        self._prompt_tokens.pop(key, None)
        self._watches.pop(key, None)

    def _count_cached_prompts(self) -> None:
        """Count, per request, the prompt tokens the cache served from blocks another request
        computed (transformers keeps no such count on its outputs: its cache's prefix search is
        wrapped once the batch processor exists, which the warm-up request made sure of)."""
        processor = getattr(self._manager, "batch_processor", None)
        cache: Any = getattr(processor, "cache", None)
        search = getattr(cache, "search_prefix_match", None)
        if search is None:
            log.warning("prefix sharing counts unavailable: transformers' cache has no search_prefix_match")
            return

        def counted(request_id: str, prompt_ids: list[int]) -> int:
            matched = int(search(request_id, prompt_ids))
            if matched:
                self._cached[request_id] = self._cached.get(request_id, 0) + matched
            return matched

        cache.search_prefix_match = counted

    def _failure(self) -> str:
        error = self._manager.background_thread_status.fatal_error
        return repr(error) if error is not None else "no error was reported"
