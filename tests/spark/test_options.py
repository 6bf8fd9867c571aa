"""Bad options fail with a clear error: at load() when the options alone are
wrong, at query start when the broker or the layout log says so."""

from __future__ import annotations

from typing import Any, Callable, Dict

import pytest

from kafka_ordered.admin import LayoutAdmin
from ..conftest import spare


@pytest.fixture
def managed(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> str:
    topic = unique("opts")
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as admin:
        admin.create_topic(topic, 2, physical_partitions=spare(4))
    return topic


def _base(bootstrap: str, layout_topic: str) -> Dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}


@pytest.mark.parametrize(
    "extra, message",
    [
        ({}, "exactly one of the options subscribe, subscribePattern, assign"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": 1'}, "option startingOffsets is neither"),
        ({"subscribe": "t", "startingOffsets": "newest"}, "option startingOffsets is neither"),
        ({"subscribe": "t", "ordered.gatting": "false"}, "unknown option 'ordered.gatting'"),
        ({"subscribe": "t", "includeHeaders": "yes"}, "includeHeaders must be true or false"),
    ],
)
def test_bad_options_fail_at_load(spark: Any, bootstrap: str, layout_topic: str, extra: Dict[str, str],
                                  message: str) -> None:
    with pytest.raises(Exception, match=message):
        spark.readStream.format("kafka_ordered").options(**_base(bootstrap, layout_topic), **extra).load()


def _start_fails(spark: Any, options: Dict[str, str], tmp_path: Any, message: str) -> None:
    df = spark.readStream.format("kafka_ordered").options(**options).load()
    q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception, match=message):
        q.awaitTermination(60)
    assert not q.isActive


def test_unknown_topic_fails_at_query_start(spark: Any, bootstrap: str, layout_topic: str, managed: str,
                                            unique: Callable[[str], str], tmp_path: Any) -> None:
    # ``managed`` makes the layout log exist: a missing one fails first (test_no_silent_fallback).
    missing = unique("missing")
    _start_fails(spark, {**_base(bootstrap, layout_topic), "subscribe": missing}, tmp_path,
                 f"topic\\(s\\) {missing} do not exist")


def test_assign_on_managed_topic_is_refused(spark: Any, bootstrap: str, layout_topic: str, managed: str,
                                            tmp_path: Any) -> None:
    options = {**_base(bootstrap, layout_topic), "assign": f'{{"{managed}":[0,1]}}'}
    _start_fails(spark, options, tmp_path, "would bypass the layout")
    with pytest.raises(Exception, match="would bypass the layout"):
        spark.read.format("kafka_ordered").options(**options).load().collect()


def test_batch_only_and_stream_only_options(spark: Any, bootstrap: str, layout_topic: str, managed: str) -> None:
    base = {**_base(bootstrap, layout_topic), "subscribe": managed}
    with pytest.raises(Exception, match="not allowed for a batch query"):
        spark.read.format("kafka_ordered").options(**base, startingOffsets="latest").load().collect()
    with pytest.raises(Exception, match="only applies to streaming"):
        spark.read.format("kafka_ordered").options(**base, maxOffsetsPerTrigger="10").load().collect()
