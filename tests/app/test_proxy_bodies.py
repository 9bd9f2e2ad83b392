"""What the proxy reads and rewrites in bodies without decoding them, and how it shares a
consumer's budget among broker groups."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ApiError
from app.proxy.bodies import JsonSend, relabel_queue_id, with_group, with_members
from app.proxy.fanout import BudgetShares
from services.cluster.proxy_routing import SplitBatchError


def test_a_send_that_names_no_queue_is_forwarded_as_it_came_with_the_local_queue_in_front() -> None:
    raw = b' {"messages": [{"body": "a"}, {"body": "b", "tags": "T"}]}'
    plan = JsonSend(raw)
    assert (plan.decoded, plan.queue_id, plan.sharding_key) == (None, None, None)
    sent = plan.for_queue(3)
    assert sent.endswith(raw.lstrip()[1:])
    assert orjson.loads(sent) == {"queue_id": 3, **orjson.loads(raw)}
    assert orjson.loads(JsonSend(b"{ }").for_queue(0)) == {"queue_id": 0}
    assert orjson.loads(JsonSend(b"{\n\t}").for_queue(1)) == {"queue_id": 1}


def test_an_undecoded_send_is_written_as_buffers_over_the_clients_bytes() -> None:
    """No copy of the client's body: its bytes after ``{`` are a view, the local queue id a
    short buffer in front; together they are the body :meth:`JsonSend.for_queue` gives."""
    raw = b'{"messages": [' + b",".join([b'{"body": "' + b"x" * 1024 + b'"}'] * 100) + b"]}"
    plan = JsonSend(raw)
    head, rest = plan.parts_for(2)
    assert isinstance(rest, memoryview) and rest.obj is raw and bytes(rest) == raw[1:]
    assert bytes(head) + bytes(rest) == plan.for_queue(2) == b'{"queue_id":2,' + raw[1:]
    decoded = JsonSend(b'{"body": "x", "queue_id": 5}').parts_for(1)
    assert [orjson.loads(part) for part in decoded] == [{"body": "x", "queue_id": 1}]


@pytest.mark.parametrize(
    ("raw", "queue_id", "sharding_key"),
    [
        pytest.param(b'{"body": "x", "queue_id": 5}', 5, None, id="queue"),
        pytest.param(b'{"body": "x", "sharding_key": "k"}', None, "k", id="sharding-key"),
        pytest.param(b'{"messages": [{"body": "x", "queue_id": 2}]}', 2, None, id="in-a-message"),
        pytest.param(b'{"body": "x", "queue\\u005fid": 4}', 4, None, id="escaped-name"),
        pytest.param(b'{"body": "under_score"}', None, None, id="underscore-elsewhere"),
    ],
)
def test_a_send_that_may_name_a_queue_is_decoded(
    raw: bytes, queue_id: int | None, sharding_key: str | None
) -> None:
    plan = JsonSend(raw)
    assert plan.decoded is not None
    assert (plan.queue_id, plan.sharding_key) == (queue_id, sharding_key)
    forwarded = orjson.loads(plan.for_queue(1))
    assert forwarded["queue_id"] == 1 and "sharding_key" not in forwarded


def test_bad_json_sends_are_refused_as_before() -> None:
    with pytest.raises(ApiError) as malformed:
        JsonSend(b'{"body": "x", "queue_id": ')
    assert malformed.value.code == "MALFORMED_JSON"
    with pytest.raises(ApiError) as not_object:
        JsonSend(b'["queue_id"]')
    assert not_object.value.code == "VALIDATION_FAILED"
    with pytest.raises(SplitBatchError):
        JsonSend(b'{"messages": [{"queue_id": 0}, {"queue_id": 1}]}')


def test_queue_ids_are_relabelled_and_nothing_else() -> None:
    answer = {
        "topic": "T",
        "queue_id": 1,
        "messages": [
            {
                "queue_id": 1,
                "queue_offset": 1,
                "body": '"queue_id":1,',
                "properties": {"queue_id": "1"},
            },
            {"queue_offset": 12, "queue_id": 1},
        ],
        "other": {"queue_id": 12},
    }
    relabelled = orjson.loads(relabel_queue_id(orjson.dumps(answer), 1, 7))
    assert relabelled["queue_id"] == 7
    assert [m["queue_id"] for m in relabelled["messages"]] == [7, 7]
    assert relabelled["messages"][0]["body"] == '"queue_id":1,'
    assert relabelled["messages"][0]["properties"] == {"queue_id": "1"}
    assert relabelled["other"] == {"queue_id": 12}
    spaced = b'{"queue_id" : 1 , "x": [{"queue_id":1}]}'
    assert orjson.loads(relabel_queue_id(spaced, 1, 3)) == {"queue_id": 3, "x": [{"queue_id": 3}]}
    assert relabel_queue_id(spaced, 1, 1) is spaced


def test_members_go_in_front_of_an_object() -> None:
    assert orjson.loads(with_members(b'{"a": 1}', {"broker_group": "g1"})) == {
        "broker_group": "g1",
        "a": 1,
    }
    assert orjson.loads(with_members(b"{}", {"x": [1]})) == {"x": [1]}
    assert with_members(b'{"a": 1}', {}) == b'{"a": 1}'


def test_budget_shares_follow_what_each_group_gave() -> None:
    shares = BudgetShares(probe_interval_s=0)
    key = ("pull", "G", "T")
    groups = ["g1", "g2", "g3"]
    first = shares.shares(key, groups, 32)
    assert first == {"g1": 11, "g2": 11, "g3": 10}  # nothing known: even
    shares.record(key, first, {"g1": 11, "g2": 0, "g3": 4})
    second = shares.shares(key, groups, 32)
    assert second == {"g1": 30, "g2": 1, "g3": 1}  # g2 and g3 drained: a probe each
    shares.record(key, second, {"g1": 30, "g2": 1, "g3": 0})
    assert shares.shares(key, groups, 32) == {"g1": 16, "g2": 15, "g3": 1}  # g2 has more again
    shares.record(key, {"g1": 16}, {"g1": 3})  # only g1 asked: g2 still full, g3 still drained
    assert shares.shares(key, groups, 32) == {"g1": 1, "g2": 30, "g3": 1}
    shares.record(key, {"g1": 1, "g2": 30, "g3": 1}, {})
    assert shares.shares(key, groups, 32) == {"g1": 11, "g2": 11, "g3": 10}  # all drained
    assert shares.shares(key, groups, 2) == {"g1": 1, "g2": 1, "g3": 0}
    assert sum(shares.shares(("pop", "G", "T"), groups, 1).values()) == 1


def test_drained_groups_are_probed_at_most_once_per_interval() -> None:
    shares = BudgetShares(probe_interval_s=3600)
    key = ("pop", "G", "T")
    shares.record(key, {"g1": 16, "g2": 16}, {"g1": 16, "g2": 0})
    assert shares.shares(key, ["g1", "g2"], 32) == {"g1": 31, "g2": 1}
    assert shares.shares(key, ["g1", "g2"], 32) == {"g1": 32, "g2": 0}


def test_a_planned_round_keeps_nothing_until_its_probe_is_made() -> None:
    shares = BudgetShares(probe_interval_s=3600)
    key = ("pull", "G", "T")
    shares.record(key, {"g1": 16, "g2": 16}, {"g1": 16, "g2": 0})
    planned = ({"g1": 31, "g2": 1}, True)
    assert shares.plan(key, ["g1", "g2"], 32) == planned
    assert shares.plan(key, ["g1", "g2"], 32) == planned  # still due: nothing was kept
    shares.probing(key)
    assert shares.plan(key, ["g1", "g2"], 32) == ({"g1": 32, "g2": 0}, False)
    assert shares.shares(key, ["g1", "g2"], 32) == {"g1": 32, "g2": 0}


def test_budget_shares_forget_the_least_recent_key_first() -> None:
    shares = BudgetShares(capacity=2, probe_interval_s=0)
    for topic in ("A", "B", "C"):
        shares.record(("pull", "G", topic), {"g1": 2, "g2": 2}, {"g1": 2})
    assert shares.shares(("pull", "G", "A"), ["g1", "g2"], 4) == {"g1": 2, "g2": 2}
    assert shares.shares(("pull", "G", "C"), ["g1", "g2"], 4) == {"g1": 3, "g2": 1}


def _members_in_front(content: bytes, members: Mapping[str, object]) -> bytes:
    """What with_members makes, made the plain way: slices and concatenation."""
    rest = content.lstrip()[1:]
    comma = b"" if rest.lstrip()[:1] == b"}" else b","
    return b"{" + orjson.dumps(members)[1:-1] + comma + rest


@pytest.mark.parametrize(
    "content",
    [
        b'{"a": 1}',
        b"{}",
        b" { } ",
        b'\n\t{\r\n"x":[1]}',
        b"\x0b\x0c{\x0b}",
        b'{"receipts":[{"queue_id":3}]}',
        b"{" + b'"m":"' + b"z" * 100_000 + b'"}',
    ],
)
def test_members_are_put_in_front_as_by_concatenation(content: bytes) -> None:
    for members in ({"broker_group": "g1"}, {"x": [1], "y": "é"}):
        assert with_members(content, members) == _members_in_front(content, members)
    for group in ("g1", "groupé", 'g"\\', "g1"):  # the last: the group's text made before
        expected = _members_in_front(content, {"broker_group": group})
        assert with_group(content, group) == expected


def plan_before(
    drained: frozenset[str], probe_due: bool, groups: list[str], budget: int
) -> tuple[dict[str, int], bool]:
    """:meth:`BudgetShares.plan` as it was written first: the reference for its faster one."""
    likely = [g for g in groups if g not in drained]
    probed = [g for g in groups if g in drained]
    if not likely:
        likely, probed = list(groups), []
    if probed and not probe_due:
        probed = []
    shares = dict.fromkeys(groups, 0)
    probing = bool(probed)
    if budget < len(likely) + len(probed):
        for name in (likely + probed)[:budget]:
            shares[name] = 1
        return shares, probing
    for name in probed:
        shares[name] = 1
    each, extra = divmod(budget - len(probed), len(likely))
    for index, name in enumerate(likely):
        shares[name] = each + (1 if index < extra else 0)
    return shares, probing


@given(
    groups=st.permutations(["g1", "g2", "g3", "g4"]).flatmap(
        lambda order: st.integers(1, 4).map(lambda n: order[:n])
    ),
    full=st.sets(st.sampled_from(["g1", "g2", "g3", "g4"])),
    known=st.booleans(),
    probed=st.sampled_from([None, 0.0, 3600.0]),
    budget=st.integers(-1, 40),
)
def test_budget_plans_are_the_first_ones(
    groups: list[str], full: set[str], known: bool, probed: float | None, budget: int
) -> None:
    """Any groups known drained or not, probed lately or never, in any order, any budget:
    the plan (the shares and whether they probe) is the one first written."""
    shares = BudgetShares(probe_interval_s=probed if probed is not None else 0)
    key = ("pull", "G", "T")
    drained: frozenset[str] = frozenset()
    if known:
        asked = dict.fromkeys(["g1", "g2", "g3", "g4"], 1)
        shares.record(key, asked, dict.fromkeys(full, 1))
        drained = frozenset(asked) - full
        if probed is not None:
            shares.probing(key)
    probe_due = not known or probed is None or probed == 0.0
    assert shares.plan(key, groups, budget) == plan_before(drained, probe_due, groups, budget)
