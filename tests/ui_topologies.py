"""Topologies and helpers for the dashboard and metrics tests (``tests/test_ui_*.py``).

Imported by the test process and, pickled by reference, by Spark's Python workers (the library
ships the driver's ``sys.path`` to local workers).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outage_topologies import burst_wordcount
from prometheus_client.parser import text_string_to_metric_families

from examples.wordcount import WordCount
from statefulbolts import StormTopology
from statefulbolts.runtime import task_attempt


class FlakyWordCount(WordCount):
    """Counts words; raises on ``word`` in the first ``failures`` attempts overall.

    The attempts are counted in ``log_path`` (one line each). With ``failures`` equal to
    Spark's attempts per task, the first job that carries ``word`` fails for good and is rolled
    back; its replay passes.
    """

    def __init__(self, word: str, log_path: str, failures: int) -> None:
        self.word = word
        self.log_path = log_path
        self.failures = failures

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Raise on the word until ``failures`` attempts have raised."""
        if tuple.get_value(0) == self.word:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(f"{task_attempt()}\n")
            raised = Path(self.log_path).read_text(encoding="utf-8").count("\n")
            if raised <= self.failures:
                msg = f"flaky count of {self.word!r} (attempt {raised} of {self.failures})"
                raise RuntimeError(msg)
        super().execute(tuple)


def flaky_wordcount(
    sentences: int, burst: int, word: str, log: str, failures: int
) -> StormTopology:
    """The burst word count whose counter fails one transaction's job for good, once."""
    return burst_wordcount(sentences, burst, FlakyWordCount(word, log, failures))


def get(url: str, timeout: float = 30.0) -> bytes:
    """GET a 127.0.0.1 URL."""
    assert url.startswith("http://127.0.0.1:"), url
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
        assert response.status == 200, (url, response.status)
        return response.read()


def snapshot(base: str) -> dict[str, Any]:
    """The dashboard's ``/api/snapshot``."""
    return json.loads(get(base + "api/snapshot"))


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` parsed with prometheus_client's parser: value by (sample, sorted labels)."""
    text = get(base + "metrics").decode("utf-8")
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "topology"))
            samples[(sample.name, labels)] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    """One sample's value (``None`` when absent)."""
    return samples.get((name, tuple(sorted(labels.items()))))


def scrape_until(
    base: str, predicate: Callable[[dict[Any, float]], bool], what: str, timeout: float = 60.0
) -> dict[Any, float]:
    """Scrape ``/metrics`` until ``predicate`` holds for the samples; return those samples."""
    found: list[dict[Any, float]] = []

    def check() -> bool:
        samples = scrape(base)
        if predicate(samples):
            found.append(samples)
            return True
        return False

    wait_for(check, timeout, what)
    return found[-1]


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout} s waiting for {what}"
            raise AssertionError(msg)
        time.sleep(0.05)
