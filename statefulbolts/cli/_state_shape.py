"""``statefulbolts state shape | evolve | rescale | rename | drop``: change a stopped state.

    statefulbolts state shape   --conf FILE (--topology NAME | --id ID) [--json]
    statefulbolts state evolve  --conf FILE (--topology NAME | --id ID)
                                --topology-module MODULE:ATTR [--dry-run] [--json]
    statefulbolts state rescale --conf FILE (--topology NAME | --id ID) --component C
                                --parallelism N [--dry-run] [--json]
    statefulbolts state rename  --conf FILE (--topology NAME | --id ID) --from OLD --to NEW
                                [--dry-run] [--json]
    statefulbolts state drop    --conf FILE (--topology NAME | --id ID) [--component C] --yes
                                [--json]

``shape`` prints the stored shape (per component: parallelism, layout, state version) and an
operation a crash left under way; ``evolve`` does what the topology's next start would do
(``recovery.evolve``); ``rescale`` and ``rename`` change one component; ``drop`` deletes a
component's state, or the topology's whole state. Stop the topology first.

Exit status: 0 done; 1 nothing stored; 2 refused (the message says why and what to do), bad
arguments or config.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from providers import provider_name
from recovery.evolve import EvolutionReport
from statefulbolts._load import load_topology
from statefulbolts.config import Config, load_config_file
from statefulbolts.errors import StateToolError, TopologyError
from statefulbolts.namespaces import topology_prefix, transactional_prefix
from statefulbolts.offline import drop, evolve_to_topology, rename, rescale, stored_shape
from statefulbolts.state import driver_owned
from statefulbolts.transactional import TransactionalTopology

__all__ = ["add_shape_commands"]

NOT_FOUND_EXIT_CODE = 1


def _conf(args: argparse.Namespace) -> Config:
    conf = Config(load_config_file(args.conf))
    if driver_owned(conf) is not None:
        msg = (
            f"{provider_name(conf)} keeps a topology's state in the memory of the driver process "
            "that ran it, and this command runs in a new process, which holds none. Use a "
            "durable provider (Redis, SQLite) in --conf, or call statefulbolts.offline (rescale, "
            "rename, drop, evolve_to_topology) from Python in the driver process"
        )
        raise StateToolError(msg)
    return conf


def _prefix(args: argparse.Namespace) -> str:
    name = args.topology if args.topology is not None else args.id
    if not name or "/" in name:
        msg = f"a topology name or transactional id is non-empty and has no '/', got {name!r}"
        raise StateToolError(msg)
    return topology_prefix(name) if args.topology is not None else transactional_prefix(name)


def _report(report: EvolutionReport, args: argparse.Namespace, verb: str) -> int:
    dry = getattr(args, "dry_run", False)
    if args.json:
        doc = {
            "scope": report.label,
            "dry_run": dry,
            "components": report.lines,
            "moved": report.moved,
            "resumed": report.resumed,
            "seconds": round(report.seconds, 3),
        }
        print(json.dumps(doc))
        return 0
    head = "would change" if dry else verb
    print(f"{report.label}: {head}")
    for line in report.lines:
        print(f"  {line}")
    if report.moved:
        moved = ", ".join(f"{c}: {n} entries" for c, n in sorted(report.moved.items()))
        print(f"  moved {moved} in {report.seconds:.2f} s")
    if report.resumed:
        print("  finished a change a crash had interrupted")
    return 0


def _cmd_shape(args: argparse.Namespace) -> int:
    conf = _conf(args)
    prefix = _prefix(args)
    shape = stored_shape(conf, prefix)
    if shape is None:
        print(f"error: no stored shape under {prefix!r} in {provider_name(conf)}", file=sys.stderr)
        return NOT_FOUND_EXIT_CODE
    if args.json:
        print(json.dumps(shape.to_value()))
        return 0
    print(f"{prefix[:-1]} in {provider_name(conf)}:")
    for cid, component in sorted(shape.components.items()):
        print(f"  {cid}: {component.describe()}")
    if shape.operation is not None:
        print(f"  a change is under way (phase {shape.operation.get('phase')}): the next start ")
        print("  or statefulbolts state evolve finishes it")
    return 0


def _cmd_evolve(args: argparse.Namespace) -> int:
    conf = _conf(args)
    topology = load_topology(args.topology_module)
    if args.id is not None and not isinstance(topology, TransactionalTopology):
        msg = f"{args.topology_module} builds a checkpointed topology; use --topology, not --id"
        raise TopologyError(msg)
    if args.topology is not None and isinstance(topology, TransactionalTopology):
        msg = f"{args.topology_module} builds a transactional topology; use --id, not --topology"
        raise TopologyError(msg)
    report = evolve_to_topology(conf, _prefix(args), topology, dry_run=args.dry_run)
    return _report(report, args, "evolved")


def _cmd_rescale(args: argparse.Namespace) -> int:
    conf = _conf(args)
    report = rescale(conf, _prefix(args), args.component, args.parallelism, dry_run=args.dry_run)
    return _report(report, args, "rescaled")


def _cmd_rename(args: argparse.Namespace) -> int:
    conf = _conf(args)
    report = rename(conf, _prefix(args), args.old, args.new, dry_run=args.dry_run)
    return _report(report, args, "renamed")


def _cmd_drop(args: argparse.Namespace) -> int:
    if not args.yes:
        what = f"component {args.component!r}" if args.component else "the whole state"
        print(f"error: dropping {what} deletes it for good; add --yes", file=sys.stderr)
        return 2
    conf = _conf(args)
    names = drop(conf, _prefix(args), args.component)
    if args.json:
        print(json.dumps({"dropped": names}))
    else:
        print(f"dropped {len(names)} namespaces:")
        for ns in names:
            print(f"  {ns}")
    return 0


def _scope(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", required=True, help="JSON or YAML file naming the provider")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topology", help="a checkpointed topology's name")
    which.add_argument("--id", help="a transactional topology's id")
    parser.add_argument("--json", action="store_true", help="one JSON document")


def add_shape_commands(st_sub: Any, guarded: Any) -> None:
    """Register the commands on the ``state`` command's subparsers (``guarded`` wraps each)."""
    shape = st_sub.add_parser("shape", help="how a topology's state is stored: per component")
    _scope(shape)
    shape.set_defaults(func=guarded(_cmd_shape))

    evolve = st_sub.add_parser(
        "evolve", help="bring the stored state to a topology's shape, as its start would"
    )
    _scope(evolve)
    evolve.add_argument(
        "--topology-module",
        required=True,
        help="MODULE:ATTR: the topology, or a function of no arguments building it",
    )
    evolve.add_argument("--dry-run", action="store_true", help="say what would change")
    evolve.set_defaults(func=guarded(_cmd_evolve))

    rescale_p = st_sub.add_parser("rescale", help="redistribute a component over N tasks")
    _scope(rescale_p)
    rescale_p.add_argument("--component", required=True, help="the stateful component")
    rescale_p.add_argument("--parallelism", required=True, type=int, help="its new task count")
    rescale_p.add_argument("--dry-run", action="store_true", help="say what would change")
    rescale_p.set_defaults(func=guarded(_cmd_rescale))

    rename_p = st_sub.add_parser("rename", help="move a component's state to another id")
    _scope(rename_p)
    rename_p.add_argument("--from", dest="old", required=True, help="the stored component id")
    rename_p.add_argument("--to", dest="new", required=True, help="its new id")
    rename_p.add_argument("--dry-run", action="store_true", help="say what would change")
    rename_p.set_defaults(func=guarded(_cmd_rename))

    drop_p = st_sub.add_parser("drop", help="delete a component's (or a topology's) state")
    _scope(drop_p)
    drop_p.add_argument("--component", help="only this component (default: everything)")
    drop_p.add_argument("--yes", action="store_true", help="really delete it")
    drop_p.set_defaults(func=guarded(_cmd_drop))
