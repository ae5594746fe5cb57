"""``statefulbolts state``: dump, get, export, import and verify, on the command line.

    statefulbolts state dump   --conf FILE (--topology NAME | --id ID) --component C
                               [--map NAME] [--prepared] [--raw] [--at-ms MS]
                               [--format jsonl|csv] [--output FILE]
    statefulbolts state get    --conf FILE (--topology NAME | --id ID) --component C
                               [--map NAME] [--prepared] [--raw] [--at-ms MS]
                               [--json-key] KEY
    statefulbolts state export --conf FILE (--topology NAME | --id ID) --output FILE [--json]
    statefulbolts state import --conf FILE (--topology NAME | --id ID) [--overwrite] [--json]
                               FILE
    statefulbolts state verify [--json] FILE

``dump`` streams one line per key (JSON lines ``{"task", "key", "value"}``, with
``"expires_ms"`` for a key that has a state TTL, or CSV ``task,key,value`` with strings as
they are and anything else as JSON); ``get`` prints one key's value as JSON. Both judge state
TTL at ``--at-ms`` (ms since the epoch; default: now): a key expired then is not shown.
``export`` and ``import`` end with where the topology stands (what a
restart will run), read back from the provider. ``import`` writes only into the topology (or
transactional id) it names, and refuses a file that holds another.

Exit status: 0 done (also when the reader of ``dump`` stops early, as ``head`` does); 1 nothing
stored (no such topology, component or key) or the store failed; 2 bad input: arguments, config,
a damaged or foreign file, a file of another topology, an import target that already holds
state (without ``--overwrite``), stored values the configured ``keyClass`` / ``valueClass``
cannot rebuild, the in-memory provider (its state lives in the driver that ran the topology,
not in this process).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

from providers import provider_name
from statefulbolts.cli._state_shape import add_shape_commands
from statefulbolts.config import Config, load_config_file
from statefulbolts.errors import StateNotFoundError, StateToolError
from statefulbolts.state import (
    Row,
    Scope,
    StateFileInfo,
    driver_owned,
    export_state,
    get_value,
    import_state,
    iter_rows,
    read_info,
)

__all__ = ["add_state_commands"]

NOT_FOUND_EXIT_CODE = 1
BAD_INPUT_EXIT_CODE = 2


def _conf(args: argparse.Namespace) -> Config:
    """The config file's keys; the in-memory provider is refused (its state is elsewhere)."""
    conf = Config(load_config_file(args.conf))
    if driver_owned(conf) is not None:
        msg = (
            f"{provider_name(conf)} keeps a topology's state in the memory of the driver process "
            "that ran it, and this command runs in a new process, which holds none. Use a "
            "durable provider (Redis, SQLite) in --conf, or call statefulbolts.state "
            "(read_state, export_state, import_state) from Python in the driver process"
        )
        raise StateToolError(msg)
    return conf


def _scope_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"topology": args.topology, "transactional_id": args.id}


def _at_ms(args: argparse.Namespace) -> int:
    """The timestamp state TTL is judged at: ``--at-ms``, else now (the wall clock)."""
    return int(time.time() * 1000) if args.at_ms is None else int(args.at_ms)


def _json(value: Any, row: Row | None = None) -> str:
    """``value`` as JSON; what JSON cannot hold (bytes, a set) is an error naming the key.

    A value a ``valueClass`` rebuilt (a dataclass, a pydantic model) is written as its fields.
    """
    try:
        return json.dumps(value, ensure_ascii=False, default=_fields)
    except (TypeError, ValueError) as exc:
        where = "" if row is None else f"namespace {row.namespace!r}, key {row.key!r}: "
        msg = f"{where}a {type(value).__name__} cannot be written as JSON ({exc})"
        raise StateToolError(msg) from exc


def _fields(obj: Any) -> Any:
    """A dataclass's or a pydantic model's fields, for ``json.dumps``; anything else refused."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    msg = f"Object of type {type(obj).__name__} is not JSON serializable"
    raise TypeError(msg)


def _text(value: Any, row: Row) -> str:
    return value if isinstance(value, str) else _json(value, row)


@contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8", newline="") as out:
        yield out


def _cmd_dump(args: argparse.Namespace) -> int:
    conf = _conf(args)
    rows = iter_rows(
        conf,
        args.component,
        map_name=args.map,
        prepared=args.prepared,
        raw=args.raw,
        at_ms=_at_ms(args),
        **_scope_args(args),
    )
    first = next(rows, None)  # a component with no state raises before any output
    with _output(args.output) as out:
        if args.format == "csv":
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(["task", "key", "value"])
            for row in _chain(first, rows):
                writer.writerow([row.task, _text(row.key, row), _text(row.value, row)])
        else:
            for row in _chain(first, rows):
                key, value = _json(row.key, row), _json(row.value, row)
                expiry = "" if row.expires_ms is None else f', "expires_ms": {row.expires_ms}'
                out.write(f'{{"task": {row.task}, "key": {key}, "value": {value}{expiry}}}\n')
    return 0


def _chain(first: Row | None, rest: Iterator[Row]) -> Iterator[Row]:
    if first is not None:
        yield first
        yield from rest


def _cmd_get(args: argparse.Namespace) -> int:
    conf = _conf(args)
    key: Any = args.key
    if args.json_key:
        try:
            key = json.loads(args.key)
        except json.JSONDecodeError as exc:
            msg = f"--json-key: KEY {args.key!r} is not JSON ({exc})"
            raise StateToolError(msg) from exc
    missing = object()
    value = get_value(
        conf,
        args.component,
        key,
        missing,
        map_name=args.map,
        prepared=args.prepared,
        raw=args.raw,
        at_ms=_at_ms(args),
        **_scope_args(args),
    )
    if value is missing:
        scope = Scope.of(args.topology, args.id)
        msg = f"key {key!r} is not in component {args.component!r} of {scope.describe()}"
        raise StateNotFoundError(msg)
    print(_json(value))
    return 0


def _resume(conf: Mapping[str, Any], header: Mapping[str, Any]) -> dict[str, Any]:
    """Where the topology stands in ``conf``'s provider: what a restart will run."""
    if header["scope"] == "topology":
        from checkpoint.status import checkpoint_status

        status = checkpoint_status(conf, header["name"], tasks=[])
        cp = status.checkpoint
        return {
            "checkpoint": None if cp is None else str(cp),
            "on_restart": status.on_restart,
        }
    from statefulbolts.transactional import transactional_status

    tx = transactional_status(conf, header["name"])
    return {"next_txid": tx.current_txid, "replays": tx.replays}


def _resume_line(resume: Mapping[str, Any]) -> str:
    if "on_restart" in resume:
        saved = resume["checkpoint"] or "nothing saved"
        return f"  checkpoint: {saved}; on restart: {', '.join(resume['on_restart'])}"
    replays = ", ".join(str(t) for t in resume["replays"]) or "none"
    return f"  next txid to commit: {resume['next_txid']}; on restart, replays: {replays}"


def _print_info(info: StateFileInfo) -> None:
    prepared = sum(n.prepared for n in info.namespaces)
    print(
        f"  {len(info.namespaces)} namespaces, {info.entries} entries ({info.entries - prepared} "
        f"committed, {prepared} prepared), {info.size} bytes, sha256 {info.sha256}"
    )
    for ns in info.namespaces:
        txids = f"committed txid {_txid(ns.committed_txid)}"
        if ns.prepared_txid is not None:
            txids += f", prepared txid {ns.prepared_txid} ({ns.prepared} prepared)"
        print(f"  {ns.name}: {txids}, {ns.committed} committed")


def _txid(txid: int | None) -> str:
    return "none" if txid is None else str(txid)


def _cmd_export(args: argparse.Namespace) -> int:
    conf = _conf(args)
    info = export_state(conf, args.output, **_scope_args(args))
    resume = _resume(conf, info.header)
    if args.json:
        print(json.dumps({**info.as_dict(), "file": args.output, "resume": resume}))
        return 0
    scope = Scope.of(args.topology, args.id)
    print(
        f"exported {scope.describe()} from {info.header['provider']} "
        f"({info.header['location']}) to {args.output}"
    )
    _print_info(info)
    print(_resume_line(resume))
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    conf = _conf(args)
    result = import_state(conf, args.file, overwrite=args.overwrite, **_scope_args(args))
    header = result.info.header
    resume = _resume(conf, header)
    if args.json:
        print(json.dumps({**result.as_dict(), "file": args.file, "resume": resume}))
        return 0
    scope = Scope.of(args.topology, args.id)
    print(
        f"imported {scope.describe()} into {provider_name(conf)} ({result.location}) from "
        f"{args.file} "
        f"(exported from {header['provider']}, {header['location']}, at {header['created_at']})"
    )
    _print_info(result.info)
    print(f"  replaced: {len(result.replaced)} namespaces, emptied: {len(result.emptied)}")
    print(_resume_line(resume))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    info = read_info(args.file)
    if args.json:
        print(json.dumps({**info.as_dict(), "file": args.file}))
        return 0
    header = info.header
    print(
        f"{args.file}: {header['format']} version {header['version']}, {header['scope']} "
        f"{header['name']!r}, exported from {header['provider']} ({header['location']}) at "
        f"{header['created_at']}; intact"
    )
    _print_info(info)
    return 0


def _guarded(command: Any) -> Any:
    """Run ``command``: "not found" exits 1 and an unreadable file 2, both with a message.

    A reader that stops early (``dump ... | head``) ends the output quietly, with status 0.
    """

    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args))
        except StateNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return NOT_FOUND_EXIT_CODE
        except BrokenPipeError:
            # Python's advice: point stdout at devnull so the flush at exit does not fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
        except OSError as exc:
            if isinstance(exc, ConnectionError):
                raise  # StateBackendError: the caller's exit status for a store failure
            print(f"error: {exc}", file=sys.stderr)
            return BAD_INPUT_EXIT_CODE

    return run


def _add_scope(parser: argparse.ArgumentParser, component: bool) -> None:
    parser.add_argument("--conf", required=True, help="JSON or YAML file naming the provider")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topology", help="a checkpointed topology's name")
    which.add_argument("--id", help="a transactional topology's id")
    if component:
        parser.add_argument("--component", required=True, help="stateful bolt (or committer) id")
        parser.add_argument(
            "--map", default="default", help="a committer's map name (default: default)"
        )
        parser.add_argument(
            "--prepared",
            action="store_true",
            help="as of the prepared delta: committed values overlaid by a pending transaction",
        )
        parser.add_argument(
            "--raw",
            action="store_true",
            help="as stored, plain msgpack: a bolt's keys and values without keyClass / "
            "valueClass, a committer map's [txid, value] form",
        )
        parser.add_argument(
            "--at-ms",
            type=int,
            default=None,
            help="judge state TTL at this timestamp, ms since the epoch (default: now): a key "
            "expired then is not shown",
        )


def add_state_commands(sub: Any) -> argparse.ArgumentParser:
    """Register ``state`` and its subcommands on the CLI's subparsers ``sub``."""
    state = sub.add_parser("state", help="read, export and import a topology's state, offline")
    st_sub = state.add_subparsers(dest="state_command", required=True)

    dump = st_sub.add_parser("dump", help="every key of a component, streamed")
    _add_scope(dump, component=True)
    dump.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="jsonl or csv")
    dump.add_argument("--output", help="write to FILE instead of standard output")
    dump.set_defaults(func=_guarded(_cmd_dump))

    get = st_sub.add_parser("get", help="one key's value, as JSON")
    _add_scope(get, component=True)
    get.add_argument("key", metavar="KEY", help="the key (a string, or JSON with --json-key)")
    get.add_argument("--json-key", action="store_true", help='KEY is JSON (e.g. 7, ["a", 1])')
    get.set_defaults(func=_guarded(_cmd_get))

    export = st_sub.add_parser("export", help="a topology's whole state to a portable file")
    _add_scope(export, component=False)
    export.add_argument("--output", required=True, help="the state file to write")
    export.add_argument("--json", action="store_true", help="one JSON document")
    export.set_defaults(func=_guarded(_cmd_export))

    imp = st_sub.add_parser("import", help="a state file into the provider --conf names")
    imp.add_argument("file", metavar="FILE", help="a file `state export` wrote")
    _add_scope(imp, component=False)
    imp.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the topology's state if the target holds some",
    )
    imp.add_argument("--json", action="store_true", help="one JSON document")
    imp.set_defaults(func=_guarded(_cmd_import))

    verify = st_sub.add_parser("verify", help="check a state file and show what it holds")
    verify.add_argument("file", metavar="FILE", help="a file `state export` wrote")
    verify.add_argument("--json", action="store_true", help="one JSON document")
    verify.set_defaults(func=_guarded(_cmd_verify))
    add_shape_commands(st_sub, _guarded)
    return state
