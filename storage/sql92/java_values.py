"""How RocketMQ's filter compares a property (always a string) with a constant: the value is
converted to the constant's type the way Java converts it (``Long.valueOf``,
``Double.valueOf``, ``Boolean.valueOf``), and ordered by that type's ``compareTo``. A value that
does not convert is an evaluation error, which makes the whole filter not match the message
(:class:`Unconvertible`).

Integers are 64-bit throughout: RocketMQ narrows a small integer constant to Java's ``int``, so
``a > 10`` fails on ``a = '3000000000'``; here it matches. A boolean constant compares with a
string property on either side (RocketMQ's ``TRUE = a`` fails on a cast).
"""

from __future__ import annotations

import math
import re
from typing import Final

from storage.sql92.syntax import LONG_MAX, LONG_MIN, Constant


class Unconvertible(Exception):
    """A property value that does not convert to the type it is compared with."""


_LONG: Final = re.compile(r"[+-]?[0-9]+")
_DOUBLE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_HEX_DOUBLE: Final = re.compile(
    r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?"
)
_JAVA_SPACE: Final = "".join(chr(c) for c in range(33))
"""What Java's ``String.trim`` (and so ``Double.valueOf``) takes off both ends."""


def java_long(text: str) -> int:
    """``Long.valueOf(text)``: an optional sign and decimal digits, within 64 bits."""
    if _LONG.fullmatch(text) is None:
        raise Unconvertible(text)
    value = int(text)
    if not LONG_MIN <= value <= LONG_MAX:
        raise Unconvertible(text)
    return value


def java_double(text: str) -> float:
    """``Double.valueOf(text)``: Java's decimal and hexadecimal forms, ``NaN``, ``Infinity``,
    a ``f``/``d`` suffix, surrounding control characters and spaces ignored."""
    trimmed = text.strip(_JAVA_SPACE)
    if _DOUBLE.fullmatch(trimmed) is not None:
        return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))
    if _HEX_DOUBLE.fullmatch(trimmed) is not None:
        return float.fromhex(trimmed.rstrip("fFdD"))
    raise Unconvertible(text)


def java_boolean(text: str) -> bool:
    """``Boolean.valueOf(text)``: ``true`` in any case, anything else false (never an error)."""
    return text.lower() == "true"


def converted(value: str, like: Constant) -> Constant:
    """A property's value as the type of ``like`` (a constant it is compared with)."""
    if isinstance(like, bool):
        return java_boolean(value)
    if isinstance(like, int):
        return java_long(value)
    if isinstance(like, float):
        return java_double(value)
    return value


def compare(left: Constant, right: Constant) -> int:
    """RocketMQ's ``__compare`` with string conversion: negative, zero or positive; -1 for
    types that do not compare (a boolean with a number)."""
    if type(left) is not type(right):
        if isinstance(left, str):
            left = converted(left, right)
        elif isinstance(right, str):
            right = converted(right, left)
        elif isinstance(left, bool) or isinstance(right, bool):
            return -1
        else:  # a long and a double: as doubles
            left, right = float(left), float(right)
    if isinstance(left, float):
        assert isinstance(right, float)
        return _double_order(left, right)
    return (left > right) - (left < right)  # type: ignore[operator]


def _double_order(left: float, right: float) -> int:
    """``Double.compareTo``: NaN above everything and equal to itself, -0.0 below 0.0."""
    left_key = (math.isnan(left), 0.0 if math.isnan(left) else left, math.copysign(1, left))
    right_key = (math.isnan(right), 0.0 if math.isnan(right) else right, math.copysign(1, right))
    return (left_key > right_key) - (left_key < right_key)
