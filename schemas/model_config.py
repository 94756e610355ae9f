"""The model repository: <repository>/<name>/<version>/{model.onnx, config.json, tokenizer.json}.

One per user by default (default_repository(): the user's cache folder, found from any folder),
moved with NEARLINE_MODEL_REPOSITORY or --model-repository.

Triton-like: the config says what the graph takes and gives, how records become its inputs and
how its outputs become results. Preprocessing and inference read the same file, so they cannot
disagree on the tokenizer or the maximum length.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from schemas.model_versions import VERSION_RULE, default_version, ordered_versions

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


# Where models were kept before the per-user cache: ./models of whatever folder a command ran in
OLD_DEFAULT_REPOSITORY = Path("models")


ENV_MODEL_REPOSITORY = "NEARLINE_MODEL_REPOSITORY"


def cache_repository() -> Path:
    """The per-user model cache: $XDG_CACHE_HOME/nearline/models, else ~/.cache/nearline/models
    (the XDG base directory rule: a relative XDG_CACHE_HOME is ignored)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / "nearline" / "models"


def default_repository() -> Path:
    """$NEARLINE_MODEL_REPOSITORY if set, else the per-user cache."""
    if os.environ.get(ENV_MODEL_REPOSITORY):
        return Path(os.environ[ENV_MODEL_REPOSITORY])
    return cache_repository()


def move_hint(repository: Path, name: str | None = None) -> str | None:
    """How to move models left in ./models (the old default) into the per-user cache when that is
    the repository in use and ./models holds `name` (any model when None); None when there is
    nothing to move, or the repository was chosen (an env var or flag naming another folder)."""
    old = OLD_DEFAULT_REPOSITORY
    try:
        if repository.absolute() != cache_repository().absolute():
            return None
        if not old.is_dir() or old.resolve() == repository.resolve():
            return None
        if name is not None:
            holds = (old / name).is_dir()
        else:
            holds = any(p.is_dir() and is_model_name(p.name) for p in old.iterdir())
    except OSError:
        return None
    if not holds:
        return None
    return (
        f"./models holds models from before nearline kept them in a per-user cache ({repository}): "
        f"move them with `mkdir -p {repository} && mv models/* {repository}/`, "
        "or keep using this folder with --model-repository models (NEARLINE_MODEL_REPOSITORY)"
    )


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


# A model name becomes a folder of the repository and part of a topic name (tensors.<model>), so it
# is one path segment of topic-legal characters: no '/', no '..', nothing that resolves elsewhere.
MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")


def is_model_name(name: str) -> bool:
    return MODEL_NAME.fullmatch(name) is not None and ".." not in name


# A version is a folder under the model's: one segment, never '.', '..' or a path, so that nothing a
# user types can make the importer write or delete outside <repository>/<name>/<version>/.
MODEL_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_model_version(version: str) -> bool:
    return MODEL_VERSION.fullmatch(version) is not None and ".." not in version


def check_model_version(version: str) -> str:
    """`version` if it is a valid model version, else InvalidModelVersionError saying what is allowed."""
    if not is_model_version(version):
        raise InvalidModelVersionError(
            f"invalid model version {version!r}: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, no '..', at most 64 characters), e.g. 2"
        )
    return version


def version_folder(repository: Path, name: str, version: str) -> Path:
    """<repository>/<name>/<version>, once both are checked to be single segments that stay inside it."""
    return repository / check_model_name(name) / check_model_version(version)


def check_model_name(name: str) -> str:
    """`name` if it is a valid model name, else InvalidModelNameError saying what is allowed."""
    if not is_model_name(name):
        raise InvalidModelNameError(
            f"invalid model name {name!r}: use lower-case letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, no '..', at most 100 characters)"
        )
    return name


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


def list_models(repository: Path) -> list[tuple[str, str, ModelConfig | ModelUnavailableError]]:
    """(name, version, config) for every model version in the repository, by name then version; a
    version whose files cannot be loaded comes with the error instead, so it is found here, not by
    a job. A folder whose name is not a model name can never be asked for, so it is not listed."""
    out: list[tuple[str, str, ModelConfig | ModelUnavailableError]] = []
    for folder in sorted(p for p in repository.iterdir() if p.is_dir() and is_model_name(p.name)):
        for version in versions(repository, folder.name):
            try:
                out.append((folder.name, version, load_model_config(repository, folder.name, version)))
            except ModelUnavailableError as exc:
                out.append((folder.name, version, exc))
    return out


def versions(repository: Path, name: str) -> list[str]:
    """Versions of a model that have a config, oldest first (schemas/model_versions.py)."""
    folder = repository / name
    if not folder.is_dir():
        return []
    # a hidden folder is an import under way or a replaced version being removed, never a version
    found = [
        p.name for p in folder.iterdir() if p.is_dir() and is_model_version(p.name) and (p / CONFIG_FILE).is_file()
    ]
    return ordered_versions(found)


def load_model_config(repository: Path, name: str, version: str | None = None) -> ModelConfig:
    """The config of `name` at `version`, or at its default version when none is given (the
    highest numbered one: schemas/model_versions.py).

    InvalidModelNameError for a name that is not one, ModelNotFoundError for a name the repository
    lacks, ModelUnavailableError for a config.json that cannot be read as a config."""
    check_model_name(name)
    if version is not None:
        check_model_version(version)
    available = versions(repository, name)
    if not available:
        hint = move_hint(repository, name)
        raise ModelNotFoundError(
            f"model {name!r} is not in the model repository {repository}" + (f"; {hint}" if hint else "")
        )
    chosen = version or default_version(available)
    if chosen is None:
        raise ModelNotFoundError(
            f"model {name!r} has no numbered version to serve by default ({', '.join(available)} in {repository}): "
            f"import one again with --version N (versions are {VERSION_RULE}), or name one where a version "
            f"can be named ({name}@{available[-1]})"
        )
    if chosen not in available:
        raise ModelNotFoundError(f"model {name!r} has no version {chosen!r} in {repository} ({available})")
    directory = repository / name / chosen
    path = directory / CONFIG_FILE
    try:
        config = ModelConfig.from_dict(json.loads(path.read_text(encoding="utf-8")), directory)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeError are ValueErrors
        raise ModelUnavailableError(f"model unavailable: {name} version {chosen}: {path}: {exc!r}") from None
    read_labels(config)  # a label file that does not match the outputs is found here, not in results
    return config


def write_labels(path: Path, labels: Sequence[str]) -> Path:
    path.write_text(json.dumps(list(labels), ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_labels(config: ModelConfig) -> tuple[str, ...]:
    """A classifier's class names in index order, checked against the width of its output: a
    label too many or too few would shift every name after it. ModelUnavailableError if not."""
    if not config.labels_file:
        return ()
    return _labels_at(config.directory / config.labels_file, config.outputs[0].dims[-1])


@cache
def _labels_at(path: Path, width: str | int) -> tuple[str, ...]:
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            loaded = json.loads(text)
            if not isinstance(loaded, list) or not all(isinstance(x, str) for x in loaded):
                raise ValueError("not a JSON array of strings")
            labels = tuple(loaded)
        else:
            # one name a line; split on "\n" alone: splitlines() also breaks at U+2028, \x1c and others
            labels = tuple(text[:-1].split("\n") if text.endswith("\n") else text.split("\n"))
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(f"model unavailable: {path}: {exc}") from None
    if isinstance(width, int) and len(labels) != width:
        raise ModelUnavailableError(
            f"model unavailable: {path} holds {len(labels)} labels for the model's {width} outputs"
        )
    return labels
