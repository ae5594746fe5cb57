"""The state tool and state TTL: ``dump`` shows each key's expiry, no read shows an expired key.

A SQLite store (the tool refuses the in-memory provider), written as a stateful task's state
would be: through a state with a transaction timestamp and a TTL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from providers import StateFactory, StateTtl
from statefulbolts.cli import main
from statefulbolts.state import read_state

TTL = StateTtl(10_000)


def write(conf: dict[str, Any], txid: int, now: int, ttl: StateTtl | None, **values: Any) -> None:
    state = StateFactory.get_state("wc/count-0", conf)
    state.set_transaction_time(now, ttl)
    for key, value in values.items():
        state.put(key, value)
    state.prepare_commit(txid)
    state.commit(txid)


def dump(capsys: Any, conf_path: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    code = main(
        [
            "state",
            "dump",
            "--conf",
            str(conf_path),
            "--topology",
            "wc",
            "--component",
            "count",
            *extra,
        ]
    )
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines()]


def test_dump_and_get_show_expiries_and_hide_expired_keys(tmp_path: Path, capsys: Any) -> None:
    conf = {
        "topology.state.provider": "sqlite_state.SqliteKeyValueStateProvider",
        "topology.state.provider.config": {"path": str(tmp_path / "s.db")},
    }
    path = tmp_path / "conf.json"
    path.write_text(json.dumps(conf))
    write(conf, 1, 1_000, TTL, a=1, b=2)
    write(conf, 2, 5_000, TTL, b=3)
    write(conf, 3, 6_000, None, forever=4)
    assert dump(capsys, path, "--at-ms", "10999") == (
        0,
        [
            {"task": 0, "key": "a", "value": 1, "expires_ms": 11_000},
            {"task": 0, "key": "b", "value": 3, "expires_ms": 15_000},
            {"task": 0, "key": "forever", "value": 4},
        ],
    )
    code, rows = dump(capsys, path, "--at-ms", "11000")
    assert (code, [r["key"] for r in rows]) == (0, ["b", "forever"])
    code, rows = dump(capsys, path)  # judged now, by the wall clock: every TTL has passed
    assert (code, [r["key"] for r in rows]) == (0, ["forever"])
    get = ["state", "get", "--conf", str(path), "--topology", "wc", "--component", "count"]
    assert main([*get, "--at-ms", "10999", "a"]) == 0
    assert capsys.readouterr().out == "1\n"
    assert main([*get, "--at-ms", "11000", "a"]) == 1  # not held any more
    assert "key 'a' is not in component 'count'" in capsys.readouterr().err
    # read_state judges at the last committed transaction's timestamp (6_000) by default.
    assert read_state(conf, "count", topology="wc") == {"a": 1, "b": 3, "forever": 4}
    assert read_state(conf, "count", topology="wc", at_ms=11_000) == {"b": 3, "forever": 4}
