"""The model repository: <repository>/<name>/<version>/{model.onnx, config.json, tokenizer.json}.

One per user by default (default_repository(): the user's cache folder, found from any folder),
moved with NEARLINE_MODEL_REPOSITORY or --model-repository.

Triton-like: the config says what the graph takes and gives, how records become its inputs and
how its outputs become results. Preprocessing and inference read the same file, so they cannot
disagree on the tokenizer or the maximum length.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

# How the batcher fills each graph input: token ids travel in the record; the mask and the
# segment ids are derived from the lengths when the batch is padded.
InputRole = Literal["token_ids", "attention_mask", "token_type_ids", "pixels"]
Task = Literal["text-embedding", "text-classification", "image-classification", "text-generation"]
TASKS: tuple[Task, ...] = ("text-embedding", "text-classification", "image-classification", "text-generation")
# Tasks whose results are labels ({label, index, score}, best first) rather than a tensor
CLASSIFIER_TASKS: tuple[Task, ...] = ("text-classification", "image-classification")
# The files of a model version's folder in the repository, named here only.
CONFIG_FILE = "config.json"  # this ModelConfig
ONNX_FILE = "model.onnx"  # the graph every engine starts from (ONNX Runtime, TensorRT's build)
TORCHSCRIPT_FILE = "model.pt"  # the torch engine's module, traced at FP32
TORCHSCRIPT_FP16_FILE = "model.fp16.pt"  # traced in FP16: an FP32 trace cannot be halved (export.py)
TOKENIZER_FILE = "tokenizer.json"  # a text model's tokenizer (Hugging Face tokenizers' format)
# A classifier's class names as a JSON array: any string round-trips, a line break included. Models
# imported before kept one name a line in labels.txt, still read (split on "\n" only), and the
# ImageNet classes ship one a line (LINE_LABELS_FILE).
LABELS_FILE = "labels.json"
LINE_LABELS_FILE = "labels.txt"
# A causal LM's transformers folder (save_pretrained: its config.json, safetensors, tokenizer files
# and chat template) inside the version's folder, apart from nearline's own config.json.
GENERATOR_FOLDER = "model"


# Pooling modes (sentence-transformers' names, less the prefix) and the postprocess step of each
POOLING_STEPS: dict[str, str] = {
    "mean": "mean_pooling",
    "cls": "cls_pooling",
    "max": "max_pooling",
    "mean_sqrt_len": "mean_sqrt_len_pooling",
    "last_token": "last_token_pooling",
}


class ModelError(Exception):
    """Why a model cannot serve a record; a preprocess worker dead-letters the record with it."""


class ModelNotFoundError(ModelError, LookupError):
    """No such model or version in the model repository."""


class InvalidModelNameError(ModelError, ValueError):
    """A model name that is not a name: a path, '..', upper case, empty. Never looked up."""


class InvalidModelVersionError(InvalidModelNameError):
    """A model version that is not one path segment: '..', '.', '', a path. Never looked up."""


class ModelUnavailableError(ModelError, RuntimeError):
    """The model is in the repository but its files cannot be loaded (a corrupt config or tokenizer):
    the repository's fault, not the record's."""


@dataclass(frozen=True)
class PathSegment:
    """A name a user types that becomes one folder of the repository: never '.', '..' or a path."""

    what: str
    pattern: re.Pattern[str]
    rule: str  # what is allowed, in the refusal's words
    refusal: type[InvalidModelNameError]

    def fits(self, text: str) -> bool:
        return self.pattern.fullmatch(text) is not None and ".." not in text

    def check(self, text: str) -> str:
        """`text` if it fits, else the refusal saying what is allowed."""
        if not self.fits(text):
            raise self.refusal(f"invalid {self.what} {text!r}: {self.rule}")
        return text


# A model name becomes a folder of the repository and part of a topic name (tensors.<model>), so it
# is one path segment of topic-legal characters: no '/', no '..', nothing that resolves elsewhere.
MODEL_NAME = PathSegment(
    "model name",
    re.compile(r"[a-z0-9][a-z0-9._-]{0,99}"),
    "use lower-case letters, digits, '.', '_' and '-' (starting with a letter or digit, no '..', "
    "at most 100 characters)",
    InvalidModelNameError,
)
# A version is a folder under the model's, so that nothing a user types can make the importer write
# or delete outside <repository>/<name>/<version>/.
MODEL_VERSION = PathSegment(
    "model version",
    re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"),
    "use letters, digits, '.', '_' and '-' (starting with a letter or digit, no '..', at most 64 characters), e.g. 2",
    InvalidModelVersionError,
)


def is_model_name(name: str) -> bool:
    return MODEL_NAME.fits(name)


def is_model_version(version: str) -> bool:
    return MODEL_VERSION.fits(version)


def check_model_version(version: str) -> str:
    """`version` if it is a valid model version, else InvalidModelVersionError saying what is allowed."""
    return MODEL_VERSION.check(version)


def check_model_name(name: str) -> str:
    """`name` if it is a valid model name, else InvalidModelNameError saying what is allowed."""
    return MODEL_NAME.check(name)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    dims: tuple[str | int, ...]  # symbolic names are dynamic axes ("batch", "sequence")
    role: InputRole | None = None


def token_id_dtype(vocab_size: int, graph_dtype: str) -> str:
    """The dtype token ids travel in: uint16 holds every id of a vocabulary up to 65,536 (BERT's
    30,522) in a quarter of int64's bytes; the GPU worker widens them when it pads a batch."""
    return "uint16" if vocab_size <= 1 << 16 else graph_dtype


@dataclass(frozen=True)
class TokenizerSpec:
    file: str
    max_length: int
    pad_id: int = 0


@dataclass(frozen=True)
class ImageSpec:
    """How an encoded image becomes the model's uint8 CHW input."""

    resize: int = 256  # the shorter side ("shorter_side"), or both sides ("exact"), before the centre crop
    crop: int = 224
    # "shorter_side" keeps the aspect ratio (EfficientNet, ConvNeXt's shortest_edge); "exact"
    # stretches to resize x resize, as Hugging Face processors with size {height, width} do (ViT)
    resize_mode: Literal["shorter_side", "exact"] = "shorter_side"
    resample: Literal["bicubic", "bilinear"] = "bicubic"
    background: tuple[int, int, int] = (255, 255, 255)  # transparent pixels are composited on this
    max_pixels: int = 64_000_000  # decompression-bomb cap, checked from the header before decoding
    # JPEG DCT-domain downscale before the resize: ~6x faster on 4K, pixels differ slightly; use the
    # same setting wherever the model is evaluated.
    jpeg_draft: bool = True


@dataclass(frozen=True)
class GenerationSpec:
    """What a causal LM (task text-generation) needs besides its tokenizer: where its transformers
    folder is, the ids that end a sequence, its context and its default completion length."""

    folder: str = GENERATOR_FOLDER  # save_pretrained output, relative to the version's folder
    eos_token_ids: tuple[int, ...] = ()  # any of them ends a sequence (finish_reason "stop")
    context_length: int = 2048  # prompt and completion tokens together
    default_max_tokens: int = 256  # a request's completion length when it names none
    # The chat template (Jinja, transformers' apply_chat_template) is in the folder; False: the
    # model takes prompts only, and a request with messages is refused.
    chat_template: bool = False


@dataclass(frozen=True)
class ModelConfig:
    name: str
    version: str
    task: Task
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int
    postprocess: tuple[str, ...]  # applied in order, e.g. ("mean_pooling", "l2_normalize")
    tokenizer: TokenizerSpec | None = None  # text models
    image: ImageSpec | None = None  # image models
    labels_file: str | None = None  # classifiers: their class names in index order (read_labels)
    top_k: int = 5  # classifiers: how many classes a result carries
    # text: sequence-length profiles of the engine; batches never span two, static-shape engines
    # (TensorRT, CUDA graphs) pad to them. Default: powers of two from 16 to the max length.
    length_buckets: tuple[int, ...] = ()
    result_name: str = "embedding"
    source: str = ""
    generation: GenerationSpec | None = None  # causal LMs (task text-generation)
    directory: Path = field(default=Path("."), compare=False)

    @property
    def buckets(self) -> tuple[int, ...]:
        if self.length_buckets or self.tokenizer is None:
            return self.length_buckets
        out, b = [], 16
        while b < self.max_length:
            out.append(b)
            b *= 2
        return (*out, self.max_length)

    @property
    def is_classifier(self) -> bool:
        return self.task in CLASSIFIER_TASKS

    @property
    def is_generator(self) -> bool:
        return self.task == "text-generation"

    @property
    def generator_path(self) -> Path:
        """The causal LM's transformers folder (weights, tokenizer files, chat template)."""
        if self.generation is None:
            raise ModelNotFoundError(f"model {self.name!r} does not generate text")
        return self.directory / self.generation.folder

    @property
    def pooling(self) -> str | None:
        """The pooling mode of a text embedder whose graph gives token vectors (None if none)."""
        modes = {step: mode for mode, step in POOLING_STEPS.items()}
        return next((modes[s] for s in self.postprocess if s in modes), None)

    @property
    def max_length(self) -> int:
        if self.tokenizer is None:
            raise ModelNotFoundError(f"model {self.name!r} is not a text model")
        return self.tokenizer.max_length

    @property
    def onnx_path(self) -> Path:
        return self.directory / ONNX_FILE

    @property
    def tokenizer_path(self) -> Path:
        if self.tokenizer is None:
            raise ModelNotFoundError(f"model {self.name!r} is not a text model")
        return self.directory / self.tokenizer.file

    def input_for(self, role: InputRole) -> TensorSpec | None:
        return next((i for i in self.inputs if i.role == role), None)

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("directory")
        return json.dumps(d, indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any], directory: Path) -> ModelConfig:
        tokenizer = TokenizerSpec(**d["tokenizer"]) if d.get("tokenizer") else None
        return cls(
            name=d["name"],
            version=str(d["version"]),
            task=d["task"],
            inputs=tuple(_spec(i) for i in d["inputs"]),
            outputs=tuple(_spec(o) for o in d["outputs"]),
            max_batch_size=int(d["max_batch_size"]),
            postprocess=tuple(d["postprocess"]),
            tokenizer=tokenizer,
            image=_image_spec(d["image"]) if d.get("image") else None,
            labels_file=d.get("labels_file"),
            top_k=int(d.get("top_k", 5)),
            length_buckets=_length_buckets(d.get("length_buckets", ()), tokenizer),
            result_name=d.get("result_name", "embedding"),
            source=d.get("source", ""),
            generation=_generation_spec(d["generation"]) if d.get("generation") else None,
            directory=directory,
        )

    def write(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / CONFIG_FILE
        path.write_text(self.to_json(), encoding="utf-8")
        return path


def _length_buckets(given: Any, tokenizer: TokenizerSpec | None) -> tuple[int, ...]:
    """A text model's sequence lengths batches are padded to: increasing, the last at least
    max_length, so every record has a bucket (the engines' buffers, TensorRT profiles and CUDA
    graphs are made per bucket). Empty: powers of two up to max_length (ModelConfig.buckets)."""
    buckets = tuple(int(b) for b in given)
    if not buckets:
        return ()
    if tokenizer is None:
        raise ValueError(f"length_buckets {list(buckets)} is for text models, and this one has no tokenizer")
    if buckets[0] < 1 or any(a >= b for a, b in pairwise(buckets)):
        raise ValueError(f"length_buckets must be increasing lengths of at least 1, got {list(buckets)}")
    if buckets[-1] < tokenizer.max_length:
        raise ValueError(
            f"length_buckets {list(buckets)} end below the tokenizer's max_length {tokenizer.max_length}: "
            "longer records would have no bucket"
        )
    return buckets


def _generation_spec(d: dict[str, Any]) -> GenerationSpec:
    spec = GenerationSpec(**{**d, "eos_token_ids": tuple(int(i) for i in d.get("eos_token_ids", ()))})
    if spec.context_length < 2 or spec.default_max_tokens < 1:
        raise ValueError(
            f"generation: context_length {spec.context_length}, default_max_tokens {spec.default_max_tokens}"
        )
    return spec


def _image_spec(d: dict[str, Any]) -> ImageSpec:
    return ImageSpec(**{**d, "background": tuple(d.get("background", (255, 255, 255)))})


def _spec(d: dict[str, Any]) -> TensorSpec:
    return TensorSpec(d["name"], d["dtype"], tuple(d["dims"]), d.get("role"))
