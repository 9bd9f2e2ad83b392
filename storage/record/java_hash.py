"""Java's ``String.hashCode``: the tags code of a ConsumeQueue unit and the IndexFile's key
hash are both this hash of a string, as a signed 32-bit int.

``h = 31*h + c`` over the UTF-16 code units is ``sum(c[i] * 31**(n-1-i)) mod 2**32``, which
runs in C through ``map``; the powers of 31 are kept per length.
"""

from __future__ import annotations

import array
import operator
import sys
from functools import lru_cache
from typing import Final

_MAX_FAST_HASH_LENGTH: Final = 1024
_UINT32_MASK: Final = 0xFFFFFFFF
_SIGN_BIT: Final = 0x80000000


@lru_cache(maxsize=256)
def _hash_powers(length: int) -> tuple[int, ...]:
    """``31**(length-1-i) mod 2**32`` for each position ``i``."""
    return tuple(pow(31, length - 1 - i, 1 << 32) for i in range(length))


@lru_cache(maxsize=8192)
def java_string_hash(value: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, as a signed int32.

    Computed as ``sum(c[i] * 31**(n-1-i)) mod 2**32`` so the loop runs in C (for ASCII by
    parsing base-31 digits, see :func:`java_string_hash_after`): index keys are unique per
    message, so the cache rarely helps them.

    >>> java_string_hash("TAG1"), java_string_hash("TagA")
    (2567159, 2598919)
    """
    units: bytes | array.array[int]
    if value.isascii():
        units = value.encode()
        if 0 < len(units) <= _MAX_BASE_31_LENGTH:
            h = int(units.translate(_LOW_DIGITS), 31) + int(
                units.translate(_HIGH_DIGITS) + b"0", 31
            )
            h &= _UINT32_MASK
            return h - 0x100000000 if h & _SIGN_BIT else h
    else:
        units = array.array(
            "H", value.encode("utf-16-le" if sys.byteorder == "little" else "utf-16-be")
        )
    if len(units) > _MAX_FAST_HASH_LENGTH:
        h = 0
        for unit in units:
            h = (31 * h + unit) & _UINT32_MASK
    else:
        h = sum(map(operator.mul, units, _hash_powers(len(units)))) & _UINT32_MASK
    return h - 0x100000000 if h & _SIGN_BIT else h


_POWERS_OF_31: Final = tuple(pow(31, n, 1 << 32) for n in range(_MAX_FAST_HASH_LENGTH + 1))


_MAX_BASE_31_LENGTH: Final = 600
"""Longest value hashed by parsing base-31 digits: under the smallest limit Python can be set
to for parsing a number in a base other than a power of two (640 digits)."""
_BASE_31_DIGITS: Final = b"0123456789abcdefghijklmnopqrstu"
_LOW_DIGITS: Final = bytes(_BASE_31_DIGITS[unit % 31] for unit in range(256))
_HIGH_DIGITS: Final = bytes(_BASE_31_DIGITS[unit // 31] for unit in range(256))


def java_string_hash_after(prefix_hash: int, value: str) -> int:
    """``java_string_hash(prefix + value)`` from the prefix's hash, hashing ``value`` only.

    Java's hash is linear: ``h(p + v) = h(p) * 31**len(v) + h(v)`` (mod 2**32), so a
    remembered prefix (an index key's ``topic#``) is not hashed again. Uncached: the
    values (index keys) are nearly always new.

    ``h(v)`` of an ASCII value is ``sum(c[i] * 31**(n-1-i))`` exactly before it wraps: with
    ``c = 31*q + r`` per character that is the number the ``r`` digits write in base 31, plus
    the one the ``q`` digits and a 0 write. ``int`` parses both in C: no product per character.
    """
    if not value.isascii() or len(value) > _MAX_FAST_HASH_LENGTH:
        h = prefix_hash * pow(31, _utf16_length(value), 1 << 32) + java_string_hash(value)
    elif value and len(value) <= _MAX_BASE_31_LENGTH:
        units = value.encode()
        h = (
            prefix_hash * _POWERS_OF_31[len(units)]
            + int(units.translate(_LOW_DIGITS), 31)
            + int(units.translate(_HIGH_DIGITS) + b"0", 31)
        )
    else:
        units = value.encode()
        length = len(units)
        h = prefix_hash * _POWERS_OF_31[length] + sum(
            map(operator.mul, units, _hash_powers(length))
        )
    h &= _UINT32_MASK
    return h - 0x100000000 if h & _SIGN_BIT else h


def _utf16_length(value: str) -> int:
    return len(value.encode("utf-16-le")) // 2


def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tags code of a TAGS value: its Java hash, 0 when there is no tag."""
    if not tags:
        return 0
    return java_string_hash(tags)


def to_int32(value: int) -> int:
    """The low 32 bits of ``value`` as a signed int (how filters compare a tags code)."""
    value &= _UINT32_MASK
    return value - 0x100000000 if value & _SIGN_BIT else value
