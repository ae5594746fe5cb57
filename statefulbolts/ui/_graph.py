"""The topology as a picture: its components as boxes in columns, its inputs as labelled edges.

``topology_graph`` turns a ``StormTopology`` or a ``TransactionalTopology`` into plain data the
page draws as SVG: a node per component (its kind, its parallelism, where its box goes) and an
edge per (source, target) pair, labelled with the groupings of the streams it carries.

Layout, in columns from left to right:

1. A spout is in column 0; a bolt is one column right of its rightmost source, so every edge
   points right.
2. Within a column, boxes are ordered by the mean row of their sources (the spouts by id), which
   keeps most edges from crossing in the small DAGs topologies are; ties go by id.
3. Each column is centred on the tallest one.

Edges that carry only the checkpoint protocol's ``$checkpoint`` stream are marked
``checkpoint``, and the page draws them dashed: they are the protocol's barriers, not data.

Example:
    >>> from examples.wordcount import build
    >>> graph = topology_graph(build(10))
    >>> [(n["id"], n["kind"], n["parallelism"], n["column"]) for n in graph["nodes"]]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('$checkpointspout', 'checkpoint spout', 1, 0), ('sentences', 'spout', 1, 0),
     ('split', 'bolt', 2, 1), ('count', 'stateful bolt', 2, 2)]
    >>> [(e["source"], e["target"], e["label"]) for e in graph["edges"] if not e["checkpoint"]]
    [('sentences', 'split', 'shuffle'), ('split', 'count', 'fields(word)')]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statefulbolts.streams import Grouping, GroupingKind
from statefulbolts.topology import CHECKPOINT_COMPONENT_ID, CHECKPOINT_STREAM_ID, StormTopology
from statefulbolts.transactional import TransactionalTopology
from statefulbolts.tuples import DEFAULT_STREAM

__all__ = ["NODE_HEIGHT", "NODE_WIDTH", "topology_graph"]

NODE_WIDTH = 190
NODE_HEIGHT = 74
_COLUMN_GAP = 90
_ROW_GAP = 34
_PAD = 24


def grouping_label(grouping: Grouping) -> str:
    """``shuffle``, ``fields(word, n)``, ``all`` ...: how a grouping reads on an edge."""
    if grouping.kind is GroupingKind.FIELDS:
        return f"fields({', '.join(grouping.fields)})"
    return grouping.kind.value


def _kinds(topology: StormTopology, tx: TransactionalTopology | None) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for cid, spec in topology.components.items():
        if cid == CHECKPOINT_COMPONENT_ID:
            kinds[cid] = "checkpoint spout"
        elif tx is not None and cid == tx.spout_id:
            kinds[cid] = "transactional spout"
        elif spec.is_spout:
            kinds[cid] = "spout"
        elif tx is not None and cid in tx.committers:
            kinds[cid] = "committer"
        elif spec.is_stateful:
            kinds[cid] = "stateful bolt"
        else:
            kinds[cid] = "bolt"
    return kinds


def _columns(topology: StormTopology) -> dict[str, int]:
    """Rule 1 of the module docstring."""
    column = dict.fromkeys(topology.spouts, 0)
    for bolt in topology.topological_bolts():
        sources = {i.source.component_id for i in topology.inputs(bolt)}
        column[bolt] = 1 + max((column[s] for s in sources), default=0)
    return column


def _rows(topology: StormTopology, column: Mapping[str, int]) -> dict[str, int]:
    """Rule 2 of the module docstring."""
    row: dict[str, int] = {}
    for c in range(max(column.values(), default=-1) + 1):
        members = [cid for cid, col in column.items() if col == c]

        def weight(cid: str) -> tuple[float, str]:
            spec = topology.component(cid)
            placed = [
                row[i.source.component_id] for i in spec.inputs if i.source.component_id in row
            ]
            return (sum(placed) / len(placed) if placed else -1.0, cid)

        for r, cid in enumerate(sorted(members, key=weight)):
            row[cid] = r
    return row


def _edges(topology: StormTopology, column: Mapping[str, int]) -> list[dict[str, Any]]:
    """One edge per (source, target), left to right."""
    pairs: dict[tuple[str, str], list[tuple[str, Grouping]]] = {}
    for cid in sorted(topology.bolts):
        for inp in topology.inputs(cid):
            key = (inp.source.component_id, cid)
            pairs.setdefault(key, []).append((inp.source.stream_id, inp.grouping))
    edges = []
    for (source, target), streams in sorted(pairs.items(), key=lambda p: (column[p[0][0]], p[0])):
        data = [(s, g) for s, g in streams if s != CHECKPOINT_STREAM_ID]
        labels = [
            grouping_label(g) if s == DEFAULT_STREAM else f"{s}: {grouping_label(g)}"
            for s, g in data
        ]
        edges.append(
            {
                "source": source,
                "target": target,
                "streams": [s for s, _ in streams],
                "label": "; ".join(labels) if labels else CHECKPOINT_STREAM_ID,
                "checkpoint": not data,
            }
        )
    return edges


def topology_graph(topology: StormTopology | TransactionalTopology) -> dict[str, Any]:
    """Nodes (id, kind, parallelism, phase, column, row, x, y), edges and the picture's size."""
    tx = topology if isinstance(topology, TransactionalTopology) else None
    storm = topology.topology if isinstance(topology, TransactionalTopology) else topology
    kinds = _kinds(storm, tx)
    column = _columns(storm)
    row = _rows(storm, column)
    tallest = max(row.values(), default=0) + 1
    heights = {c: 1 + max(r for cid, r in row.items() if column[cid] == c) for c in column.values()}
    nodes = []
    for cid in sorted(storm.components, key=lambda c: (column[c], row[c])):
        c, r = column[cid], row[cid]
        offset = (tallest - heights[c]) * (NODE_HEIGHT + _ROW_GAP) / 2
        phase = None
        if tx is not None:
            phase = "commit" if cid in tx.commit_phase else "processing"
        nodes.append(
            {
                "id": cid,
                "kind": kinds[cid],
                "parallelism": storm.component(cid).parallelism,
                "phase": phase,
                "column": c,
                "row": r,
                "x": _PAD + c * (NODE_WIDTH + _COLUMN_GAP),
                "y": round(_PAD + offset + r * (NODE_HEIGHT + _ROW_GAP)),
            }
        )
    columns = max(column.values(), default=0) + 1
    return {
        "nodes": nodes,
        "edges": _edges(storm, column),
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
        "width": 2 * _PAD + columns * NODE_WIDTH + (columns - 1) * _COLUMN_GAP,
        "height": 2 * _PAD + tallest * NODE_HEIGHT + (tallest - 1) * _ROW_GAP,
    }
