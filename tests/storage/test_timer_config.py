"""Timer settings: precision snapping, the roll window clamp, and the retention rule (which
holds while the wheel runs)."""

from __future__ import annotations

from storage.timer.config import TimerConfig, check_timer_config, snap_precision


def test_defaults_are_rocketmqs() -> None:
    config = TimerConfig()
    assert (config.precision_ms, config.max_delay_s, config.slots_total) == (1000, 259_200, 604_800)
    assert config.roll_window_ms == 2 * 86_400_000
    assert check_timer_config(config, retention_hours=72) == []
    assert snap_precision(250) == 200


def test_the_roll_window_is_clamped_and_must_be_shorter_than_retention() -> None:
    assert TimerConfig(slots_total=100, roll_window_slots=500).effective_roll_window_slots == 40
    [problem] = check_timer_config(TimerConfig(), retention_hours=24)
    assert "roll window" in problem
    assert check_timer_config(TimerConfig(enabled=False), retention_hours=24) == []
    assert check_timer_config(TimerConfig(precision_ms=300), 72)[0].startswith("timer precision")
