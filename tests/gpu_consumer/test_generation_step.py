"""The generation step's pure rules (gpu_consumer/generation/step.py): how many prompts each lane
may have submitted, and how a record's sampling parameters are read and checked."""

from __future__ import annotations

import pytest

from gpu_consumer.generation.requests import SamplingParams
from gpu_consumer.generation.step import room, sampling_of
from schemas.errors import TensorFormatError
from schemas.generation_request import SAMPLING_ATTRIBUTE
from tests.support.causal_lm import lm_config

CONFIG = lm_config()


def test_bulk_prompts_leave_few_waiting_and_live_ones_have_room_beyond_them() -> None:
    assert room(64, "bulk") == 72 and room(64, "live") == 144
    assert room(4, "bulk") == 6 and room(4, "live") == 12  # at least two wait, so the engine never starves


def test_a_record_without_sampling_parameters_takes_the_model_default() -> None:
    assert sampling_of({}, CONFIG) == SamplingParams(max_tokens=64)


def test_sampling_parameters_are_read_from_their_attribute() -> None:
    raw = '{"max_tokens":5,"temperature":0.7,"top_p":0.9,"top_k":40,"seed":3,"stop":["\\n"]}'
    assert sampling_of({SAMPLING_ATTRIBUTE: raw}, CONFIG) == SamplingParams(5, 0.7, 0.9, 40, 3, ("\n",))


@pytest.mark.parametrize("raw", ["not json", "[1]", '{"max_tokens": 0}', '{"temperature": -1}', '{"top_p": 0}'])
def test_sampling_parameters_a_foreign_writer_garbled_are_the_record_s_fault(raw: str) -> None:
    with pytest.raises(TensorFormatError):
        sampling_of({SAMPLING_ATTRIBUTE: raw}, CONFIG)
