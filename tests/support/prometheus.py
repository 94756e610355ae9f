"""A real Prometheus for tests: Debian's binary with its own config, storage and port, never its
service; queried through its HTTP API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.waiting import wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rules_without_waits(rules: Path, into: Path) -> Path:
    """The shipped rules, each alert's `for:` set to 0 s: the same expressions, firing at the first
    evaluation that finds them true (the waits themselves are promtool's unit tests')."""
    loaded = yaml.safe_load(rules.read_text(encoding="utf-8"))
    for group in loaded["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    into.write_text(yaml.safe_dump(loaded), encoding="utf-8")
    return into


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    def start(
        cls, workdir: Path, targets: dict[str, int], rules: Path, tls: dict[str, str] | None = None
    ) -> Prometheus:
        """Scrape each job's one target on 127.0.0.1 every second, evaluate rules every second;
        over HTTPS with `tls` as every job's tls_config (ca_file, cert_file, key_file)."""
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus not found: `apt-get install prometheus` (.ci/setup --tests does)")
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                    **({"scheme": "https", "tls_config": tls} if tls else {}),
                }
                for job, port in targets.items()
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        port = free_port()
        log_path = workdir / "prometheus.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        prometheus = cls(process, f"http://127.0.0.1:{port}", log_path)
        prometheus.wait_ready()
        return prometheus

    def wait_ready(self, timeout_s: float = 60) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited with {self.process.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        wait_until(ready, timeout_s, lambda: f"prometheus ready:\n{self.log_path.read_text()[-3000:]}", every_s=0.2)

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector `expr` evaluates to now."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        """The one value `expr` gives now (None: no series)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def alert_state(self, name: str) -> str:
        """firing, pending or inactive."""
        states = [a["state"] for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]
        return states[0] if states else "inactive"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
