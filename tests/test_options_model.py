"""Options are defined once: the dataclasses in ``echomq.options`` (each job option in its
field, with its wire name, doc, check and conversions).

The TypedDicts that type ``**options`` (static typing cannot be derived from a dataclass) are
checked against them here, and the protocol layer is checked to import nothing above it.
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from datetime import timedelta
from importlib import resources
from typing import Any

from echomq.options import (
    OMIT_CONTEXT,
    OPTION_NAMES,
    UNSET,
    Backoff,
    Deduplication,
    JobOptions,
    JobOptionsDict,
    JobTelemetry,
    KeepJobs,
    Parent,
    WorkerOptions,
    WorkerOptionsDict,
)

#: TypedDict keys that accept more than the dataclass field holds after validation.
WIDER_KEYWORDS = {
    "backoff",
    "parent",
    "deduplication",
    "telemetry",
}  # coerced to a Backoff / a Parent / ...


def _members(tp: Any) -> set[Any]:
    """The members of a union (``X | None`` and friends), without UNSET's type."""
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, type(int | str)) else ()
    return {a for a in (args or (tp,)) if a is not type(UNSET)}


def test_every_job_option_has_one_wire_name_and_a_doc() -> None:
    names = [f.name for f in dataclasses.fields(JobOptions)]
    assert list(OPTION_NAMES) == names
    assert len(set(OPTION_NAMES.values())) == len(names)
    doc = JobOptions.__doc__ or ""
    for name in names:  # the Args list is made from the fields' own docs
        assert f"\n        {name}: " in doc, name


def test_job_options_dict_matches_the_dataclass() -> None:
    hints = typing.get_type_hints(JobOptions)
    keyword_hints = typing.get_type_hints(JobOptionsDict)
    assert list(keyword_hints) == [f.name for f in dataclasses.fields(JobOptions)]
    assert not JobOptionsDict.__required_keys__
    for name, hint in keyword_hints.items():
        if name in WIDER_KEYWORDS:
            assert _members(hints[name]) < _members(hint), name
        else:
            assert _members(hint) == _members(hints[name]), name


def test_worker_options_dict_matches_the_dataclass() -> None:
    hints = typing.get_type_hints(WorkerOptions)
    keyword_hints = typing.get_type_hints(WorkerOptionsDict)
    # concurrency is a parameter of Worker of its own
    assert list(keyword_hints) == [f.name for f in dataclasses.fields(WorkerOptions)][1:]
    for name, hint in keyword_hints.items():
        assert _members(hint) == _members(hints[name]), name


def test_wire_round_trip_of_every_option() -> None:
    options = JobOptions(
        job_id="custom",
        delay=1.5,
        priority=7,
        lifo=True,
        attempts=3,
        backoff=Backoff(type="exponential", delay=0.25, jitter=0.5),
        remove_on_complete=KeepJobs(count=10, age=3600, limit=5),
        remove_on_fail=False,
        keep_logs=4,
        stacktrace_limit=2,
        size_limit=1000,
        timestamp=1_700_000_000.5,
        parent=Parent("p1", "bull:videos"),
        fail_parent_on_failure=True,
        timeout=2.5,
        group="tenant-42",
        telemetry=JobTelemetry(metadata='{"traceparent":"00-ab-cd-01"}', omit_context=True),
    )
    dedup = Deduplication("d1", ttl=2, extend=True, replace=True, keep_last_if_active=True)
    dedup_wire = {"id": "d1", "ttl": 2000, "extend": True, "replace": True}
    dedup_wire["keepLastIfActive"] = True
    wire = options.to_wire()
    assert wire == {
        "attempts": 3,
        "jobId": "custom",
        "delay": 1500,
        "priority": 7,
        "lifo": True,
        "backoff": {"type": "exponential", "delay": 250, "jitter": 0.5},
        "removeOnComplete": {"count": 10, "age": 3600, "limit": 5},
        "removeOnFail": False,
        "kl": 4,
        "stackTraceLimit": 2,
        "sizeLimit": 1000,
        "timestamp": 1_700_000_000_500,
        "parent": {"id": "p1", "queue": "bull:videos"},
        "fpof": True,
        "emqTimeout": 2500,
        "emqGroup": "tenant-42",
        "tm": '{"traceparent":"00-ab-cd-01"}',  # a string (JSON text), as BullMQ stores it
        "omc": True,
    }
    # One failure policy at a time: the other three are checked one by one; deduplication
    # cannot go with a parent, so it is checked on its own.
    assert set(wire) == set(OPTION_NAMES.values()) - {"cpof", "idof", "rdof", "de"} | {OMIT_CONTEXT}
    back = JobOptions.from_wire(wire)
    assert back.to_wire() == wire
    deduplicated = JobOptions(deduplication=dedup)
    assert deduplicated.to_wire() == {"attempts": 0, "de": dedup_wire}
    assert JobOptions.from_wire(deduplicated.to_wire()).deduplication == dedup
    assert JobOptions(deduplication={"id": "d2"}).to_wire()["de"] == {"id": "d2"}
    # Node's stored form keeps the keys as given (and `reschedule`, not an echomq option)
    node = {"de": {"replace": False, "id": "d3", "ttl": 500, "reschedule": True}}
    assert JobOptions.from_wire(node).deduplication == Deduplication("d3", ttl=0.5)
    for policy, flag in [
        ("continue_parent_on_failure", "cpof"),
        ("ignore_dependency_on_failure", "idof"),
        ("remove_dependency_on_failure", "rdof"),
    ]:
        one = JobOptions(**{policy: True})
        assert one.to_wire() == {"attempts": 0, flag: True}
        assert JobOptions.from_wire(one.to_wire()).failure_policy == flag
        assert one.failure_policy == flag
    assert JobOptions().to_wire() == {"attempts": 0}
    only_tm = JobOptions(telemetry=JobTelemetry(metadata="{}"))
    assert only_tm.to_wire() == {"attempts": 0, "tm": "{}"}
    assert JobOptions.from_wire(only_tm.to_wire()).telemetry == only_tm.telemetry


def test_from_wire_is_lenient() -> None:
    assert JobOptions.from_wire(None) == JobOptions()
    got = JobOptions.from_wire(
        {"jobId": 5, "delay": -1, "priority": 2**22, "lifo": "yes", "backoff": 200, "kl": 1.0}
    )
    assert got.job_id is UNSET and got.delay is UNSET and got.priority is UNSET
    assert got.lifo is UNSET and got.keep_logs == 1
    assert got.backoff == Backoff(type="fixed", delay=timedelta(milliseconds=200))


def test_protocol_imports_nothing_above_it() -> None:
    allowed = {"errors"}  # the leaf of the package: it imports nothing of echomq
    for path in (resources.files("echomq") / "protocol").iterdir():
        if not path.name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                assert node.module in allowed, (path.name, node.module)
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not (node.module or "").startswith("echomq"), path.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("echomq") for a in node.names), path.name
