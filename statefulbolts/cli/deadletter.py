"""``statefulbolts deadletter``: list, show, replay and purge a topology's dead letters.

    statefulbolts deadletter list   --conf FILE (--topology NAME | --id ID) [--json]
    statefulbolts deadletter show   --conf FILE (--topology NAME | --id ID) [--json] ID
    statefulbolts deadletter replay --conf FILE (--topology NAME | --id ID) [--json] (ID... | --all)
    statefulbolts deadletter purge  --conf FILE (--topology NAME | --id ID) [--json] (ID... | --all)

``replay`` marks records; a running topology picks them up within
``topology.deadletter.replay.poll.secs`` (the next one started, at its start) and puts each
one's tuple back in, deleting the record once the transaction that carried it commits.
``purge`` deletes records. Both check every id first and change nothing if one is missing.

Exit status: 0 done (an empty store included, and when the reader of the output stops early,
as ``head`` does); 1 no such record, or the store failed; 2 bad
input: arguments, config, the in-memory provider (its records live in the driver that ran the
topology, not in this process).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Any

from providers import DriverOwnedStateProvider, get_provider, provider_name
from statefulbolts.config import Config, load_config_file
from statefulbolts.deadletter import BatchOrigin, DeadLetter, DeadLetterStore
from statefulbolts.errors import DeadLetterError, DeadLetterNotFoundError

__all__ = ["add_deadletter_commands"]

NOT_FOUND_EXIT_CODE = 1
BAD_INPUT_EXIT_CODE = 2


def _store(args: argparse.Namespace) -> DeadLetterStore:
    """The store ``--conf`` and ``--topology`` / ``--id`` name; the in-memory provider refused."""
    conf = Config(load_config_file(args.conf))
    if isinstance(get_provider(conf), DriverOwnedStateProvider):
        msg = (
            f"{provider_name(conf)} keeps dead letters in the memory of the driver process that "
            "ran the topology, and this command runs in a new process, which holds none. Use a "
            "durable provider (Redis, SQLite) in --conf, or use statefulbolts.deadletter."
            "DeadLetterStore from Python in the driver process"
        )
        raise DeadLetterError(msg)
    return DeadLetterStore(conf, topology=args.topology, transactional_id=args.id)


def _when(seconds: float) -> str:
    at = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return at.strftime("%Y-%m-%d %H:%M:%SZ")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _origin_line(record: DeadLetter) -> str:
    origin = record.origin
    values = "values not known yet" if origin.values is None else repr(origin.values)
    if isinstance(origin, BatchOrigin):
        return f"{origin.describe()}: {values}"
    return f"{origin.describe()}, stream {origin.stream}: {values}"


def _selected(store: DeadLetterStore, args: argparse.Namespace) -> list[DeadLetter]:
    """The records ``ID...`` or ``--all`` names; every id must exist."""
    if bool(args.ids) == bool(args.all):
        msg = "name the records to act on (their ids), or --all; not both"
        raise DeadLetterError(msg)
    records = store.records()
    if args.all:
        return records
    by_id = {r.id: r for r in records}
    missing = [rid for rid in args.ids if rid not in by_id]
    if missing:
        msg = (
            f"no dead letter {', '.join(map(repr, missing))} in {store.describe()}; nothing "
            "was changed (statefulbolts deadletter list shows the ids)"
        )
        raise DeadLetterNotFoundError(msg)
    return [by_id[rid] for rid in dict.fromkeys(args.ids)]


def _cmd_list(args: argparse.Namespace) -> int:
    store = _store(args)
    records = store.records()
    if args.json:
        doc = {
            "scope": store.scope,
            "name": store.name,
            "namespace": store.namespace,
            "records": [r.as_dict() for r in records],
        }
        print(json.dumps(doc))
        return 0
    print(f"dead letters of {store.describe()}: {len(records)} (in {store.namespace})")
    if not records:
        return 0
    print(f"  {'id':<16}  {'state':<6}  {'component':<14} {'task':>4}  tries  last seen")
    for r in records:
        print(
            f"  {r.id:<16}  {r.state:<6}  {_cut(r.component, 14):<14} {r.task_index:>4}  "
            f"{r.attempts:>5}  {_when(r.last_seen)}"
        )
        print(f"      {_cut(f'{r.type_name}: {r.message}', 90)}")
        print(f"      tuple {_cut(r.failed.text, 60)}, of {_cut(_origin_line(r), 110)}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    store = _store(args)
    record = store.get(args.record)
    if record is None:
        msg = f"no dead letter {args.record!r} in {store.describe()}"
        raise DeadLetterNotFoundError(msg)
    if args.json:
        print(json.dumps(record.as_dict()))
        return 0
    failed = record.failed
    print(f"dead letter {record.id} of {store.describe()}")
    print(f"  state:      {record.state} (replayed and failed again: {record.replays})")
    print(f"  component:  {record.component!r}, task {record.task_index}")
    print(
        f"  tuple:      {failed.text} from {failed.describe_source()}, stream {failed.stream}"
    )
    print(f"  origin:     {_origin_line(record)}")
    print(f"  error:      {record.types[0] if record.types else '?'}: {record.message}")
    print(f"  txid:       {record.txid}; failed transactions: {record.attempts}")
    print(f"  seen:       first {_when(record.first_seen)}, last {_when(record.last_seen)}")
    if not record.replayable:
        print("  replay:     not possible (the values it came from were not kept)")
    if record.traceback:
        print("  traceback:")
        for line in record.traceback.rstrip().splitlines():
            print(f"    {line}")
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    store = _store(args)
    chosen = _selected(store, args)
    marked = store.request_replay([r.id for r in chosen]) if chosen else []
    stuck = [r.id for r in marked if not r.replayable]
    if args.json:
        print(json.dumps({"replay": [r.id for r in marked], "not_replayable": stuck}))
        return 0
    print(f"asked for replay: {len(marked)} dead letter(s) of {store.describe()}")
    for r in marked:
        print(f"  {r.id}  {_cut(_origin_line(r), 90)}")
    if stuck:
        print(f"  not replayable (no values kept), they stay: {', '.join(stuck)}")
    if marked:
        print(
            "a running topology takes them within topology.deadletter.replay.poll.secs (the "
            "next one started, at its start); each record goes once its replay commits"
        )
    return 0


def _cmd_purge(args: argparse.Namespace) -> int:
    store = _store(args)
    chosen = _selected(store, args)
    deleted = store.delete([r.id for r in chosen], changed=True)
    if args.json:
        print(json.dumps({"purged": deleted}))
        return 0
    print(f"purged {len(deleted)} dead letter(s) of {store.describe()}")
    for rid in deleted:
        print(f"  {rid}")
    return 0


def _guarded(command: Any) -> Any:
    """Run ``command``: a missing record exits 1 with a message; a reader that stops, 0."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args))
        except DeadLetterNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return NOT_FOUND_EXIT_CODE
        except BrokenPipeError:
            # As the state tool: stdout to devnull, so the flush at exit does not fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0

    return run


def _add_scope(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", required=True, help="JSON or YAML file naming the provider")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topology", help="a checkpointed topology's name")
    which.add_argument("--id", help="a transactional topology's id")
    parser.add_argument("--json", action="store_true", help="one JSON document")


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="record ids (from `list`)")
    parser.add_argument("--all", action="store_true", help="every record of the topology")


def add_deadletter_commands(sub: Any) -> argparse.ArgumentParser:
    """Register ``deadletter`` and its subcommands on the CLI's subparsers ``sub``."""
    top = sub.add_parser("deadletter", help="list, show, replay and purge poison tuples")
    dl_sub = top.add_subparsers(dest="deadletter_command", required=True)

    listing = dl_sub.add_parser("list", help="every dead letter of a topology")
    _add_scope(listing)
    listing.set_defaults(func=_guarded(_cmd_list))

    show = dl_sub.add_parser("show", help="one dead letter, traceback included")
    _add_scope(show)
    show.add_argument("record", metavar="ID", help="the record's id (from `list`)")
    show.set_defaults(func=_guarded(_cmd_show))

    replay = dl_sub.add_parser("replay", help="put dead letters back into the topology")
    _add_scope(replay)
    _add_selection(replay)
    replay.set_defaults(func=_guarded(_cmd_replay))

    purge = dl_sub.add_parser("purge", help="delete dead letters")
    _add_scope(purge)
    _add_selection(purge)
    purge.set_defaults(func=_guarded(_cmd_purge))
    return top

