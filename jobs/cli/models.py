"""`nearline models`: the model repository (prepare a shipped model, import one, list them)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from jobs.cli.options import repository_option
from model_repository.config import ModelConfig


@click.group()
def models() -> None:
    """The model repository."""


REPLACE_HELP = "Replace the version if it is already in the repository (running workers keep the one they loaded)."


@models.command(name="prepare")
@click.argument("name", type=click.Choice(["minilm", "efficientnet-lite0", "smollm2-135m"]))
@click.option("--replace", is_flag=True, help=REPLACE_HELP)
@repository_option
def models_prepare(name: str, replace: bool, model_repository: Path) -> None:
    """Export a packaged model to ONNX into the model repository."""
    from model_import.export import PREPARERS
    from model_repository.folders import load_model_config, versions

    if "1" in versions(model_repository, name) and not replace:
        existing = load_model_config(model_repository, name, "1")
        click.echo(f"{name} version 1 is already in {model_repository} ({existing.source}); --replace exports it again")
        return
    config = PREPARERS[name](model_repository, replace=replace)
    click.echo(f"prepared {config.name} version {config.version} in {config.directory}")


@models.command(
    name="import",
    epilog="""\b
Examples:
  nearline models import ./my-bge --name bge            # a sentence-transformers folder
  nearline models import ./sentiment --name sentiment   # save_pretrained *ForSequenceClassification
  nearline models import ./vit --name vit               # *ForImageClassification + preprocessor_config.json
  nearline models import ./encoder --name enc --pooling cls   # a bare encoder, CLS pooling
  nearline models import ./onnx --name enc --task text-embedding   # model.onnx + tokenizer.json
  nearline models import ./qwen --name qwen             # save_pretrained *ForCausalLM + tokenizer.json
  nearline models import ./model.Q8_0.gguf --name llm   # a GGUF causal LM, kept in fp32""",
)
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--name", required=True, help="The model's name in the repository (and in tensors.<name>).")
@click.option("--version", "version", default="1", show_default=True)
@click.option(
    "--task",
    type=click.Choice(["text-embedding", "text-classification", "image-classification", "text-generation"]),
    help="What the model does, where the folder cannot say (a model.onnx without a config.json architecture).",
)
@click.option(
    "--pooling",
    type=click.Choice(["mean", "cls", "max", "mean_sqrt_len", "last_token"]),
    help="Embedders: how token vectors become one [default: the folder's, else mean].",
)
@click.option("--max-batch-size", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--replace", is_flag=True, help=REPLACE_HELP)
@repository_option
def models_import(
    source: Path,
    name: str,
    version: str,
    task: str | None,
    pooling: str | None,
    max_batch_size: int,
    replace: bool,
    model_repository: Path,
) -> None:
    """Import a local model folder (sentence-transformers, transformers, ONNX) or GGUF file into the repository."""
    from kafka_io.topics import model_topics_problem
    from kafka_io.topology import Topics
    from model_import.importer import import_model
    from model_repository.config import InvalidModelNameError
    from model_repository.folders import versions

    problem = model_topics_problem(Topics.from_env(), name)  # the namespace its workers will use
    if problem is not None:
        raise InvalidModelNameError(f"invalid model name {name!r}: {problem}")
    existed = version in versions(model_repository, name)
    config = import_model(model_repository, source, name, version, task, pooling, max_batch_size, replace)
    click.echo(f"imported {config.name} version {config.version} ({config.task}) in {config.directory}")
    if existed:
        click.echo(
            f"replaced the previous {name} version {version}: workers that loaded it keep serving it until they "
            "restart; restart them to serve this one",
            err=True,
        )


@models.command(name="list")
@repository_option
def models_list(model_repository: Path) -> None:
    """Models and versions in the repository (named first, on stderr)."""
    from model_repository.folders import list_models, move_hint, versions
    from model_repository.versions import default_version

    hint = move_hint(model_repository)
    if hint:
        click.echo(f"note: {hint}", err=True)
    if not model_repository.is_dir():
        click.echo(f"{model_repository} does not exist yet; try `nearline models prepare minilm`", err=True)
        return
    click.echo(
        f"models in {model_repository.absolute()} (the version marked default is served when none is named):",
        err=True,
    )
    defaults: dict[str, str | None] = {}
    for name, version, config in list_models(model_repository):
        if name not in defaults:
            defaults[name] = default_version(versions(model_repository, name))
        shown = f"{version} (default)" if version == defaults[name] else version
        if isinstance(config, Exception):
            click.echo(f"{name}\t{shown}\tunavailable\t{config}")
        else:
            click.echo(f"{config.name}\t{shown}\t{config.task}\t{model_detail(config)}\t{config.source}")


def _unusual(label: str) -> bool:
    """A label that would not read as one item in a comma-separated line: quoted when shown."""
    return not label.isprintable() or "," in label or label != label.strip()


def model_detail(config: ModelConfig) -> str:
    """What a model's results hold beyond its task: the pooling of an embedder, a classifier's
    labels, a causal LM's context and whether it takes chat messages."""
    if config.generation is not None:
        spec = config.generation
        chat = "chat template" if spec.chat_template else "prompts only (no chat template)"
        return f"context {spec.context_length} tokens, {chat}, default max_tokens {spec.default_max_tokens}"
    if config.is_classifier:
        from model_repository.config import ModelUnavailableError
        from model_repository.folders import read_labels

        try:
            names = read_labels(config)
        except ModelUnavailableError as exc:
            return f"labels unreadable: {exc}"
        shown = ", ".join(json.dumps(n, ensure_ascii=False) if _unusual(n) else n for n in names[:4]) + (
            ", ..." if len(names) > 4 else ""
        )
        return f"{len(names)} labels: {shown}"
    pooling = f"{config.pooling} pooling" if config.pooling else "pooled in the graph"
    return pooling + (", normalized" if "l2_normalize" in config.postprocess else "")
