"""One encoding for a task's fatal error, so the driver decides on its type, not on its text.

A Spark task that raises fails its attempt; when Spark gives up on the task, the only thing that
reaches the driver is the text of a Java exception wrapping the Python traceback. So a task that
fails raises ``TaskFailedError`` whose message carries, after a readable line, a marker with the
error's facts encoded as base64 JSON: component, task, txid, the user's class, the exception's
class names from most derived up (its MRO), and its message. ``decode_task_error`` finds the
last marker in whatever the driver caught and gives those facts back as a ``TaskError``, whose
``is_a`` answers "was it a ``StateBackendError``?" from the class names, the way ``isinstance``
would, without parsing any message.

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
from dataclasses import dataclass

from providers import FATAL_STATE_ERRORS
from statefulbolts.errors import TaskFailedError

__all__ = [
    "TaskError",
    "decode_task_error",
    "describe_job_failure",
    "encode_task_error",
    "exception_types",
    "qualified_name",
]

_MARK = "statefulbolts-task-error"
_FOUND = re.compile(re.escape(f"[{_MARK} ") + r"([A-Za-z0-9+/=]+)\]")


def qualified_name(cls: type) -> str:
    """``module.qualname`` of a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_types(exc: BaseException) -> tuple[str, ...]:
    """The qualified names of ``exc``'s classes, most derived first (``object`` left out)."""
    return tuple(qualified_name(c) for c in type(exc).__mro__ if c not in (object, BaseException))


@dataclass(frozen=True)
class TaskError:
    """The facts of an error that failed a task, as the driver receives them."""

    component: str
    task: int
    txid: int
    user_class: str | None
    types: tuple[str, ...]
    message: str

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
        return f"{who} raised {self.type_name}: {self.message}"


def encode_task_error(
    exc: BaseException, component: str, task: int, txid: int, user_class: str | None
) -> TaskFailedError:
    """The ``TaskFailedError`` a task raises (``from exc``) when ``exc`` failed it."""
    types = exception_types(exc)
    error = TaskError(component, task, txid, user_class, types, str(exc))
    payload = json.dumps(
        {
            "component": component,
            "task": task,
            "txid": txid,
            "user_class": user_class,
            "types": list(types),
            "message": error.message,
        }
    )
    token = base64.b64encode(payload.encode("utf-8")).decode("ascii")
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
        return TaskError(
            component=str(data["component"]),
            task=int(data["task"]),
            txid=int(data["txid"]),
            user_class=data.get("user_class"),
            types=tuple(str(t) for t in data["types"]),
            message=str(data["message"]),
        )
    except (binascii.Error, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None


def describe_job_failure(
    exc: BaseException,
) -> tuple[TaskError | None, str | None, int | None, str]:
    """What failed a job: ``(task error or None, component, task id, cause)``.

    A task's own error names its component and task; anything else (a worker that died, Spark
    giving up) is described by the most telling line of what Spark said.
    """
    error = decode_task_error(exc)
    if error is not None:
        return error, error.component, error.task, error.cause
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    picked = [ln for ln in lines if "Error" in ln or "Exception" in ln or "crash" in ln]
    return None, None, None, (picked or lines or [type(exc).__name__])[0][:500]
