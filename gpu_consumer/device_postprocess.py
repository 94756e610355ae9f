"""Postprocess steps run where the outputs already are, in torch: the GPU engines pool and
normalise on the device, so a batch copies back [B, H] floats instead of [B, L, H] (64 x 256 x 384
x 4 bytes = 25 MB for a full MiniLM batch, 98 KB pooled) and the worker's CPU never pools.

Same maths as gpu_consumer/postprocess.py (tested against it on the CPU), in float32 whatever the
engine's precision, so FP16 sums over long sequences do not lose digits. Every step is a fixed
sequence of tensor operations on the batch's shapes, so a CUDA graph replays it with the model.
"""

from __future__ import annotations

from typing import Any

from model_repository.config import ModelConfig

POOLING = ("mean_pooling", "mean_sqrt_len_pooling", "cls_pooling", "max_pooling", "last_token_pooling")
DEVICE_STEPS = (*POOLING, "l2_normalize")


def device_steps(config: ModelConfig) -> tuple[str, ...]:
    """The leading postprocess steps that can run on the device (the rest stay on the CPU)."""
    steps: list[str] = []
    for step in config.postprocess:
        if step not in DEVICE_STEPS or (step in POOLING and config.input_for("attention_mask") is None):
            break
        steps.append(step)
    return tuple(steps)


def apply(
    config: ModelConfig, steps: tuple[str, ...], outputs: dict[str, Any], inputs: dict[str, Any]
) -> dict[str, Any]:
    """The first graph output through `steps`, as the only output (postprocess reads no other)."""
    if not steps:
        return outputs
    import torch

    name = config.outputs[0].name
    x = outputs[name].float()
    for step in steps:
        if step in POOLING:
            mask_spec = config.input_for("attention_mask")
            assert mask_spec is not None  # device_steps claims pooling only with a mask
            mask = inputs[mask_spec.name].to(torch.float32).unsqueeze(-1)
            x = _pool(step, x, mask)
        elif step == "l2_normalize":
            x = torch.nn.functional.normalize(x, p=2.0, dim=-1, eps=1e-12)
    return {name: x}


def _pool(step: str, x: Any, mask: Any) -> Any:
    """[B, L, H] token vectors and a [B, L, 1] float mask (right-padded rows) -> [B, H]."""
    if step == "cls_pooling":
        return x[:, 0]
    if step == "max_pooling":
        return x.masked_fill(mask == 0, -1e9).amax(dim=1)
    if step == "last_token_pooling":
        last = (mask.sum(dim=1).long() - 1).clamp(min=0)  # [B, 1]
        return x.gather(1, last.unsqueeze(-1).expand(-1, 1, x.shape[-1])).squeeze(1)
    summed = (x * mask).sum(dim=1)
    count = mask.sum(dim=1).clamp(min=1e-9)
    return summed / (count.sqrt() if step == "mean_sqrt_len_pooling" else count)
