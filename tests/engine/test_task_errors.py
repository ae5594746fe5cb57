"""Task errors travel as one encoded payload, and the driver decides on the type it carries."""

from __future__ import annotations

import base64
import pickle

import pytest

from providers import StateBackendError, StateTransactionError
from statefulbolts.errors import (
    FailedException,
    TaskFailedError,
    TopologyFailedError,
    mark_raised_in,
    raised_in,
)
from statefulbolts.runtime._records import (
    AckLedger,
    Fails,
    JobResult,
    ReportedError,
    TaskMetrics,
    TaskReport,
    TupleBatch,
)
from statefulbolts.runtime._task_errors import (
    decode_task_error,
    describe_job_failure,
    encode_task_error,
    exception_types,
)


class AppError(StateBackendError):
    """A user's subclass of a framework error: still a backend outage to the driver."""


def spark_wrapped(error: BaseException) -> RuntimeError:
    """What the driver catches: Spark's text, the task's traceback, the message inside."""
    return RuntimeError(
        "py4j.protocol.Py4JJavaError: An error occurred while calling collect.\n"
        'Traceback (most recent call last):\n  File "worker.py", line 1\n'
        f"statefulbolts.errors.TaskFailedError: {error}\n\tat org.apache.spark.api.python..."
    )


def test_encoding_carries_place_user_class_and_every_type_name():
    failure = encode_task_error(AppError("redis down"), "count", 7, 3, "app.Count")
    assert isinstance(failure, TaskFailedError) and isinstance(failure, TopologyFailedError)
    assert (failure.component, failure.task, failure.txid) == ("count", 7, 3)
    assert failure.cause == "app.Count raised AppError: redis down"
    error = decode_task_error(spark_wrapped(failure))
    assert error is not None
    where = (error.component, error.task, error.txid, error.user_class)
    assert where == ("count", 7, 3, "app.Count")
    assert error.types[0] == f"{__name__}.AppError"
    assert error.is_a(AppError) and error.is_a(StateBackendError) and error.is_a(ConnectionError)
    assert not error.is_a(StateTransactionError)
    assert (error.type_name, error.message) == ("AppError", "redis down")


def test_messages_with_any_text_survive_the_trip():
    text = "multi\nline ] [statefulbolts-task-error fake] ünïcode \x00"
    failure = encode_task_error(ValueError(text), "split", 1, 0, None)
    error = decode_task_error(spark_wrapped(failure))
    assert error is not None and error.message == text
    assert error.cause == f"component 'split' raised ValueError: {text}"


def test_the_last_marker_wins_it_is_the_attempt_spark_gave_up_on():
    first = encode_task_error(ValueError("attempt 1"), "count", 2, 5, None)
    last = encode_task_error(FailedException("attempt 4"), "count", 2, 5, None)
    error = decode_task_error(RuntimeError(f"{first}\n...\n{last}"))
    assert error is not None and error.message == "attempt 4" and error.is_a(FailedException)


@pytest.mark.parametrize(
    "text",
    [
        "no marker at all",
        "[statefulbolts-task-error !!!notbase64]",
        "[statefulbolts-task-error " + base64.b64encode(b"not json").decode() + "]",
        "[statefulbolts-task-error " + base64.b64encode(b'{"component": "x"}').decode() + "]",
    ],
)
def test_anything_else_decodes_to_nothing(text):
    assert decode_task_error(RuntimeError(text)) is None


def test_a_failure_without_a_payload_is_described_by_its_telling_line():
    worker_died = RuntimeError(
        "Job aborted due to stage failure:\nTask 0 in stage 3.0 failed 4 times\n"
        "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)\n"
    )
    error, component, task, cause = describe_job_failure(worker_died)
    assert (error, component, task) == (None, None, None)
    assert cause == "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)"
    coded = encode_task_error(KeyError("k"), "sink", 4, 9, "app.Sink")
    error, component, task, cause = describe_job_failure(spark_wrapped(coded))
    assert error is not None and (component, task) == ("sink", 4)
    assert cause == "app.Sink raised KeyError: 'k'"


def test_exception_types_go_from_most_derived_up_without_object():
    names = exception_types(AppError("x"))
    assert names[0] == f"{__name__}.AppError"
    assert "providers.errors.StateBackendError" in names
    assert names[-1] == "builtins.Exception"


def test_records_are_named_and_pickle_as_plain_tuples_do():
    batch = TupleBatch(1, 0, 2, 3, 0, ["a", "b"], [5, 6], None)
    assert (batch.dest, batch.dest_task, batch.src, batch.src_task, batch.stream) == (1, 0, 2, 3, 0)
    assert pickle.loads(pickle.dumps(batch)) == batch
    error = ReportedError(1, 0, exception_types(AppError("x")), "AppError: x")
    assert error.is_a(StateBackendError) and not error.is_a(KeyError)
    report = TaskReport(1, 0, TaskMetrics(3, 2, 3, 0, 0.1), (error,))
    result = JobResult(reports=[report, TaskReport(2, 0, TaskMetrics(0, 0, 0, 0, 0.0))])
    assert result.errors == [error]
    assert AckLedger({7: 3}).acks == {7: 3} and Fails([7]).roots == [7]


def test_a_store_error_is_not_blamed_on_the_user_s_class() -> None:
    from providers import StateLostError

    failure = encode_task_error(StateLostError("gone"), "count", 3, 7, "app.Count")
    error = decode_task_error(RuntimeError(f"Java says: {failure}"))
    assert error is not None and error.cause == "StateLostError: gone"
    failure = encode_task_error(ValueError("bad"), "count", 3, 7, "app.Count")
    error = decode_task_error(RuntimeError(f"Java says: {failure}"))
    assert error is not None and error.cause == "app.Count raised ValueError: bad"


def test_the_callback_an_error_was_raised_in_travels_with_it_and_is_named_once() -> None:
    exc = ValueError("no session")
    mark_raised_in(exc, "on_timer of key 'bob' at 6000 ms (processing time)")
    mark_raised_in(exc, "an outer callback")  # the innermost one named it first
    assert raised_in(exc) == "on_timer of key 'bob' at 6000 ms (processing time)"
    assert exc.__notes__ == ["raised in on_timer of key 'bob' at 6000 ms (processing time)"]
    failure = encode_task_error(exc, "sessions", 3, 7, "app.Sessions")
    error = decode_task_error(RuntimeError(f"py4j: {failure}"))
    assert error is not None and error.raised_in == raised_in(exc)
    assert error.cause == (
        "app.Sessions raised ValueError in on_timer of key 'bob' at 6000 ms (processing time): "
        "no session"
    )
    plain = decode_task_error(encode_task_error(ValueError("x"), "c", 1, 0, "app.C"))
    assert plain is not None and plain.raised_in is None
    assert plain.cause == "app.C raised ValueError: x"
