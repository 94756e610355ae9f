"""Seeded sampling per request, whatever runs beside it.

transformers' continuous batching samples every sequence of a step from one random generator, so
a request's tokens would depend on which others shared its steps (vllm#17524 is that complaint
about vLLM). Here each sampled token is drawn by a generator of its own, seeded from the request's
seed and the token's position, over the request's own temperature, top-k and top-p; the row's
scores are then left with that one token, which the manager's greedy pick takes. Greedy requests
(temperature 0) are left alone. A request without a seed gets a random one when it is submitted:
sampled, not repeatable, as asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_consumer.generation.requests import SamplingParams

# Positions are mixed into the seed by this odd multiplier, so (seed, position) pairs rarely meet
_MIX = 0x9E3779B97F4A7C15
_MASK = (1 << 63) - 1


def token_seed(seed: int, position: int) -> int:
    """The generator seed of the token at `position` of a request seeded `seed`."""
    return ((seed & _MASK) * _MIX + position) & _MASK


def sample_token(logits: Any, params: SamplingParams, position: int) -> int:
    """One token drawn from a row of logits under the request's temperature, top-k and top-p,
    by a generator seeded for this request and position alone."""
    import torch

    x = logits.float() / params.temperature
    if 0 < params.top_k < x.numel():
        kth = torch.topk(x, params.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, index = torch.sort(x, descending=True)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
        drop = cumulative - torch.softmax(ordered, dim=-1) >= params.top_p  # keep the smallest set reaching top_p
        x = x.scatter(0, index[drop], float("-inf"))
    generator = torch.Generator(device=x.device).manual_seed(token_seed(params.seed or 0, position))
    return int(torch.multinomial(torch.softmax(x, dim=-1), 1, generator=generator).item())


def seeded_sampler(params_of: Callable[[str], SamplingParams | None]) -> Any:
    """A continuous-batching logits processor (transformers' ContinuousBatchingLogitsProcessor) that
    samples each non-greedy request's rows as sample_token does. params_of: a request id's sampling."""
    import torch
    from transformers.generation.continuous_batching.cb_logits_processors import ContinuousBatchingLogitsProcessor

    class SeededSampling(ContinuousBatchingLogitsProcessor):
        supported_kwargs: dict[str, type] = {}  # noqa: RUF012 (the base class declares them so)
        ignored_kwargs: tuple[str, ...] = ()

        def __init__(self) -> None:
            # slot -> (params, position): the int32 argument row carries a slot per logits row, so
            # a step prepared ahead (asynchronous batching) never reads another step's requests
            self._rows: dict[int, tuple[SamplingParams, int]] = {}
            self._next = 0

        def fill_defaults(self, int32_tensor: Any) -> None:
            int32_tensor.fill_(-1)

        def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> Any:
            slots = []
            for request in requests_with_new_token:
                params = params_of(request.state.request_id)
                if params is None or params.greedy:
                    slots.append(-1)
                    continue
                slot = self._next
                self._next = (self._next + 1) % (1 << 31)
                self._rows[slot] = (params, len(request.state.generated_tokens))
                slots.append(slot)
            if len(self._rows) > 1 << 20:  # rows prepared for a step that never ran (an engine error)
                self._rows.clear()
            return torch.tensor(slots, dtype=torch.int32)

        def __call__(self, scores: Any, tensor_arg: Any) -> Any:
            slots = tensor_arg[: scores.size(0)].tolist()
            if all(s < 0 for s in slots):
                return scores
            for row, slot in enumerate(slots):
                held = self._rows.pop(slot, None) if slot >= 0 else None
                if held is None:
                    continue
                token = sample_token(scores[row], *held)
                scores[row].fill_(float("-inf"))
                scores[row, token] = 0.0
            return scores

    return SeededSampling()
