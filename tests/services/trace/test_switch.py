"""Which messages are traced: a topic's own switch, the broker default, sampling by id."""

from __future__ import annotations

import pytest

from services.trace.switch import TraceSwitch, any_topic_traced, check_sample_rate, original_topic
from storage.config_managers import TopicConfig

CONFIGS = {
    "On": TopicConfig("On", trace=True),
    "Off": TopicConfig("Off", trace=False),
    "Default": TopicConfig("Default"),
}


def switch(default: bool = False, rate: float = 1.0) -> TraceSwitch:
    configs = list(CONFIGS.values())
    return TraceSwitch(
        CONFIGS.get,
        any_topic_traced(lambda: 1, lambda: configs),
        default=default,
        sample_rate=rate,
    )


@pytest.mark.parametrize(
    ("default", "expected"),
    [(False, {"On": True, "Off": False, "Default": False, "Unknown": False}),
     (True, {"On": True, "Off": False, "Default": True, "Unknown": True})],
)  # fmt: skip
def test_a_topic_s_own_switch_wins_over_the_broker_default(
    default: bool, expected: dict[str, bool]
) -> None:
    decide = switch(default)
    assert {topic: decide.for_topic(topic) for topic in expected} == expected


def test_retry_and_dlq_topics_are_traced_when_any_topic_may_be() -> None:
    assert switch().for_topic("%RETRY%g")
    assert switch().for_topic("%DLQ%g")
    nothing = TraceSwitch(lambda _: None, lambda: False)
    assert not nothing.for_topic("%RETRY%g")
    assert original_topic("%RETRY%g", "Orders") == "Orders"
    assert original_topic("Orders", None) == "Orders"


def test_sampling_takes_a_message_whole_by_its_id() -> None:
    half = switch(rate=0.5)
    ids = [f"{n:032X}" for n in range(2000)]
    taken = [i for i in ids if half.sampled(i)]
    assert 0.4 < len(taken) / len(ids) < 0.6
    assert taken == [i for i in ids if switch(rate=0.5).sampled(i)]  # the same on any broker
    assert all(switch().sampled(i) for i in ids)
    assert {half.state("On", i) for i in ids} == {"on", "sampled_out"}
    assert half.state("Off", ids[0]) == "off"


@pytest.mark.parametrize("rate", [0, -0.1, 1.5])
def test_a_sample_rate_outside_0_to_1_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="sample rate"):
        check_sample_rate(rate)


def test_any_topic_traced_is_read_again_when_the_configs_change() -> None:
    version = [1]
    configs = [TopicConfig("A")]
    check = any_topic_traced(lambda: version[0], lambda: configs)
    assert not check()
    configs.append(TopicConfig("B", trace=True))
    assert not check()  # same version: the answer is kept
    version[0] = 2
    assert check()
