"""``statefulbolts checkpoint`` and ``statefulbolts transactional``: where stored state stands.

    statefulbolts checkpoint status --conf FILE --topology NAME
                      [--topology-module MODULE:ATTR] [--json]
    statefulbolts checkpoint list --conf FILE [--json]
    statefulbolts transactional status --conf FILE --id TRANSACTIONAL_ID [--json]
    statefulbolts transactional list --conf FILE [--json]

``checkpoint status`` shows where a topology's checkpoint stands in its state provider and what
a restarted driver would do (``checkpoint.status``); ``transactional status`` shows a
transactional topology's next txid, the txids a restart would replay, and its partitions'
metas (and, for an id with nothing stored, the ids that are). ``checkpoint list`` and
``transactional list`` name what a store holds (topologies, transactional ids) with their last
committed txid. Exit status: 0 found; 1 nothing stored, or a provider that cannot list; 2 bad
input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Mapping
from typing import Any

from providers import provider_name
from statefulbolts._load import load_topology
from statefulbolts.config import Config, load_config_file
from statefulbolts.errors import TopologyError
from statefulbolts.topology import StormTopology

__all__ = ["add_status_commands"]

NOT_FOUND_EXIT_CODE = 1


def _cmd_checkpoint_status(args: argparse.Namespace) -> int:
    from checkpoint.status import checkpoint_status, stateful_tasks
    from recovery.lease import describe_lease

    conf = Config(load_config_file(args.conf))
    tasks = None
    if args.topology_module:
        topology = load_topology(args.topology_module)
        if not isinstance(topology, StormTopology):
            msg = f"{args.topology_module} is a transactional topology: see `transactional status`"
            raise TopologyError(msg)
        tasks = stateful_tasks(topology)
    status = checkpoint_status(conf, args.topology, tasks)
    if not status.found:
        from checkpoint.status import stored_topologies

        stored = stored_topologies(conf)
        if stored is not None:
            _did_you_mean(conf, args.topology, "topology", [s.topology for s in stored])
    if args.json:
        print(json.dumps(status.as_dict()))
        return 0 if status.found else NOT_FOUND_EXIT_CODE
    print(f"topology {args.topology!r} in {status.provider}")
    if status.checkpoint is None:
        print("  checkpoint: nothing saved (never ran, or a provider that keeps no state)")
    else:
        cp = status.checkpoint
        print(f"  checkpoint: {cp} (txid {cp.txid}, phase {cp.phase.value})")
    print(f"  on restart: {', '.join(status.on_restart)}")
    print(f"  lease: {describe_lease(status.lease)}")
    if not status.tasks:
        print("  stateful tasks: none found")
    for t in status.tasks:
        prepared = "none" if t.prepared_txid is None else str(t.prepared_txid)
        committed = "none" if t.committed_txid is None else str(t.committed_txid)
        print(f"  {t.namespace}: committed txid {committed}, prepared txid {prepared}")
    return 0 if status.found else NOT_FOUND_EXIT_CODE


def _cmd_checkpoint_list(args: argparse.Namespace) -> int:
    from checkpoint.status import last_committed_txid, stored_topologies

    conf = Config(load_config_file(args.conf))
    found = stored_topologies(conf)
    if found is None:
        return _cannot_list(conf, "topologies")
    rows = [
        {
            "topology": s.topology,
            "checkpoint": None if s.checkpoint is None else str(s.checkpoint),
            "committed_txid": last_committed_txid(s.checkpoint),
        }
        for s in found
    ]
    if args.json:
        print(json.dumps({"provider": provider_name(conf), "topologies": rows}))
        return 0
    print(f"{len(rows)} checkpointed topolog{'y' if len(rows) == 1 else 'ies'} in "
          f"{provider_name(conf)}")  # fmt: skip
    for row in rows:
        committed = "none" if row["committed_txid"] is None else row["committed_txid"]
        saved = row["checkpoint"] or "nothing saved"
        print(f"  {row['topology']}: last committed txid {committed} (checkpoint {saved})")
    return 0


def _cmd_transactional_list(args: argparse.Namespace) -> int:
    from statefulbolts.transactional import stored_transactional_ids, transactional_status

    conf = Config(load_config_file(args.conf))
    ids = stored_transactional_ids(conf)
    if ids is None:
        return _cannot_list(conf, "transactional ids")
    rows = [
        {"transactional_id": tid, "committed_txid": transactional_status(conf, tid).committed_txid}
        for tid in ids
    ]
    if args.json:
        print(json.dumps({"provider": provider_name(conf), "transactional_ids": rows}))
        return 0
    print(f"{len(rows)} transactional id{'' if len(rows) == 1 else 's'} in {provider_name(conf)}")
    for row in rows:
        committed = "none" if row["committed_txid"] is None else row["committed_txid"]
        print(f"  {row['transactional_id']}: last committed txid {committed}")
    return 0


def _cannot_list(conf: Mapping[str, Any], what: str) -> int:
    print(
        f"error: the state provider {provider_name(conf)} cannot list its namespaces, so "
        f"not its {what}",
        file=sys.stderr,
    )
    return NOT_FOUND_EXIT_CODE


def _did_you_mean(conf: Mapping[str, Any], wanted: str, what: str, stored: list[str]) -> None:
    """On stderr: nothing is stored under ``wanted``; what is, and the closest of it."""
    if not stored:
        print(f"note: {provider_name(conf)} holds no {what}s", file=sys.stderr)
        return
    close = [s for s in stored if s.startswith(wanted)] or difflib.get_close_matches(
        wanted, stored, n=1
    )
    hint = f"; did you mean {close[0]!r}?" if close else ""
    shown = ", ".join(stored[:20]) + (f" and {len(stored) - 20} more" if len(stored) > 20 else "")
    print(f"note: nothing stored for {what} {wanted!r}; stored: {shown}{hint}", file=sys.stderr)


def _cmd_transactional_status(args: argparse.Namespace) -> int:
    from recovery.lease import describe_lease
    from statefulbolts.transactional import stored_transactional_ids, transactional_status

    conf = Config(load_config_file(args.conf))
    status = transactional_status(conf, args.id)
    if not status.found:
        ids = stored_transactional_ids(conf)
        if ids is not None:
            _did_you_mean(conf, args.id, "transactional id", ids)
    if args.json:
        print(json.dumps(status.as_dict()))
        return 0 if status.found else NOT_FOUND_EXIT_CODE
    committed = "none" if status.committed_txid is None else status.committed_txid
    print(f"transactional id {args.id!r} in {status.provider}")
    print(f"  next txid to commit: {status.current_txid} (last committed: {committed})")
    replays = ", ".join(f"{t} (meta {status.metas[t]!r})" for t in status.replays) or "none"
    print(f"  on restart, replays: {replays}")
    print(f"  lease: {describe_lease(status.lease)}")
    if not status.partitions:
        print("  partitions: none stored")
    for p, metas in sorted(status.partitions.items()):
        shown = ", ".join(f"txid {t}: {m!r}" for t, m in sorted(metas.items())) or "none"
        print(f"  partition {p}: {shown}")
    print(f"  committer maps: {len(status.maps)}")
    for namespace in status.maps:
        print(f"    {namespace}")
    return 0 if status.found else NOT_FOUND_EXIT_CODE


def add_status_commands(sub: Any) -> None:
    """Register ``checkpoint`` and ``transactional`` on the CLI's subparsers ``sub``."""
    checkpoint = sub.add_parser("checkpoint", help="inspect saved checkpoint state")
    cp_sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    status = cp_sub.add_parser(
        "status", help="saved txid and phase, per stateful task committed and prepared txids"
    )
    status.add_argument("--conf", required=True, help="JSON or YAML file naming the provider")
    status.add_argument("--topology", required=True, help="topology name")
    status.add_argument(
        "--topology-module",
        help="MODULE:ATTR of the topology, to list its stateful tasks (default for Redis: "
        "the tasks found in Redis)",
    )
    status.add_argument("--json", action="store_true", help="one JSON document")
    status.set_defaults(func=_cmd_checkpoint_status)
    cp_list = cp_sub.add_parser(
        "list", help="the checkpointed topologies a store holds, with their last committed txid"
    )
    cp_list.add_argument("--conf", required=True, help="JSON or YAML file naming the provider")
    cp_list.add_argument("--json", action="store_true", help="one JSON document")
    cp_list.set_defaults(func=_cmd_checkpoint_list)

    transactional = sub.add_parser("transactional", help="inspect a transactional topology")
    tx_sub = transactional.add_subparsers(dest="transactional_command", required=True)
    tx_status = tx_sub.add_parser(
        "status", help="next txid, txids a restart replays, partition metas, committer maps"
    )
    tx_status.add_argument("--conf", required=True, help="JSON or YAML file naming the provider")
    tx_status.add_argument("--id", required=True, help="the transactional id")
    tx_status.add_argument("--json", action="store_true", help="one JSON document")
    tx_status.set_defaults(func=_cmd_transactional_status)
    tx_list = tx_sub.add_parser(
        "list", help="the transactional ids a store holds, with their last committed txid"
    )
    tx_list.add_argument("--conf", required=True, help="JSON or YAML file naming the provider")
    tx_list.add_argument("--json", action="store_true", help="one JSON document")
    tx_list.set_defaults(func=_cmd_transactional_list)
