"""``commit_namespaces`` on a real redis-server: the driver's commit of many namespaces at once.

It may only commit what the one-by-one commit (``check_stored_txids``, then ``State.commit``)
would, and must leave every other namespace untouched for that path to report.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from checkpoint import Action, check_stored_txids
from providers import StateFactory, get_provider
from providers._lease import FENCE_EPOCH_KEY
from providers.errors import StateFencedError, StateLostError

pytestmark = pytest.mark.redis


def conf_for(port: int, **more: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(
            {"jedisPoolConfig": {"host": "127.0.0.1", "port": port}}
        ),
        **more,
    }


def prepared(conf: dict[str, Any], namespace: str, txid: int, words: dict[str, int]) -> None:
    """``namespace`` committed at ``txid - 1`` (key ``base``), ``words`` prepared at ``txid``."""
    state: Any = StateFactory.get_state(namespace, conf)
    if txid > 0:
        state.put("base", txid - 1)
        state.prepare_commit(txid - 1)
        state.commit(txid - 1)
    for word, count in words.items():
        state.put(word, count)
    state.prepare_commit(txid)


def committed(conf: dict[str, Any], namespace: str) -> tuple[Any, dict[Any, Any]]:
    state: Any = StateFactory.get_state(namespace, conf)
    values = {state.decode_key(k): state.decode_value(v) for k, v in state.scan_committed()}
    return state.stored_txids(), values


def calls(client: Any, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return 0 if stats is None else int(stats["calls"])


def test_every_prepared_namespace_commits_in_one_pipeline_of_scripts(redis_db: Any) -> None:
    conf = conf_for(redis_db.port)
    names = [f"many/count-{t}" for t in range(3)]
    for t, ns in enumerate(names):
        prepared(conf, ns, 5, {"storm": t + 1, "spark": 10 * t})
    client = redis_db.client()
    client.config_resetstat()
    assert get_provider(conf).commit_namespaces(conf, names, 5) == names
    # One script call a namespace, nothing loaded or checked beside them. Redis counts the
    # scripts' own calls too: each COMMIT makes one HGETALL (its delta) and one HMGET; the
    # one-by-one path makes two more HGETALL (the load) and one more HMGET (the check) each.
    assert calls(client, "evalsha") == 3
    assert calls(client, "hgetall") == calls(client, "hmget") == 3
    for t, ns in enumerate(names):
        assert committed(conf, ns) == ((5, None), {"base": 4, "storm": t + 1, "spark": 10 * t})
        assert not client.exists(f"{ns}$prepare")
    # A COMMIT again (a retried one) is a no-op that counts as committed.
    assert get_provider(conf).commit_namespaces(conf, names, 5) == names
    assert committed(conf, names[0])[1] == {"base": 4, "storm": 1, "spark": 0}


def test_the_first_txid_commits_on_nothing_committed(redis_db: Any) -> None:
    conf = conf_for(redis_db.port)
    prepared(conf, "first/count-0", 0, {"storm": 1})
    assert get_provider(conf).commit_namespaces(conf, ["first/count-0"], 0) == ["first/count-0"]
    assert committed(conf, "first/count-0") == ((0, None), {"storm": 1})


def test_a_namespace_the_one_by_one_check_refuses_is_left_untouched(redis_db: Any) -> None:
    conf = conf_for(redis_db.port)
    good, lost, other, empty = (f"mixed/count-{t}" for t in range(4))
    prepared(conf, good, 8, {"storm": 1})
    prepared(conf, lost, 8, {"storm": 2})
    prepared(conf, other, 9, {"storm": 3})  # a later txid prepared: not this commit's
    client = redis_db.client()
    client.hset(f"{lost}$txid", "commit", "3")  # committed state older than the delta's base
    before = {ns: (committed(conf, ns), client.hgetall(f"{ns}$prepare")) for ns in (lost, other)}
    names = [good, lost, other, empty]
    assert get_provider(conf).commit_namespaces(conf, names, 8) == [good]
    for ns in (lost, other):
        assert (committed(conf, ns), client.hgetall(f"{ns}$prepare")) == before[ns]
    assert not client.exists(empty) and not client.exists(f"{empty}$txid")
    # What the one-by-one path says of the one refused for its committed txid:
    lost_state = r"holds committed txid 3 and a prepared delta of txid 8"
    with pytest.raises(StateLostError, match=lost_state):
        check_stored_txids(StateFactory.get_state(lost, conf), Action.COMMIT, 8)


def test_a_fenced_driver_commits_nothing(redis_db: Any) -> None:
    conf = conf_for(redis_db.port)
    prepared(conf, "fenced/count-0", 2, {"storm": 1})
    redis_db.client().hset("fenced/count-0$txid", "epoch", "7")  # a newer driver's fence
    stale = conf_for(redis_db.port, **{FENCE_EPOCH_KEY: 6})
    assert get_provider(stale).commit_namespaces(stale, ["fenced/count-0"], 2) == []
    assert committed(conf, "fenced/count-0")[0] == (1, 2)
    with pytest.raises(StateFencedError):
        StateFactory.get_state("fenced/count-0", stale).commit(2)
    current = conf_for(redis_db.port, **{FENCE_EPOCH_KEY: 7})
    assert get_provider(current).commit_namespaces(current, ["fenced/count-0"], 2) == [
        "fenced/count-0"
    ]


def test_scripts_lost_by_the_server_are_loaded_again(redis_db: Any) -> None:
    conf = conf_for(redis_db.port)
    prepared(conf, "flushed/count-0", 1, {"storm": 1})
    redis_db.client().script_flush()
    assert get_provider(conf).commit_namespaces(conf, ["flushed/count-0"], 1) == ["flushed/count-0"]
    assert committed(conf, "flushed/count-0") == ((1, None), {"base": 0, "storm": 1})


def test_the_default_provider_commits_nothing_at_once() -> None:
    assert get_provider({}).commit_namespaces({}, ["x/count-0"], 1) == []
