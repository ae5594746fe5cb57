"""A job's first-stage input, cut when its first task asks for it (late binding).

A job whose input is fixed when it is submitted makes its tuples wait for all of Spark's
scheduling: the job is made in the JVM, its stage's task binary is broadcast, its tasks are
launched, their Python workers are handed the function, and only then do they start on tuples
that were cut tens of milliseconds before (25-35 ms on two cores, more on a standalone
cluster). A tuple that arrives meanwhile waits for the next job. With late binding the job is
submitted first, its tasks ask the driver for their input when they start, and the driver cuts
the transaction then: every tuple gathered while Spark scheduled the job goes with it.

The pieces:

- ``LateInputs``: what the protocol's driver hands the engine with a ``JobSpec``. The engine
  calls ``wanted`` when a task first asks; the protocol then cuts (on its own thread: its
  spouts and ledger are its own) and ``give``s the data records per first-stage slot, or
  ``refuse``s with the error that fails the job. A job that fails before any task asked cut
  nothing: its tuples stay buffered for the next one.
- ``InputServer``: a TCP server of the driver's, bound to the Spark driver's host, that hands
  each task its slot's records, pickled once per slot, after running what the driver runs of
  the job first (the head, ``_inline.run_head``) or sealing them (``_sealing.seal_inputs``).
  A retried task asks again and gets the same bytes. Every request carries a random token
  made per server: nothing else is served.
- ``fetch``: the task's side of it, run first in the job's first-stage function.

A job's input is asked for once per task and is kept until its job ends (``InputServer.drop``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FETCH_TIMEOUT_S", "InputServer", "LateInputError", "LateInputs", "fetch"]

log = logging.getLogger(__name__)

_REQUEST = struct.Struct(">16sQI")  # token, job key, slot
_REPLY = struct.Struct(">BQ")  # status (0: records, 1: error text), length
# How long a task waits for the driver to cut and send its input. A driver that stops answers
# nothing at all (its socket closes): this only bounds a driver that hangs.
FETCH_TIMEOUT_S = 600.0
# How long the driver waits for a connection's request (a task sends it at once).
_REQUEST_TIMEOUT_S = 30.0


class LateInputError(RuntimeError):
    """The driver could not give a task its input (the job fails with the driver's own error)."""


class LateInputs:
    """A job's data records per first-stage slot, given when its first task asks.

    Example:
        >>> late = LateInputs()
        >>> late.wanted
        False
        >>> late.want(); late.wanted
        True
        >>> late.give([["a"], []]); late.result(0)
        [['a'], []]
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the protocol's thread, a stopping one, the server's
        self._given: concurrent.futures.Future[Sequence[Sequence[Any]]] = (
            concurrent.futures.Future()
        )
        # Done when a task asks: the protocol's thread waits on it beside its job's future.
        self.asked: concurrent.futures.Future[None] = concurrent.futures.Future()

    @property
    def wanted(self) -> bool:
        """Whether a task asked (the protocol should cut now)."""
        return self.asked.done()

    @property
    def given(self) -> bool:
        """Whether the input was given or refused."""
        return self._given.done()

    def want(self) -> None:
        """A task asked: tell the protocol."""
        with self._lock:
            if not self.asked.done():
                self.asked.set_result(None)

    def give(self, records: Sequence[Sequence[Any]]) -> None:
        """The data records of each first-stage slot (the protocol's cut); once."""
        with self._lock:
            if not self._given.done():
                self._given.set_result(records)

    def refuse(self, error: BaseException) -> None:
        """No input: ``error`` fails the job (unless the input was given already)."""
        with self._lock:
            if not self._given.done():
                self._given.set_exception(error)

    def result(self, timeout: float | None = None) -> Sequence[Sequence[Any]]:
        """Ask, and wait for the records (raises what ``refuse`` was given)."""
        self.want()
        return self._given.result(timeout)


class _Feed:
    """One job's input as served: made once, on the first request, by ``make``."""

    def __init__(self, make: Callable[[], list[bytes]]) -> None:
        self._make = make
        self._lock = threading.Lock()  # the first request makes it; the others wait
        self.slots: list[bytes] | None = None
        self.error: BaseException | None = None

    def slot(self, slot: int) -> bytes:
        with self._lock:
            if self.slots is None and self.error is None:
                try:
                    self.slots = self._make()
                except BaseException as exc:  # noqa: BLE001 - handed to the job (``error``)
                    self.error = exc
        if self.error is not None:
            raise self.error
        assert self.slots is not None  # noqa: S101
        return self.slots[slot]


class InputServer:
    """Serves late-cut jobs' first-stage input to their tasks (see the module docstring)."""

    def __init__(self, host: str, bind: str | None = None) -> None:
        """Listen on ``bind`` (default ``host``), on a port the system picks; tasks dial ``host``.

        The engine passes Spark's ``spark.driver.host`` and ``spark.driver.bindAddress``.
        """
        self._token = secrets.token_bytes(16)
        self._feeds: dict[int, _Feed] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server((bind or host, 0))
        self.address = (host, self._sock.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, name="sb-late-accept", daemon=True).start()

    @property
    def token(self) -> bytes:
        """What a request must carry."""
        return self._token

    def register(self, make: Callable[[], list[bytes]]) -> int:
        """A job's feed: ``make`` gives each slot's pickled records; returns the job's key."""
        with self._lock:
            self._next += 1
            key = self._next
            self._feeds[key] = _Feed(make)
        return key

    def error(self, key: int) -> BaseException | None:
        """The error that made job ``key``'s input, if it failed."""
        feed = self._feeds.get(key)
        return None if feed is None else feed.error

    def drop(self, key: int) -> None:
        """Job ``key`` ended: forget its input."""
        with self._lock:
            self._feeds.pop(key, None)

    def close(self) -> None:
        """Stop serving."""
        self._closed = True
        try:  # wakes the accepting thread (closing alone leaves it in ``accept``)
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            # A daemon thread per connection (a job's few tasks): one that waits for a cut
            # never holds the process at its exit.
            threading.Thread(target=self._serve, args=(conn,), name="sb-late", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(_REQUEST_TIMEOUT_S)
                token, key, slot = _REQUEST.unpack(_recv(conn, _REQUEST.size))
                if not secrets.compare_digest(token, self._token):
                    return
                feed = self._feeds.get(key)
                if feed is None:
                    _reply(conn, 1, f"no input for job {key} (it ended)".encode())
                    return
                try:
                    payload = feed.slot(slot)
                except BaseException as exc:  # noqa: BLE001 - the task raises it, by text
                    _reply(conn, 1, f"{type(exc).__name__}: {exc}".encode())
                    return
                _reply(conn, 0, payload)
            except (OSError, LateInputError) as exc:
                log.debug("late input: a task's connection failed: %s", exc)


def _reply(conn: socket.socket, status: int, payload: bytes) -> None:
    # One write: a header sent alone would hold the payload back for the task's delayed ACK.
    conn.sendall(_REPLY.pack(status, len(payload)) + payload)


def _recv(conn: socket.socket, n: int) -> bytes:
    view = bytearray(n)
    got = 0
    while got < n:
        k = conn.recv_into(memoryview(view)[got:])
        if not k:
            msg = f"the driver closed the connection after {got} of {n} bytes"
            raise LateInputError(msg)
        got += k
    return bytes(view)


def fetch(address: tuple[str, int], token: bytes, key: int, slot: int) -> bytes:
    """In a task: slot ``slot``'s pickled records of job ``key``, from the driver."""
    try:
        with socket.create_connection(address, timeout=FETCH_TIMEOUT_S) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(_REQUEST.pack(token, key, slot))
            status, length = _REPLY.unpack(_recv(conn, _REPLY.size))
            payload = _recv(conn, length)
    except OSError as exc:
        msg = f"cannot read this task's input from the driver at {address[0]}:{address[1]}: {exc}"
        raise LateInputError(msg) from exc
    if status:
        raise LateInputError(payload.decode(errors="replace"))
    return payload
