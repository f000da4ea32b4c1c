"""Human-readable numbers for reports: bytes, seconds, joules, percentages, losses.

Every formatter takes the raw unit a record stores (int bytes, float seconds, joules) and
returns text. ``None`` and non-finite values become :data:`NA` — never ``0``, because a
machine that cannot measure something must not look like it measured nothing.
"""

from __future__ import annotations

import math
from numbers import Real

__all__ = [
    "NA", "as_number", "format_bytes", "format_energy", "format_joules", "format_loss", "format_percent",
    "format_quantity", "format_rate", "format_ratio", "format_seconds", "format_value", "plural",
]

NA = "n/a"


def as_number(value: object) -> float | None:
    """``value`` as a finite float, or ``None`` for missing, non-numeric, boolean or non-finite values.

    Args:
        value: anything read from a record (meters dicts may hold ``None``, strings or garbage).

    Returns:
        The number, or ``None``.
    """
    # bool is an int subclass; a meter's ``available: true`` is not the number 1.
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def format_bytes(value: object) -> str:
    """Binary units (KiB, MiB, GiB, TiB), three significant digits: ``format_bytes(3 * 2**20) == "3.00 MiB"``."""
    number = as_number(value)
    if number is None:
        return NA
    if abs(number) < 1024:
        return f"{number:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        number /= 1024
        if abs(number) < 1024 or unit == "TiB":
            return f"{_three_digits(number)} {unit}"
    raise AssertionError("unreachable")


def format_seconds(value: object) -> str:
    """ms below a second, seconds below a minute, then ``m s`` and ``h m``: ``format_seconds(75) == "1 min 15 s"``."""
    number = as_number(value)
    if number is None:
        return NA
    if number < 1:
        return f"{_three_digits(number * 1000)} ms"
    if number < 60:
        return f"{_three_digits(number)} s"
    if number < 3600:
        minutes, seconds = divmod(round(number), 60)
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(round(number / 60), 60)
    return f"{hours} h {minutes} min"


def format_joules(value: object) -> str:
    """J, kJ, MJ with three significant digits."""
    number = as_number(value)
    if number is None:
        return NA
    return _in_largest_unit(number, ((" MJ", 1e6), (" kJ", 1e3))) or f"{_three_digits(number)} J"


def format_energy(value: object) -> str:
    """Joules of one image: µJ below a millijoule, mJ below a joule, then J and kJ; ``n/a`` if missing."""
    number = as_number(value)
    if number is None:
        return NA
    if abs(number) >= 1:
        return format_joules(number)
    if abs(number) >= 1e-3:
        return f"{_three_digits(number * 1e3)} mJ"
    return f"{_three_digits(number * 1e6)} µJ"


def format_rate(value: object) -> str:
    """Images per second, three significant digits: ``1.36k img/s``, ``45.2 img/s``; ``n/a`` if missing."""
    number = as_number(value)
    if number is None:
        return NA
    return (_in_largest_unit(number, (("M img/s", 1e6), ("k img/s", 1e3)))
            or f"{_three_digits(number)} img/s")


def format_quantity(value: float) -> str:
    """A count with three significant digits and a B/M/k suffix, trailing zeros kept: ``4.30M``, ``950``."""
    return _in_largest_unit(value, (("B", 1e9), ("M", 1e6), ("k", 1e3))) or f"{value:.0f}"


def format_percent(value: object) -> str:
    """One decimal and a percent sign: ``format_percent(97.25) == "97.2 %"``."""
    number = as_number(value)
    return NA if number is None else f"{number:.1f} %"


def format_loss(value: object) -> str:
    """Four significant digits (losses span 0.02 to 1000 across models)."""
    number = as_number(value)
    return NA if number is None else f"{number:.4g}"


def format_ratio(value: object) -> str:
    """Two decimals and a times sign: ``format_ratio(0.5) == "0.50×"``."""
    number = as_number(value)
    return NA if number is None else f"{number:.2f}×"


_FORMATTERS = {
    "bytes": format_bytes,
    "seconds": format_seconds,
    "joules": format_joules,
    "percent": format_percent,
    "loss": format_loss,
    "ratio": format_ratio,
}


def plural(n: int, word: str) -> str:
    """``1 cell``, ``3 cells``: a count and its noun, which takes an ``s`` unless the count is one."""
    return f"{n} {word}{'s' * (n != 1)}"


def format_value(value: object, unit: str) -> str:
    """Format ``value`` for a unit name used by metrics (``bytes``, ``seconds``, ``joules``, ``percent``, ...).

    Args:
        value: a raw number, or ``None``.
        unit: one of ``bytes``, ``seconds``, ``joules``, ``percent``, ``loss``, ``ratio``;
            anything else prints like a loss, with four significant digits.

    Returns:
        The text, :data:`NA` where there is no finite number.
    """
    return _FORMATTERS.get(unit, format_loss)(value)


def _in_largest_unit(number: float, units: tuple[tuple[str, float], ...]) -> str | None:
    """``number`` in the first of ``units`` (suffix, scale; largest first) it reaches, three digits; else ``None``."""
    for suffix, scale in units:
        if abs(number) >= scale:
            return f"{_three_digits(number / scale)}{suffix}"
    return None


def _three_digits(number: float) -> str:
    # 3 significant digits without scientific notation: 1.23, 12.3, 123.
    if abs(number) >= 100:
        return f"{number:.0f}"
    if abs(number) >= 10:
        return f"{number:.1f}"
    return f"{number:.2f}"
