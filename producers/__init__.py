"""Input sources, one module each. Every source yields InputRecord or InputError, in file order.

What belongs here: reading users' files (JSON Lines, plain lines, tables, image folders) with bounds,
the registry of input formats (formats.py) and what a path is (sniffing.py).
What does not: producing to Kafka or registering jobs (jobs/submit.py), preprocessing
(preprocess_app/).
"""

from __future__ import annotations

from producers.formats import JSON_LINES
from producers.inputs import InputError, InputRecord
from producers.sniffing import is_openai_batch_file, read_text_input

JSONL_SUFFIXES = JSON_LINES.suffixes

__all__ = ["JSONL_SUFFIXES", "InputError", "InputRecord", "is_openai_batch_file", "read_text_input"]
