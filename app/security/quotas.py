"""Per-token quotas: a token bucket of requests, and a cap on parked long-polls.

Both are checked before the route runs, and both answer 429 with ``Retry-After``; a token
over its quota does not slow anyone else down. Anonymous callers (no auth file) have no
per-token quotas: the global caps (request size, parked long-polls) still hold.

>>> bucket = TokenBucket(rate_per_s=1.0, burst=2, now=0.0)
>>> bucket.take(0.0), bucket.take(0.0), bucket.take(0.0)
(0.0, 0.0, 1.0)
>>> bucket.take(1.0)
0.0
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from app.security.principals import Principal

Clock = Callable[[], float]

_IDLE_BUCKETS: Final = 10_000
"""Buckets kept before the full ones (idle long enough to be full again) are dropped."""


class TokenBucket:
    """``burst`` requests at once, refilled at ``rate_per_s``."""

    __slots__ = ("burst", "rate_per_s", "stamp", "tokens")

    def __init__(self, rate_per_s: float, burst: int, now: float) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.tokens = float(burst)
        self.stamp = now

    def take(self, now: float) -> float:
        """0.0 when a request may go now, else the seconds until it may."""
        elapsed = max(0.0, now - self.stamp)
        self.tokens = min(float(self.burst), self.tokens + elapsed * self.rate_per_s)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate_per_s

    def full(self, now: float) -> bool:
        return self.tokens + (now - self.stamp) * self.rate_per_s >= self.burst


@dataclass(frozen=True, slots=True)
class QuotaDefaults:
    """The server's quotas for tokens whose entry does not set their own."""

    rate_per_s: float = 1000.0  # 0: no rate limit
    burst: int = 2000
    max_parked_pulls: int = 100


class RateLimiter:
    """One token bucket per principal name."""

    def __init__(self, defaults: QuotaDefaults, clock: Clock = time.monotonic) -> None:
        self._defaults = defaults
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def admit(self, principal: Principal) -> int:
        """0 when the request may go, else whole seconds to wait (for Retry-After)."""
        if principal.anonymous:
            return 0
        rate = self._defaults.rate_per_s if principal.rate_per_s is None else principal.rate_per_s
        if rate <= 0:
            return 0
        now = self._clock()
        bucket = self._buckets.get(principal.name)
        if bucket is None:
            burst = _burst(principal, self._defaults)
            bucket = self._buckets[principal.name] = TokenBucket(rate, burst, now)
            self._prune(now)
        wait = bucket.take(now)
        return 0 if wait == 0 else max(1, math.ceil(wait))

    def _prune(self, now: float) -> None:
        if len(self._buckets) > _IDLE_BUCKETS:
            for name in [n for n, b in self._buckets.items() if b.full(now)]:
                del self._buckets[name]


def _burst(principal: Principal, defaults: QuotaDefaults) -> int:
    """The token's burst; one of its own rate without a burst gets two seconds' worth."""
    if principal.burst is not None:
        return principal.burst
    if principal.rate_per_s is not None:
        return max(1, math.ceil(2 * principal.rate_per_s))
    return defaults.burst


class ParkedPulls:
    """Pulls with ``wait_ms > 0`` in flight per principal, with a cap each."""

    def __init__(self, defaults: QuotaDefaults) -> None:
        self._defaults = defaults
        self._in_flight: dict[str, int] = {}

    def cap(self, principal: Principal) -> int:
        if principal.max_parked_pulls is not None:
            return principal.max_parked_pulls
        return self._defaults.max_parked_pulls

    def enter(self, principal: Principal) -> bool:
        """Count one more long-poll; False (and nothing counted) when at the cap."""
        name = principal.name
        count = self._in_flight.get(name, 0)
        if count >= self.cap(principal):
            return False
        self._in_flight[name] = count + 1
        return True

    def leave(self, principal: Principal) -> None:
        name = principal.name
        count = self._in_flight.get(name, 0) - 1
        if count > 0:
            self._in_flight[name] = count
        else:
            self._in_flight.pop(name, None)
