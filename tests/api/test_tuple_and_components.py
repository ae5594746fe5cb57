"""Fields, Values, Tuple, the output declarer and BasicBoltExecutor."""

from __future__ import annotations

import pickle

import pytest

from statefulbolts import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    FailedException,
    Fields,
    OutputFieldsDeclarer,
    ReportedFailedException,
    Spout,
    StatefulBoltsError,
    Tuple,
    Values,
)
from statefulbolts.components import BasicBoltExecutor
from statefulbolts.errors import FieldNotFoundError
from statefulbolts.testing import RecordingCollector, make_context, make_tuple

# ----------------------------------------------------------------- Fields


def test_fields_from_names_a_list_or_fields():
    assert list(Fields("word", "count")) == ["word", "count"]
    assert Fields(["word", "count"]) == Fields("word", "count")
    assert Fields(("word",)) == Fields("word")
    assert Fields(Fields("a", "b")) == Fields("a", "b")
    assert list(Fields()) == []


def test_fields_api():
    f = Fields("word", "count")
    assert len(f) == 2
    assert f[1] == "count"
    assert "word" in f and "other" not in f
    assert f.index("count") == 1
    assert f.to_list() == ["word", "count"]
    assert f.select(Fields("count", "word"), ["storm", 3]) == [3, "storm"]
    assert repr(f) == "Fields('word', 'count')"
    assert hash(f) == hash(Fields(["word", "count"]))
    assert f != Fields("count", "word")
    assert f != ["word", "count"]
    assert pickle.loads(pickle.dumps(f)) == f


def test_fields_refuse_bad_names():
    with pytest.raises(TypeError, match="field names must be non-empty strings, got ''"):
        Fields("a", "")
    with pytest.raises(TypeError, match="got 3"):
        Fields(["a", 3])
    with pytest.raises(ValueError, match="duplicate field name in \\['a', 'a'\\]"):
        Fields("a", "a")


def test_field_not_found_error_names_the_field_and_the_known_fields():
    with pytest.raises(FieldNotFoundError) as info:
        Fields("word", "count").index("cnt")
    assert str(info.value) == "no field 'cnt'; fields are ['word', 'count']"
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, StatefulBoltsError)


# ----------------------------------------------------------------- Values and Tuple


def test_values_is_a_list_of_its_arguments():
    v = Values("storm", 1)
    assert v == ["storm", 1]
    assert isinstance(v, list)
    assert Values() == []
    assert Values(["a"]) == [["a"]]


def make():
    return Tuple(Values("storm", 2, 2.5, True), Fields("word", "n", "x", "b"), "split", 3, "words")


def test_tuple_accessors():
    t = make()
    assert t.get_value(0) == "storm"
    assert t.get_value_by_field("n") == 2
    assert t.get_string(0) == "storm"
    assert t.get_string_by_field("word") == "storm"
    assert t.get_integer(1) == 2
    assert t.get_integer_by_field("n") == 2
    assert t.contains("x") and not t.contains("y")
    assert t.select(Fields("x", "word")) == [2.5, "storm"]
    assert len(t) == 4
    assert t[1] == 2
    assert list(t) == ["storm", 2, 2.5, True]
    assert (t.source_component, t.source_task, t.source_stream_id) == ("split", 3, "words")
    assert t.anchors == ()
    assert repr(t) == "Tuple(source=split:3, stream=words, values=['storm', 2, 2.5, True])"


def test_tuple_default_stream():
    t = Tuple([1], Fields("a"), "s", 1)
    assert t.source_stream_id == "default"


def test_tuple_unknown_field_raises_field_not_found():
    with pytest.raises(
        FieldNotFoundError, match="no field 'nope'; fields are \\['word', 'n', 'x', 'b'\\]"
    ):
        make().get_value_by_field("nope")


def test_typed_getters_check_rather_than_convert():
    t = make()
    with pytest.raises(TypeError, match="value 1 of .* is int, not str"):
        t.get_string_by_field("n")
    with pytest.raises(TypeError, match="value 0 of .* is str, not int"):
        t.get_integer_by_field("word")
    with pytest.raises(TypeError, match="value 2 of .* is float, not int"):
        t.get_integer_by_field("x")
    with pytest.raises(TypeError, match="value 3 of .* is bool, not int"):
        t.get_integer_by_field("b")
    with pytest.raises(TypeError, match="is str, not int"):
        make_tuple(["7"], fields=["n"]).get_integer_by_field("n")


def test_make_tuple_defaults():
    t = make_tuple(["a", 1])
    assert t.fields == Fields("field0", "field1")
    assert (t.source_component, t.source_task, t.source_stream_id) == ("source", 1, "default")


# ----------------------------------------------------------------- declarer


def test_declarer_collects_streams():
    d = OutputFieldsDeclarer()
    d.declare(Fields("word"))
    d.declare_stream("counts", ["word", "count"])
    assert d.streams == {"default": Fields("word"), "counts": Fields("word", "count")}


def test_declarer_refuses_a_stream_twice_and_empty_ids():
    d = OutputFieldsDeclarer()
    d.declare(["a"])
    with pytest.raises(ValueError, match="stream 'default' declared twice"):
        d.declare(["b"])
    with pytest.raises(ValueError, match="stream id must be a non-empty string, got ''"):
        d.declare_stream("", ["a"])


def test_components_are_abstract_where_storm_requires_it():
    with pytest.raises(TypeError):
        Bolt()  # type: ignore[abstract]
    with pytest.raises(TypeError):
        Spout()  # type: ignore[abstract]
    with pytest.raises(TypeError):
        BasicBolt()  # type: ignore[abstract]


# ----------------------------------------------------------------- BasicBoltExecutor


class Split(BasicBolt):
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.prepared_with = None
        self.cleaned = False

    def prepare(self, conf, context):
        self.prepared_with = (conf, context)

    def execute(self, tuple, collector):  # noqa: A002
        for word in tuple.get_value(0).split():
            collector.emit([word])
        collector.emit([len(tuple.get_value(0))], stream="lengths")
        if self.error is not None:
            raise self.error

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))
        declarer.declare_stream("lengths", Fields("n"))

    def get_component_configuration(self):
        return {"k": 1}

    def cleanup(self):
        self.cleaned = True


def run(bolt: Split, sentence: str = "a b"):
    executor = BasicBoltExecutor(bolt)
    out = RecordingCollector()
    context = make_context("split")
    executor.prepare({"c": 1}, context, out)
    t = make_tuple([sentence], fields=["sentence"])
    executor.execute(t)
    return executor, out, t, context


def test_basic_bolt_emits_anchored_then_acks_on_success():
    executor, out, t, context = run(Split())
    assert [(kind, x.values) for kind, x in out.events] == [
        ("emit", ["a"]),
        ("emit", ["b"]),
        ("emit", [3]),
        ("ack", ["a b"]),
    ]
    assert out.acked == [t]
    assert [(e.stream, e.anchors) for e in out.emitted] == [
        ("default", [t]),
        ("default", [t]),
        ("lengths", [t]),
    ]
    assert out.failed == [] and out.errors == []
    assert executor.bolt.prepared_with == ({"c": 1}, context)


def test_basic_bolt_failed_exception_fails_without_report():
    _, out, t, _ = run(Split(FailedException("bad input")))
    assert out.acked == []
    assert out.failed == [t]
    assert out.errors == []
    assert [e.values for e in out.emitted] == [["a"], ["b"], [3]]  # emits before the raise stay


def test_basic_bolt_reported_failed_exception_reports_then_fails():
    error = ReportedFailedException("tell me")
    _, out, t, _ = run(Split(error))
    assert out.events[-2:] == [("error", error), ("fail", t)]
    assert out.acked == []


def test_basic_bolt_other_exceptions_propagate_without_ack_or_fail():
    with pytest.raises(ZeroDivisionError):
        run(Split(ZeroDivisionError("boom")))


def test_each_input_is_the_anchor_of_its_own_emits():
    executor = BasicBoltExecutor(Split())
    out = RecordingCollector()
    executor.prepare({}, make_context("split"), out)
    t1, t2 = make_tuple(["x"]), make_tuple(["y"])
    executor.execute(t1)
    executor.execute(t2)
    assert [(e.values, e.anchors) for e in out.on_stream("default")] == [
        (["x"], [t1]),
        (["y"], [t2]),
    ]
    assert out.acked == [t1, t2]


def test_basic_bolt_executor_delegates():
    bolt = Split()
    executor = BasicBoltExecutor(bolt)
    d = OutputFieldsDeclarer()
    executor.declare_output_fields(d)
    assert set(d.streams) == {"default", "lengths"}
    assert executor.get_component_configuration() == {"k": 1}
    executor.cleanup()
    assert bolt.cleaned is True
    assert repr(executor).startswith("BasicBoltExecutor(")


def test_basic_output_collector_anchors_to_the_current_input():
    out = RecordingCollector()
    basic = BasicOutputCollector(out)
    t = make_tuple(["a"])
    basic.set_context(t)
    basic.emit(["x"], stream="s")
    error = RuntimeError("e")
    basic.report_error(error)
    assert [(e.values, e.stream, e.anchors) for e in out.emitted] == [(["x"], "s", [t])]
    assert out.errors == [error]
