"""Postprocess steps run where the outputs already are, in torch: the GPU engines pool and
normalise on the device, so a batch copies back [B, H] floats instead of [B, L, H] (64 x 256 x 384
x 4 bytes = 25 MB for a full MiniLM batch, 98 KB pooled) and the worker's CPU never pools.

Same maths as gpu_consumer/postprocess.py (tested against it on the CPU), in float32 whatever the
engine's precision, so FP16 sums over long sequences do not lose digits.
"""

from __future__ import annotations

from typing import Any

from schemas.model_config import ModelConfig

DEVICE_STEPS = ("mean_pooling", "l2_normalize")


def device_steps(config: ModelConfig) -> tuple[str, ...]:
    """The leading postprocess steps that can run on the device (the rest stay on the CPU)."""
    steps: list[str] = []
    for step in config.postprocess:
        if step not in DEVICE_STEPS or (step == "mean_pooling" and config.input_for("attention_mask") is None):
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
        if step == "mean_pooling":
            mask_spec = config.input_for("attention_mask")
            assert mask_spec is not None  # device_steps claims mean_pooling only with a mask
            mask = inputs[mask_spec.name].to(torch.float32).unsqueeze(-1)
            x = (x * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        elif step == "l2_normalize":
            x = torch.nn.functional.normalize(x, p=2.0, dim=-1, eps=1e-12)
    return {name: x}
