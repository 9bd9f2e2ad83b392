"""The proxy's routing decisions over a hand-made cluster view."""

from __future__ import annotations

import pytest

from services.cluster import BrokerMember, ClusterView, GroupRoute, spread_queues
from services.cluster.proxy_routing import (
    NoMasterError,
    QueueNotRoutedError,
    RouteNotFoundError,
    SendFieldError,
    SendPicker,
    SplitBatchError,
    batch_queue_id,
    batch_sharding_key,
    localize_send,
    queue_route,
    readers,
    split_commits,
    timer_group,
    topic_route,
)
from services.errors import InvalidTimerHandleError
from services.send import shard_queue
from services.timer.handles import TimerHandle

A = BrokerMember("a", "g1", "http://127.0.0.1:1", "127.0.0.1:2", "master")
A2 = BrokerMember("a2", "g1", "http://127.0.0.1:3", "127.0.0.1:4", "slave")
B = BrokerMember("b", "g2", "http://127.0.0.1:5", "127.0.0.1:6", "master")
ROUTE = spread_queues("T", 6, ["g1", "g2"])


def view(*, g2_master: bool = True) -> ClusterView:
    return ClusterView(
        "c1",
        1,
        {
            "g1": GroupRoute("g1", 1, A, (A2,)),
            "g2": GroupRoute("g2", 1, B if g2_master else None),
        },
        {"T": ROUTE},
    )


def test_queue_ids_map_to_groups_and_back() -> None:
    assert topic_route(view(), "T") is ROUTE
    with pytest.raises(RouteNotFoundError):
        topic_route(view(), "U")
    q = queue_route(ROUTE, 4)
    assert (q.group, q.local_queue_id) == ("g2", 1)
    with pytest.raises(QueueNotRoutedError):
        queue_route(ROUTE, 6)
    assert ROUTE.global_id("g2", 1) == 4
    assert ROUTE.global_id("g2", 3) is None


def test_reads_go_to_the_master_first_then_slaves() -> None:
    assert readers(view(), "g1") == [A, A2]
    assert readers(view(g2_master=False), "g2") == []


def test_send_picks_explicit_key_or_round_robin_over_groups_with_a_master() -> None:
    picker = SendPicker()
    assert picker.pick(view(), ROUTE, 5, None).queue_id == 5
    keyed = {picker.pick(view(), ROUTE, None, "k1").queue_id for _ in range(3)}
    assert len(keyed) == 1
    spread = [picker.pick(view(), ROUTE, None, None).queue_id for _ in range(12)]
    assert sorted(spread) == sorted(list(range(6)) * 2)
    only_g1 = {picker.pick(view(g2_master=False), ROUTE, None, None).group for _ in range(6)}
    assert only_g1 == {"g1"}
    assert {picker.pick(view(), ROUTE, None, None, ["g1"]).group for _ in range(6)} == {"g2"}
    with pytest.raises(NoMasterError):
        picker.pick(view(g2_master=False), ROUTE, None, None, ["g1"])


def test_round_robin_follows_each_new_view_and_route_of_a_topic() -> None:
    """The picker keeps a topic's writable queues for the view they came from: the same view
    gives the same spread, a new one (a master gone, back, the topic grown) is read again."""
    picker = SendPicker()
    both = view()
    assert sorted(picker.pick(both, ROUTE, None, None).queue_id for _ in range(12)) == sorted(
        list(range(6)) * 2
    )
    without_g2 = view(g2_master=False)
    assert {picker.pick(without_g2, ROUTE, None, None).group for _ in range(6)} == {"g1"}
    assert {picker.pick(both, ROUTE, None, None).group for _ in range(6)} == {"g1", "g2"}
    grown = spread_queues("T", 8, ["g1", "g2"])
    assert {picker.pick(both, grown, None, None).queue_id for _ in range(8)} == set(range(8))
    assert {picker.pick(both, ROUTE, None, None, ["g2"]).group for _ in range(6)} == {"g1"}


def test_an_idempotency_key_places_a_send_over_all_queues_whatever_group_is_down() -> None:
    picker = SendPicker()
    key = "order-42-paid"
    placed = picker.pick(view(), ROUTE, None, None, idempotency_key=key)
    assert placed.queue_id == shard_queue(key, len(ROUTE.queues))
    # No master, a failed group: still the same queue (it must find its first copy).
    assert picker.pick(view(g2_master=False), ROUTE, None, None, ["g1", "g2"], key) == placed
    assert picker.pick(view(), ROUTE, 1, None, idempotency_key=key).queue_id == 1
    by_sharding_key = picker.pick(view(), ROUTE, None, "k1", idempotency_key=key)
    assert by_sharding_key == picker.pick(view(), ROUTE, None, "k1")


def test_a_batch_names_one_queue_and_is_localized() -> None:
    body = {"messages": [{"body": "a", "queue_id": 4}, {"body": "b"}], "sharding_key": None}
    assert batch_queue_id(body) == 4
    assert batch_queue_id({"body": "x", "queue_id": 4.0}) == 4  # a whole number, as brokers read it
    assert batch_sharding_key({"body": "x", "sharding_key": "k"}) == "k"
    with pytest.raises(SplitBatchError):
        batch_queue_id({"messages": [{"queue_id": 0}, {"queue_id": 5}]})
    for bad in ("1", True, -1, 1.5):
        with pytest.raises(SendFieldError):
            batch_queue_id({"body": "x", "queue_id": bad})
    with pytest.raises(SendFieldError):
        batch_sharding_key({"body": "x", "sharding_key": 7})
    assert localize_send(body, 1) == {"messages": [{"body": "a"}, {"body": "b"}], "queue_id": 1}
    assert localize_send({"body": "x", "sharding_key": "k"}, 2) == {"body": "x", "queue_id": 2}


def test_commits_split_per_group_with_local_ids() -> None:
    split = split_commits(
        [
            {"topic": "T", "queue_id": 0, "offset": 3},
            {"topic": "T", "queue_id": 5, "offset": 7},
            {"topic": "%RETRY%G", "queue_id": 0, "offset": 1, "broker_group": "g2"},
        ],
        {"T": ROUTE},
    )
    assert split == {
        "g1": [{"topic": "T", "queue_id": 0, "offset": 3}],
        "g2": [
            {"topic": "T", "queue_id": 2, "offset": 7},
            {"topic": "%RETRY%G", "queue_id": 0, "offset": 1},
        ],
    }
    with pytest.raises(QueueNotRoutedError):
        split_commits([{"topic": "T", "queue_id": 9, "offset": 0}], {"T": ROUTE})


def test_a_timer_handle_goes_to_the_group_it_names() -> None:
    def handle(topic: str, group: str) -> str:
        return TimerHandle(topic, group, 1001, "K").encode()

    assert timer_group(view(), "T", handle("T", "g1")) == "g1"
    assert timer_group(view(g2_master=False), "T", handle("T", "g2")) == "g2", "masterless now"
    assert timer_group(view(), "T", handle("T", "b")) == "g2", "a broker not told its group"
    with pytest.raises(InvalidTimerHandleError, match="group 'g3'"):
        timer_group(view(), "T", handle("T", "g3"))


def test_a_timer_handle_naming_a_broker_goes_to_its_group_or_the_topics_only_group() -> None:
    def handle(topic: str, broker: str) -> str:
        return TimerHandle(topic, broker, 1001, "K", "v1").encode()

    assert timer_group(view(), "T", handle("T", "a2")) == "g1", "a slave that issued it"
    assert timer_group(view(), "T", handle("T", "b")) == "g2"
    alone = ClusterView("c1", 1, view().groups, {"One": spread_queues("One", 2, ["g2"])})
    assert timer_group(alone, "One", handle("One", "gone")) == "g2"
    for topic, text in (("T", handle("T", "gone")), ("T", handle("U", "a")), ("T", "x")):
        with pytest.raises(InvalidTimerHandleError):
            timer_group(view(), topic, text)
