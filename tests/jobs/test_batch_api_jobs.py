"""Jobs as batch-API users know them (#44), through the real broker, workers and CLI: OpenAI batch
files in and out, labels, usage, and a completion window that expires with partial results."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from jobs.launch.runner import WaitRules, watch_job
from jobs.registry import find_job, job_status
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, run_embedded, start_paced_gpu, submit
from tests.support.tiny_model import TinyModel, minilm_tokenizer_file
from tests.support.webhook_receiver import Receiver, wait_until


def openai_request(custom_id: str, texts: str | list[str], model: str = "tiny") -> dict[str, object]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": {"model": model, "input": texts}}


def tokens(texts: list[str], max_length: int = 64) -> int:
    """Tokens the tiny model runs for `texts`, counted by the tokenizer library itself."""
    tokenizer = Tokenizer.from_file(str(minilm_tokenizer_file()))
    tokenizer.no_padding()  # the file pads to a fixed length; a record's length is its own tokens
    return sum(min(len(tokenizer.encode(text).ids), max_length) for text in texts)


@pytest.mark.timeout(300)
def test_an_openai_batch_file_gives_openai_output_lines_matching_the_same_texts_as_json_lines_and_labels_filter_jobs(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    texts = [row["text"] for row in example_lines(12)]
    requests = [
        openai_request("single-a", texts[0]),
        openai_request("listed", texts[1:5]),
        openai_request("single-b", texts[5]),
        openai_request("listed-2", texts[6:12]),
    ]
    batch = write_jsonl(tmp_path / "batch.jsonl", requests)
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)])
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    # no --model: the file's body.model names it
    sent = pipeline.cli("submit", str(batch), "--wait", "--label", "team=search", "--label", "night=1")
    assert sent.returncode == 0, sent.stderr
    openai_job = sent.stdout.strip()
    plain_job = submit(pipeline, plain, "--label", "team=ads")
    outcome, _ = watch_job(pipeline.settings, pipeline.topics, plain_job, 12, WaitRules(check=pipeline.check_workers))
    assert len(outcome.results) == 12

    written = pipeline.cli("results", openai_job, "-o", str(tmp_path / "out.jsonl"), "--output-format", "openai-batch")
    assert written.returncode == 0, written.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == ["single-a", "listed", "single-b", "listed-2"]
    assert pipeline.cli("results", plain_job, "-o", str(tmp_path / "plain-out.jsonl")).returncode == 0
    reference = {
        json.loads(line)["id"]: np.array(json.loads(line)["embedding"])
        for line in (tmp_path / "plain-out.jsonl").read_text().splitlines()
    }
    given = 0
    for line, request in zip(lines, requests, strict=True):
        assert line["error"] is None and line["response"]["status_code"] == 200
        body = line["response"]["body"]
        inputs = request["body"]["input"]  # type: ignore[index]
        inputs = [inputs] if isinstance(inputs, str) else inputs
        assert [d["index"] for d in body["data"]] == list(range(len(inputs)))
        for datum, text in zip(body["data"], inputs, strict=True):
            expected = reference[f"t{texts.index(text)}"]
            got = np.array(datum["embedding"])
            assert np.dot(got, expected) / (np.linalg.norm(got) * np.linalg.norm(expected)) == pytest.approx(
                1.0, abs=1e-6
            )
            given += 1
        assert body["model"] == "tiny"
        assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == tokens(inputs)
    assert given == 12

    shown = json.loads(pipeline.cli("status", openai_job, "--json").stdout)
    assert shown["labels"] == {"team": "search", "night": "1"}
    assert shown["usage"]["records"] == 12 and shown["usage"]["input_tokens"] == tokens(texts)
    assert shown["usage"]["engine_seconds"] > 0
    listed = pipeline.cli("jobs", "list", "--label", "team=search")
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == [openai_job]
    assert "night=1,team=search" in listed.stdout
    both = json.loads(pipeline.cli("jobs", "list", "--json").stdout)
    assert {row["job_id"]: row["labels"] for row in both} == {
        openai_job: {"team": "search", "night": "1"},
        plain_job: {"team": "ads"},
    }
    none = pipeline.cli("jobs", "list", "--label", "team=search", "--label", "night=2")
    assert none.returncode == 0 and none.stdout == "" and "no jobs labelled night=2,team=search" in none.stderr


@pytest.mark.timeout(300)
def test_a_job_past_its_completion_window_ends_expired_with_partial_results_and_an_error_file_of_the_rest(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path, receiver: Receiver
) -> None:
    """2,000 records on an engine that takes 5 ms a record (10 s of engine time) with a 5-second
    window: the job expires part way, `results` gives what finished, and the error file lists
    exactly the others, each as expired. Two notifier workers run: the webhook, which refuses the
    first attempt, gets one delivered POST of the expired job's status."""
    receiver.answers["/hook"] = [503]
    for name in ("notifier-a", "notifier-b"):
        pipeline.start(name, "notifier", "--instance-id", name, "--first-retry-s", "0.2", "--allow-private-targets")
    pipeline.start("preprocess", "preprocess")
    start_paced_gpu(pipeline, "--per-record-ms", "5", "--bulk-share", "0.3", "--max-window", "32")
    warm = submit(pipeline, write_jsonl(tmp_path / "warm.jsonl", example_lines(4)))  # workers joined and warm
    watch_job(pipeline.settings, pipeline.topics, warm, 4, WaitRules(check=pipeline.check_workers))
    ids = [f"r{i}" for i in range(2000)]
    rows = [{"id": rid, "text": f"record {rid} of a job that cannot finish in its window"} for rid in ids]
    waited = pipeline.cli(
        "submit",
        str(write_jsonl(tmp_path / "big.jsonl", rows)),
        "-m",
        "tiny",
        "--complete-within",
        "5s",
        "--notify",
        receiver.url("/hook"),
        "--wait",
    )
    assert waited.returncode == 9, waited.stderr  # ExitCode.EXPIRED
    job_id = waited.stdout.strip()
    assert f"job {job_id} expired" in waited.stderr
    # the wait ends 3 s past the deadline; records still in a window then land within a window's time
    time.sleep(1.0)
    status = job_status(pipeline.settings, pipeline.topics, job_id)
    assert status.state.value == "expired"
    assert status.to_dict()["time_left_s"] == 0 and status.to_dict()["deadline"] is not None
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    done = pipeline.cli("results", job_id, "-o", str(out), "--errors", str(errors))
    assert done.returncode == 0, done.stderr
    assert "expired" in done.stderr
    finished = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    missing = [json.loads(line) for line in errors.read_text().splitlines()]
    assert 0 < len(finished) < 2000, f"{len(finished)} results: the window was not what cut the job"
    assert {line["status"] for line in missing} == {"expired"}
    assert sorted(finished + [line["id"] for line in missing]) == sorted(ids)  # each record once, in one file
    assert len(set(finished)) == len(finished)
    listed = pipeline.cli("jobs", "list")
    assert f"{job_id}\ttiny\texpired\t{len(finished)}/2000" in listed.stdout
    assert "deadline passed" in listed.stdout
    shown = json.loads(pipeline.cli("status", job_id, "--json").stdout)
    assert shown["counts"]["expired"] == 2000 - len(finished)
    wait_until(lambda: [p.status for p in receiver.to("/hook")] == [503, 200], 60, "the webhook's delivery")
    told = json.loads(receiver.to("/hook")[1].body)
    assert (told["job_id"], told["state"], told["counts"]["inferred"]) == (job_id, "expired", len(finished))
    submission = find_job(pipeline.settings, pipeline.topics, job_id).submission
    assert {p.headers["Idempotency-Key"] for p in receiver.to("/hook")} == {f"{job_id}/{submission}"}
    time.sleep(1.0)  # a second notifier's POST would come within its step
    assert len(receiver.to("/hook")) == 2


@pytest.mark.process
@pytest.mark.timeout(300)
def test_run_writes_openai_output_and_on_expiry_every_request_to_the_error_file(
    tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    """`nearline run` on the embedded default: its broker is gone at the end, so the error file's
    records come from its input. A window that has passed before anything runs expires every request."""
    texts = [row["text"] for row in example_lines(5)]
    batch = write_jsonl(tmp_path / "batch.jsonl", [openai_request("one", texts[0]), openai_request("two", texts[1:])])
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    common = ("--output-format", "openai-batch", "--errors", str(errors))
    done = run_embedded(str(batch), "-o", str(out), *common, repository=model_repository, timeout_s=240)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(line["custom_id"], len(line["response"]["body"]["data"])) for line in lines] == [("one", 1), ("two", 4)]
    assert errors.read_text() == "" and "wrote 0 error lines" in done.stderr

    late = run_embedded(
        str(batch), "-o", str(out), *common, "--complete-within", "1ms", repository=model_repository, timeout_s=240
    )
    assert late.returncode == 9, late.stderr  # ExitCode.EXPIRED
    assert "expired" in late.stderr
    assert out.read_text() == ""  # -o itself: the job ended as asked, with nothing finished
    failed = [json.loads(line) for line in errors.read_text().splitlines()]
    assert [(f["custom_id"], f["error"]["code"], f["response"]) for f in failed] == [
        ("one", "batch_expired", None),
        ("two", "batch_expired", None),
    ]
