"""The one rule that puts a broker group's answers in the cluster's terms
(:mod:`services.cluster.labels`): the request headers that ask for it, and what it changes —
queue ids of the topic (not of a retry topic), the group's name, receipt handles."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cluster import ClusterLabels, prefix_handle, split_handle, spread_queues
from services.cluster.labels import BROKER_GROUP_HEADER, QUEUE_IDS_HEADER

ROUTE = spread_queues("T", 6, ["g1", "g2"])  # g1 hosts 0-2 as its 0-2, g2 hosts 3-5 as its 0-2


def test_labels_of_a_route_name_the_group_and_its_renumbered_queues() -> None:
    assert ClusterLabels.of(ROUTE, "g1") == ClusterLabels("g1", "T", {})
    assert ClusterLabels.of(ROUTE, "g2") == ClusterLabels("g2", "T", {0: 3, 1: 4, 2: 5})
    assert ClusterLabels.of(ROUTE, "g3") == ClusterLabels("g3", "T", {})


def test_the_headers_ask_for_the_labels_they_were_made_from() -> None:
    g2 = ClusterLabels.of(ROUTE, "g2")
    assert g2.headers() == [(BROKER_GROUP_HEADER, b"g2"), (QUEUE_IDS_HEADER, b"0=3,1=4,2=5")]
    assert ClusterLabels.from_headers(g2.headers(), "T") == g2
    g1 = ClusterLabels.of(ROUTE, "g1")
    assert g1.headers() == [(BROKER_GROUP_HEADER, b"g1")]  # nothing to renumber: no ids
    assert ClusterLabels.from_headers(g1.headers(), "T") == g1


@given(
    group=st.text(st.characters(min_codepoint=33, max_codepoint=255), min_size=1, max_size=12),
    queue_ids=st.dictionaries(st.integers(0, 2**31), st.integers(0, 2**31), max_size=8),
    topic=st.text(max_size=8),
)
def test_headers_round_trip(group: str, queue_ids: dict[int, int], topic: str) -> None:
    labels = ClusterLabels(group, topic, queue_ids)
    assert ClusterLabels.from_headers(labels.headers(), topic) == labels


def test_a_request_without_a_group_asks_for_no_labels() -> None:
    assert ClusterLabels.from_headers([], "T") is None
    assert ClusterLabels.from_headers([(b"content-type", b"application/json")], "T") is None
    assert ClusterLabels.from_headers([(QUEUE_IDS_HEADER, b"0=3")], "T") is None


def test_the_headers_are_read_among_others_and_blank_pairs_are_skipped() -> None:
    headers = [
        (b"host", b"b"),
        (QUEUE_IDS_HEADER, b" 0=3, ,1 = 4,"),
        (b"x-request-id", b"r"),
        (BROKER_GROUP_HEADER, b"g\xe9"),  # latin-1, as HTTP headers are
    ]
    assert ClusterLabels.from_headers(headers, "T") == ClusterLabels("g\u00e9", "T", {0: 3, 1: 4})


@pytest.mark.parametrize("pairs", [b"0=x", b"1", b"=4", b"0=", b"0=4,oops", b"0=4=5", b"1.5=2"])
def test_queue_ids_that_are_not_pairs_of_whole_numbers_are_a_value_error(pairs: bytes) -> None:
    with pytest.raises(ValueError):
        ClusterLabels.from_headers([(BROKER_GROUP_HEADER, b"g2"), (QUEUE_IDS_HEADER, pairs)], "T")


def test_queue_ids_of_the_topic_become_cluster_wide() -> None:
    labels = ClusterLabels.of(ROUTE, "g2")
    items: list[dict[str, Any]] = [
        {"topic": "T", "queue_id": 1, "body": '"queue_id":1'},
        {"queue_id": 2},  # no topic of its own: the topic's
        {"topic": "T", "queue_id": 7},  # not one of the renumbered: as it is
        {"topic": "T", "queue_id": "1"},  # not a number: as it is
        {"topic": "T"},
    ]
    labels.apply(items, tag=False)
    assert items == [
        {"topic": "T", "queue_id": 4, "body": '"queue_id":1'},
        {"queue_id": 5},
        {"topic": "T", "queue_id": 7},
        {"topic": "T", "queue_id": "1"},
        {"topic": "T"},
    ]
    assert [labels.queue_id(q) for q in (0, 1, 2, 3, 9)] == [3, 4, 5, 3, 9]


def test_a_retry_topics_items_keep_their_own_queue_ids() -> None:
    """A message of the group's retry topic (``queue_topic``) and a queue position of it
    (its ``topic``) are the group's own, not the topic's: their ids do not change."""
    labels = ClusterLabels.of(ROUTE, "g2")
    items: list[dict[str, Any]] = [
        {"topic": "T", "queue_topic": "%RETRY%G", "queue_id": 0},
        {"topic": "%RETRY%G", "queue_id": 0, "next_offset": 3},
        {"topic": "Other", "queue_id": 1},
        {"topic": "T", "queue_id": 0},
    ]
    labels.apply(items, tag=True)
    assert [(i["queue_id"], i["broker_group"]) for i in items] == [
        (0, "g2"),
        (0, "g2"),
        (1, "g2"),
        (3, "g2"),
    ]


def test_a_tag_names_the_group_on_every_item_and_without_it_none() -> None:
    untagged: list[dict[str, Any]] = [{"topic": "T", "queue_id": 0}]
    ClusterLabels.of(ROUTE, "g1").apply(untagged, tag=False)
    assert untagged == [{"topic": "T", "queue_id": 0}]
    tagged: list[dict[str, Any]] = [{"topic": "T", "queue_id": 0}, {"broker_group": "old"}]
    ClusterLabels.of(ROUTE, "g1").apply(tagged, tag=True)
    assert tagged == [{"topic": "T", "queue_id": 0, "broker_group": "g1"}, {"broker_group": "g1"}]


def test_a_receipt_handle_names_its_group() -> None:
    labels = ClusterLabels.of(ROUTE, "g2")
    assert labels.handle("abc.def") == prefix_handle("g2", "abc.def") == "g2~abc.def"
    assert split_handle(labels.handle("abc.def")) == ("g2", "abc.def")
    assert split_handle(labels.handle("a~b")) == ("g2", "a~b")  # the broker's handle is kept
    for not_one in ("no-group", "~x", "g2~", ""):
        assert split_handle(not_one) is None
