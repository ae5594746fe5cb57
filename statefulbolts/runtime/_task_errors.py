"""One encoding for a task's fatal error, so the driver decides on its type, not on its text.

A Spark task that raises fails its attempt; when Spark gives up on the task, the only thing that
reaches the driver is the text of a Java exception wrapping the Python traceback. So a task that
fails raises ``TaskFailedError`` whose message carries, after a readable line, a marker with the
error's facts encoded as base64 JSON: component, task, txid, the user's class, the exception's
class names from most derived up (its MRO), and its message. ``decode_task_error`` finds the
last marker in whatever the driver caught and gives those facts back as a ``TaskError``, whose
``is_a`` answers "was it a ``StateBackendError``?" from the class names, the way ``isinstance``
would, without parsing any message.

When the task was executing a data tuple as it raised, the payload also names that tuple
(``FailingTuple``): the task's index, where the tuple came from, its values (the framework's
msgpack codec, ``providers.pack_plain``, when every value reads back exactly as it was and they
pack within ``VALUES_CAP`` bytes; always a ``repr`` cut at ``TEXT_CAP`` characters, for people)
and its root: the spout tree (checkpoint protocol) or the batch lineage (transactional) it
belongs to. That is how a driver finds a poison tuple (``statefulbolts.deadletter``).

Example:
    >>> from providers import StateBackendError
    >>> failure = encode_task_error(StateBackendError("down"), "count", 3, 7, "app.Count")
    >>> error = decode_task_error(RuntimeError(f"Java says: {failure}"))
    >>> error.is_a(StateBackendError), error.component, error.task, error.type_name
    (True, 'count', 3, 'StateBackendError')
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from providers import FATAL_STATE_ERRORS, pack_plain, unpack_plain
from statefulbolts.errors import TaskFailedError, raised_in

__all__ = [
    "TEXT_CAP",
    "VALUES_CAP",
    "FailingTuple",
    "TaskError",
    "decode_task_error",
    "describe_job_failure",
    "encode_task_error",
    "exception_types",
    "qualified_name",
    "shown_values",
]

_MARK = "statefulbolts-task-error"
_FOUND = re.compile(re.escape(f"[{_MARK} ") + r"([A-Za-z0-9+/=]+)\]")
# A failing tuple's values travel in the error's text: at most this many msgpack bytes ...
VALUES_CAP = 4096
# ... and a repr of at most this many characters.
TEXT_CAP = 1000


def qualified_name(cls: type) -> str:
    """``module.qualname`` of a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_types(exc: BaseException) -> tuple[str, ...]:
    """The qualified names of ``exc``'s classes, most derived first (``object`` left out)."""
    return tuple(qualified_name(c) for c in type(exc).__mro__ if c not in (object, BaseException))


def shown_values(values: Sequence[Any], cap: int = VALUES_CAP) -> tuple[bytes | None, str]:
    """``(msgpack of values or None, repr cut at TEXT_CAP)``: how a tuple's values are kept.

    ``None`` when they do not read back exactly as they are (a value msgpack has no type for,
    a subclass such as an ``IntEnum``, which would read back as its base type: a replay must
    emit what the spout emitted) or pack to more than ``cap`` bytes; the text is always there.

    Example:
        >>> shown_values(["storm", (2, {"a"})])[1]
        "['storm', (2, {'a'})]"
        >>> shown_values([object()])[0] is None
        True
    """
    listed = list(values)
    try:
        text = repr(listed)
    except Exception as exc:  # noqa: BLE001 - a user's __repr__ must not hide the failure
        text = f"<values whose repr raised {type(exc).__name__}>"
    if len(text) > TEXT_CAP:
        text = text[:TEXT_CAP] + "..."
    try:
        packed: bytes | None = pack_plain(listed, exact=True)
    except (TypeError, ValueError, OverflowError, RecursionError):
        packed = None
    if packed is not None and len(packed) > cap:
        packed = None
    return packed, text


@dataclass(frozen=True)
class FailingTuple:
    """The data tuple a task was executing when it raised.

    ``values`` are the tuple's values as msgpack gave them back (``None`` when they could not
    be kept, see ``shown_values``); ``text`` is their ``repr``, cut. ``root`` is the tuple's
    first root id (``Tuple._root``: 0 when it belongs to no tree) and ``trees`` how many it
    belongs to: a tuple anchored to several spout tuples has no single one to blame.
    ``source_task`` is the tuple's ``source_task`` (Storm's global task id);
    ``source_task_index`` the sending task's index, which messages show (``None``: a source
    outside the plan, such as the system's tick tuples).
    """

    task_index: int
    source_component: str
    source_task: int
    stream: str
    values: list[Any] | None
    text: str
    root: int
    trees: int
    source_task_index: int | None = None

    @classmethod
    def of(
        cls, tuple_: Any, task_index: int, lead: int = 0, source_index: int | None = None
    ) -> FailingTuple:
        """The facts of ``tuple_`` (a ``Tuple``), leaving out its ``lead`` shared values.

        ``source_index``: the index of the task that sent it, when the caller knows it.
        """
        packed, text = shown_values(list(tuple_.values)[lead:])
        values = None if packed is None else unpack_plain(packed)
        root = int(tuple_._root)
        trees = (1 + len(tuple_._more or ())) if root else 0
        return cls(
            task_index,
            str(tuple_.source_component),
            int(tuple_.source_task),
            str(tuple_.source_stream_id),
            values,
            text,
            root,
            trees,
            source_index,
        )

    def to_payload(self) -> dict[str, Any]:
        """The JSON-able form the error's marker carries (values as base64 msgpack)."""
        packed = None if self.values is None else pack_plain(self.values, exact=True)
        return {
            "task_index": self.task_index,
            "source": self.source_component,
            "source_task": self.source_task,
            "stream": self.stream,
            "values": None if packed is None else base64.b64encode(packed).decode("ascii"),
            "text": self.text,
            "root": self.root,
            "trees": self.trees,
            "source_index": self.source_task_index,
        }

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> FailingTuple:
        """Read ``to_payload``'s form back (``ValueError``, ``KeyError`` when it is not)."""
        raw = data["values"]
        values = None
        if raw is not None:
            unpacked = unpack_plain(base64.b64decode(raw, validate=True))
            values = list(unpacked) if isinstance(unpacked, list) else [unpacked]
        return cls(
            int(data["task_index"]),
            str(data["source"]),
            int(data["source_task"]),
            str(data["stream"]),
            values,
            str(data["text"]),
            int(data["root"]),
            int(data["trees"]),
            None if data.get("source_index") is None else int(data["source_index"]),
        )


@dataclass(frozen=True)
class TaskError:
    """The facts of an error that failed a task, as the driver receives them.

    ``task`` is the task's index in its component (what every message shows).
    """

    component: str
    task: int
    txid: int
    user_class: str | None
    types: tuple[str, ...]
    message: str
    # The data tuple being executed when the task raised; None outside ``execute``.
    failing: FailingTuple | None = None
    # The framework callback it came out of (``on_timer of key ...``), if one said so.
    raised_in: str | None = None

    @property
    def type_name(self) -> str:
        """The exception's class name, without its module."""
        return self.types[0].rpartition(".")[2] if self.types else "Exception"

    def is_a(self, *classes: type[BaseException]) -> bool:
        """Whether the task's exception was an instance of any of ``classes`` (by class name)."""
        return any(qualified_name(cls) in self.types for cls in classes)

    @property
    def cause(self) -> str:
        """``<user class> raised <Type>: <message>``: what a person reads.

        A store that refused or lost committed state (``providers.FATAL_STATE_ERRORS``) is the
        store's doing, not the user's class: ``<Type>: <message>``.
        """
        if self.is_a(*FATAL_STATE_ERRORS):
            return f"{self.type_name}: {self.message}"
        who = self.user_class or f"component {self.component!r}"
        where = f" in {self.raised_in}" if self.raised_in else ""
        return f"{who} raised {self.type_name}{where}: {self.message}"


def encode_task_error(
    exc: BaseException,
    component: str,
    task: int,
    txid: int,
    user_class: str | None,
    failing: FailingTuple | None = None,
) -> TaskFailedError:
    """The ``TaskFailedError`` a task raises (``from exc``) when ``exc`` failed it.

    ``task`` is the task's index in ``component``. ``failing``: the data tuple the task was
    executing, if it was executing one.
    """
    types = exception_types(exc)
    where = raised_in(exc)
    error = TaskError(component, task, txid, user_class, types, str(exc), raised_in=where)
    data: dict[str, Any] = {
        "component": component,
        "task": task,
        "txid": txid,
        "user_class": user_class,
        "types": list(types),
        "message": error.message,
    }
    if failing is not None:
        data["tuple"] = failing.to_payload()
    if where is not None:
        data["raised_in"] = where
    token = base64.b64encode(json.dumps(data).encode("utf-8")).decode("ascii")
    msg = f"component {component!r} task {task} txid {txid}: {error.cause} [{_MARK} {token}]"
    return TaskFailedError(msg, component=component, task=task, txid=txid, cause=error.cause)


def decode_task_error(exc: BaseException) -> TaskError | None:
    """The ``TaskError`` encoded in ``exc`` or in anything it wraps; ``None`` if there is none.

    Spark may wrap a task's exception several times and keep earlier attempts' text, so the
    last marker wins: it is the attempt that made Spark give up.
    """
    found = _FOUND.findall(str(exc))
    if not found:
        return None
    try:
        data = json.loads(base64.b64decode(found[-1], validate=True).decode("utf-8"))
        failing = data.get("tuple")
        return TaskError(
            component=str(data["component"]),
            task=int(data["task"]),
            txid=int(data["txid"]),
            user_class=data.get("user_class"),
            types=tuple(str(t) for t in data["types"]),
            message=str(data["message"]),
            failing=None if failing is None else FailingTuple.from_payload(failing),
            raised_in=None if data.get("raised_in") is None else str(data["raised_in"]),
        )
    except (binascii.Error, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None


def describe_job_failure(
    exc: BaseException,
) -> tuple[TaskError | None, str | None, int | None, str]:
    """What failed a job: ``(task error or None, component, task index, cause)``.

    A task's own error names its component and task; anything else (a worker that died, Spark
    giving up) is described by the most telling line of what Spark said.
    """
    error = decode_task_error(exc)
    if error is not None:
        return error, error.component, error.task, error.cause
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    picked = [ln for ln in lines if "Error" in ln or "Exception" in ln or "crash" in ln]
    return None, None, None, (picked or lines or [type(exc).__name__])[0][:500]
