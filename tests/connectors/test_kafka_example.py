"""``examples/kafka_wordcount.py`` against the test broker: its counts match a plain count."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kafka_fixtures import KafkaBroker

from examples import kafka_wordcount
from examples.corpus import sentence, words

pytestmark = pytest.mark.kafka


def test_the_example_counts_the_topic_exactly(
    kafka_broker: KafkaBroker, kafka_topic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = kafka_topic(partitions=2)
    args = ["--bootstrap", kafka_broker.bootstrap, "--topic", topic, "--engine", "inline"]
    assert kafka_wordcount.main([*args, "--load", "60", "--name", f"{topic}-wc"]) == 0
    out = capsys.readouterr().out
    # The plain count is the corpus's: every sentence written was counted, once.
    want: Counter[str] = Counter()
    for i in range(60):
        want.update(words(sentence(i)))
    assert kafka_wordcount.plain_count(kafka_broker.bootstrap, topic) == want
    assert (
        out.splitlines()[-1]
        == f"all {len(want)} word counts match a plain count of topic {topic!r}"
    )
