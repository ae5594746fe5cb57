"""The state tool: read, dump, export and import a topology's committed state, offline.

No running topology is needed: everything reads (or writes) the state provider the topology's
config names, and reading never changes it.

- Read a component (a stateful bolt, or a transactional committer's map), merged over its
  tasks: ``read_state`` (a dict), ``iter_state`` (streamed ``(key, value)``), ``get_value``
  (one key), ``state_dataframe`` (a Spark DataFrame, one partition per task). Committed
  values, or with ``prepared=True`` as of the prepared delta.
- Move a topology: ``export_state`` writes every namespace of a topology (or a transactional
  id) to a portable, checksummed file (``statefulbolts.state._format``); ``import_state``
  checks the whole file, then writes it into any provider, refusing a target that already
  holds the topology's state unless ``overwrite=True``; ``read_info`` checks a file.
- The stored shape (``ComponentShape``, ``StoredShape``, ``read_shape``): how a topology's state
  is laid out (parallelism, key groups, serializers, state version), recorded beside it; and
  the two steps that move a component's committed state to another layout, resumably
  (``stage``, ``swap``, ``empty``), which ``recovery.evolve`` runs at start and
  ``statefulbolts.offline`` on a stopped topology.

The command line is ``statefulbolts state dump | get | export | import | verify``. The
in-memory provider's state lives in the process that ran the topology, so it can be read and
moved from Python in that process only.

Example:
    >>> from providers.memory import InMemoryKeyValueStateProvider as Memory
    >>> state = Memory().new_state("doc-tool/count-0", {})
    >>> state.put("storm", 3)
    >>> state.prepare_commit(1)
    >>> state.commit(1)
    >>> state.put("storm", 4)
    >>> state.prepare_commit(2)
    >>> read_state({}, "count", topology="doc-tool")
    {'storm': 3}
    >>> read_state({}, "count", topology="doc-tool", prepared=True)
    {'storm': 4}
    >>> Memory.drop("doc-tool/")
"""

from statefulbolts.state._dataframe import state_dataframe
from statefulbolts.state._format import FORMAT, VERSION, NamespaceInfo, StateFileInfo
from statefulbolts.state._layout import LayoutRule, legacy_hash
from statefulbolts.state._move import ImportResult, export_state, import_state, read_info
from statefulbolts.state._read import (
    Row,
    committed_items,
    get_value,
    iter_rows,
    iter_state,
    merged_state,
    read_state,
)
from statefulbolts.state._redistribute import LayoutError, Stage, empty, open_image, stage, swap
from statefulbolts.state._scope import Scope, driver_owned
from statefulbolts.state._shape import (
    ComponentShape,
    Partitioning,
    StoredShape,
    read_shape,
    serializers_of,
    shape_namespace,
    write_shape,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "ComponentShape",
    "ImportResult",
    "LayoutError",
    "LayoutRule",
    "NamespaceInfo",
    "Partitioning",
    "Row",
    "Scope",
    "Stage",
    "StateFileInfo",
    "StoredShape",
    "committed_items",
    "driver_owned",
    "empty",
    "export_state",
    "get_value",
    "import_state",
    "iter_rows",
    "iter_state",
    "legacy_hash",
    "merged_state",
    "open_image",
    "read_info",
    "read_shape",
    "read_state",
    "serializers_of",
    "shape_namespace",
    "stage",
    "state_dataframe",
    "swap",
    "write_shape",
]
