"""Numbers as a person reads them: bytes, FLOPs and seconds with their units, and round axis ticks.

The one place these rules are written in Python; `js/units.ts` is their TypeScript twin, and
`tests/test_contract.py` writes this module's answers on a table of samples into the contract fixture for
`js/test/contract.test.ts` to hold the two equal, string for string.

The rule: decimal units (1 KB is 1000 bytes, as the notebooks print them); below 1000 of the smallest
unit a whole number (`512 B`, `0 FLOP`); else three significant digits, zeros kept (`16.4 KB`, `1.00 GB`,
`27.3 MFLOP`), in the largest unit that leaves at least 1 (`999.6 KB` is written `1.00 MB`). Seconds are
written in ms below one (`16.2 ms`, `0.500 ms`). Rounding is from the double's exact value with ties up, as
JavaScript's `toFixed` does. Nothing here imports torch.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")
FLOP_UNITS = ("FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP")
SECOND_UNITS = ("s", "ms")
"""Seconds, then a thousandth of one (the smallest: a step time of 0.5 ms reads `0.500 ms`)."""
_PREFIXES = ("", "k", "M", "G", "T", "P")
"""Any other unit's multiples (`units_of`)."""


def fixed(value: float, places: int) -> str:
    """`value` with `places` decimals, rounded from its exact value with ties up: JavaScript's `toFixed`."""
    return format(Decimal(value).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP), "f")


def three_digits(value: float) -> str:
    """A positive value with three significant digits, zeros kept: 0.500, 1.00, 16.4, 131; whole from 1000
    up (999.6 gives 1000, which a caller with a next unit writes in that unit)."""
    places, below = 2, 10.0
    while value < below / 10 and places < 12:
        places, below = places + 1, below / 10
    text = fixed(value, places)
    while float(text) >= below and places > 0:  # 9.996 rounds to 10.00: one place fewer
        places, below = places - 1, below * 10
        text = fixed(value, places)
    return text


def _scaled(value: float, names: tuple[str, ...]) -> str:
    """`value` in the largest of `names` (each 1000 times the one before) that leaves at least 1."""
    size, unit = abs(value), 0
    while size >= 1000 and unit < len(names) - 1:
        size /= 1000
        unit += 1
    text = fixed(size, 0) if unit == 0 else three_digits(size)
    if float(text) >= 1000 and unit < len(names) - 1:  # 999.6 KB rounds to 1000: written 1.00 MB
        size /= 1000
        unit += 1
        text = three_digits(size)
    sign = "-" if value < 0 and float(text) != 0 else ""
    return f"{sign}{text} {names[unit]}"


def format_bytes(count: float) -> str:
    """`512 B`, `16.4 KB`, `1.45 MB`, `1.00 GB`."""
    return _scaled(count, BYTE_UNITS)


def format_flops(flops: float) -> str:
    """`0 FLOP`, `524 kFLOP`, `27.3 MFLOP`."""
    return _scaled(flops, FLOP_UNITS)


def format_seconds(seconds: float) -> str:
    """`16.2 ms`, `0.500 ms`, `12.3 s`, `0 s`: three significant digits, in ms below one second."""
    size, unit = abs(seconds), 0
    if size == 0:
        return "0 s"
    while size < 1 and unit < len(SECOND_UNITS) - 1:
        size *= 1000
        unit += 1
    text = three_digits(size)
    if float(text) >= 1000 and unit > 0:  # 999.6 ms rounds to 1000: written 1.00 s
        size /= 1000
        unit -= 1
        text = three_digits(size)
    return f"{'-' if seconds < 0 else ''}{text} {SECOND_UNITS[unit]}"


def units_of(unit: str) -> tuple[str, ...]:
    """The names a quantity in `unit` (not seconds: `SECOND_UNITS`) is written in, each 1000 times the one
    before: bytes, FLOPs, or `unit` with SI prefixes; () for a bare number."""
    if unit == "B":
        return BYTE_UNITS
    if unit == "FLOP":
        return FLOP_UNITS
    if not unit:
        return ()
    return tuple(prefix + unit for prefix in _PREFIXES)


def format_value(value: float, unit: str) -> str:
    """`value` in `unit` by the rule above: bytes, FLOPs, seconds, any other unit with SI prefixes, or a
    bare number (`unit` ""), three significant digits."""
    if unit == "s":
        return format_seconds(value)
    names = units_of(unit)
    if not names:
        return plain_number(value)
    return _scaled(value, names)


def axis_unit(largest: float, unit: str) -> tuple[float, str]:
    """The divisor and unit name an axis whose largest tick is `largest` is labelled in (ticks then read
    `plain_number(tick / divisor)`): the unit `format_value` writes `largest` in."""
    if unit == "s":
        divisor, index = 1.0, 0
        while 0 < largest < divisor and index < len(SECOND_UNITS) - 1:
            divisor, index = divisor / 1000, index + 1
        return divisor, SECOND_UNITS[index]
    names = units_of(unit)
    divisor, index = 1.0, 0
    while names and largest >= divisor * 1000 and index < len(names) - 1:
        divisor, index = divisor * 1000, index + 1
    return divisor, names[index] if names else ""


def plain_number(value: float) -> str:
    """A tick's number: three significant digits, trailing zeros dropped (`0.5`, `1`, `1.5`, `250`)."""
    if value == 0:
        return "0"
    text = three_digits(abs(value))
    return ("-" if value < 0 else "") + (text.rstrip("0").rstrip(".") if "." in text else text)


def nice_ticks(largest: float, count: int = 5) -> list[float]:
    """Ticks from 0 in steps of 1, 2 or 5 times a power of ten, the last at or above `largest`; [0, 1]
    when there is nothing to show, so an axis always has a span. js/units.ts `niceTicks` is its
    twin (same steps, same 12 significant digits); the contract fixture holds them equal."""
    if not largest > 0:
        return [0.0, 1.0]
    raw = largest / count
    power = float(f"1e{math.floor(math.log10(raw))}")  # parsed, as js/units.ts does: the same double
    step = next((m * power for m in (1, 2, 5) if m * power >= raw), 10 * power)
    ticks = [0.0]
    while ticks[-1] < largest * (1 - 1e-9):
        ticks.append(float(f"{len(ticks) * step:.12g}"))
    return ticks
