"""A driver killed while it rescales the stored state: the next start finishes the rescale.

A Redis word count (``tests/rescale_topologies.py``) counts half of the sentences with
``before`` tasks; then a driver with ``after`` tasks starts on the same state and is killed
(``topology.faults``, a real ``os._exit`` of the driver process) in the middle of the rescale:
once every new namespace is staged, or after the n-th target was swapped in. The same command
without the fault then finishes the rescale, counts the rest of the stream, and Redis must hold
the exact counts, each key in the task owning its key group, one namespace per task of the new
parallelism and nothing else of the rescale. ``STATEFULBOLTS_TEST_SEED`` varies the
parallelism pair and the kill point, for loops.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from recovery_topologies import child_env, run_driver_process
from rescale_topologies import PARALLELISM_ENV

from examples.corpus import sentence, words
from providers import KeyValueState, StateFactory, get_provider
from statefulbolts.connectors import load_stream, pending_count
from statefulbolts.keygroups import KeyGroups
from statefulbolts.offline import stored_shape

pytestmark = [pytest.mark.spark, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = "tests.rescale_topologies:wordcount"
SEED = int(os.environ.get("STATEFULBOLTS_TEST_SEED", "11"))
SENTENCES = 160
KILLED = 137
TIMEOUT = 150
PAIRS = [(2, 3), (3, 1), (1, 4), (4, 2)]


def run(
    conf: dict[str, Any], path: Path, name: str, parallelism: int, engine: str
) -> tuple[int, str]:
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", TOPOLOGY, "--conf", str(path)]
    cmd += ["--name", name, "--json", "--engine", engine]
    env = {**child_env(), PARALLELISM_ENV: str(parallelism)}
    status, _, err = run_driver_process(cmd, ROOT, TIMEOUT, env)
    return status, err


def exact(n: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in range(n):
        for word in words(sentence(i)):
            counts[word] = counts.get(word, 0) + 1
    return counts


@pytest.mark.parametrize("point", ["evolve-staged", "evolve-mid-swap"])
def test_a_driver_killed_mid_rescale_is_finished_by_the_next_start(
    point: str, redis_db: Any, tmp_path: Path
) -> None:
    rng = random.Random(f"{SEED}-{point}")
    # One point's child drivers run on Spark, the other's on the inline engine: what is under
    # test is the driver's protocol across a real process death, and a JVM per child costs ~8 s.
    engine = "spark" if point == "evolve-mid-swap" else "inline"
    before, after = rng.choice(PAIRS)
    step = rng.randrange(after) if point == "evolve-mid-swap" else 0
    url = redis_db.url
    name, stream = f"rescale-{point}", f"rescale-{point}-sentences"
    conf = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 200,
        "topology.max.spout.pending": 40,
        "redis.stream.url": url,
        "redis.stream.key": stream,
    }
    load_stream(url, stream, (sentence(i) for i in range(SENTENCES // 2)))
    status, err = run(conf, tmp_path / "first.json", name, before, engine)
    assert status == 0, err[-3000:]

    load_stream(url, stream, (sentence(i) for i in range(SENTENCES // 2, SENTENCES)))
    killed = {**conf, "topology.faults": {"driver": {"point": point, "txid": step}}}
    status, err = run(killed, tmp_path / "killed.json", name, after, engine)
    assert status == KILLED, f"seed {SEED}: {before}->{after} exited {status}:\n{err[-3000:]}"
    assert f"injected driver kill at {point}" in err
    shape = stored_shape(conf, f"{name}/")
    assert shape is not None and shape.operation is not None
    assert shape.operation["phase"] == "swapping"
    assert shape.components["count"].parallelism == before  # not yet the new shape

    status, err = run(conf, tmp_path / "restart.json", name, after, engine)
    assert status == 0, err[-3000:]
    assert "finishing a change of its stored state a crash interrupted" in err

    groups = KeyGroups(128)
    counts: dict[str, int] = {}
    for task in range(after):
        state = StateFactory.get_state(f"{name}/count-{task}", conf)
        assert isinstance(state, KeyValueState)
        assert state.stored_txids()[1] is None
        for ekey, payload in state.scan_committed():
            word = state.decode_key(ekey)
            assert groups.owner(groups.group_of(word), after) == task, (word, task)
            counts[word] = state.decode_value(payload)
    assert counts == exact(SENTENCES), f"seed {SEED}: {before}->{after}, {point} {step}"
    listed = get_provider(conf).namespaces(conf, f"{name}/")
    assert sorted(listed) == sorted(
        [f"{name}/$checkpointspout-0", f"{name}/$shape"]
        + [f"{name}/count-{t}" for t in range(after)]
    )
    shape = stored_shape(conf, f"{name}/")
    assert shape is not None and shape.operation is None
    assert shape.components["count"].parallelism == after
    assert pending_count(url, stream, name) == 0
