"""Java's text forms of floating-point numbers: ``Double.toString`` and ``Float.toString``.

Why this exists: Google's connectors turn numbers into text with Java's ``toString`` (the Lite
sink encodes a FLOAT32/FLOAT64 key, value or header as ``Double.toString(x.doubleValue())``; the
Pub/Sub sink puts numbers into attributes). Python's ``repr`` differs in layout (``1e+16`` vs
``1.0E16``, ``1e-05`` vs ``1.0E-5``, ``10000000.0`` vs ``1.0E7``) and, for a few values, in digits
(``5e-324`` vs ``4.9E-324``).

The digits follow the JDK 19+ specification (JDK-4511638, Raffaello Giulietti's algorithm), which
is also what JDK 21/25 print: among all decimals that round to ``x``, take those of minimal length
``m`` (when ``m == 1``, those of length 1 or 2) and pick the one closest to ``x``, a tie going to
the even last digit. JDK 17 and older sometimes print a longer or a different decimal: for
``1e23`` they print ``9.999999999999999E22`` (JDK 19+: ``1.0E23``), for ``2**-44``
``5.6843418860808015E-14`` (``5.684341886080802E-14``), and many subnormals and float32 values
differ (``Float.toString`` of ``0xd8f16adf``: ``-2.12353048E15`` vs ``-2.1235305E15``). A connector
running on an old JVM can therefore differ from this module for such values; common values (as
``1.100000023841858``, ``2.5``, ``1.0E7``) print the same on every JDK.

Layout (``Double.toString`` javadoc): ``NaN``, ``Infinity``, ``-Infinity``, ``0.0``, ``-0.0``;
plain ``ddd.ddd`` with at least one fractional digit when ``1e-3 <= |x| < 1e7``; otherwise
computerized scientific notation ``d.dddE±n`` (``E-5``, ``E16``) with at least one fractional digit.

Pure functions, no dependencies beyond the standard library.
"""

from __future__ import annotations

import math
import struct

__all__ = ["java_double_to_string", "java_float_to_string", "to_float32"]


def to_float32(x: float) -> float:
    """``(double) (float) x``: round to the nearest float32, overflowing to ±Infinity like Java."""
    try:
        return float(struct.unpack(">f", struct.pack(">f", x))[0])
    except OverflowError:  # CPython raises only when the rounded value is infinite
        return math.copysign(math.inf, x)


def java_double_to_string(x: float) -> str:
    """Java's ``Double.toString(x)``: ``2.5``, ``1.0E7``, ``1.100000023841858``, ``4.9E-324``."""
    x = float(x)
    special = _special(x)
    if special is not None:
        return special
    coeff, scale = _repr_decimal(abs(x))
    if _ndigits(coeff) < 2:
        # Python's repr found a one-digit decimal; Java then prefers the closest decimal of length
        # 1 or 2 (e.g. MIN_VALUE is 4.9E-324, not 5E-324), which needs the exact search.
        coeff, scale = _shortest_decimal(*_decompose(x, single=False))
    return _layout(x < 0, coeff, scale)


def java_float_to_string(x: float) -> str:
    """Java's ``Float.toString((float) x)``: ``1.1``, ``1.0E10``, ``1.4E-45``, ``3.4028235E38``."""
    x = to_float32(float(x))
    special = _special(x)
    if special is not None:
        return special
    return _layout(x < 0, *_shortest_decimal(*_decompose(x, single=True)))


# ----------------------------------------------------------------------------------------------
# Internals
# ----------------------------------------------------------------------------------------------


def _special(x: float) -> str | None:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    return None


def _ndigits(n: int) -> int:
    return len(str(n))


def _repr_decimal(ax: float) -> tuple[int, int]:
    """``(c, s)`` with ``ax == c * 10**s`` as decimals, from Python's shortest round-trip ``repr``.

    ``repr`` (David Gay's shortest mode) returns the shortest digits that round-trip and, among
    those, the closest to ``ax`` — the same choice as Java whenever at least two digits are needed.
    """
    mantissa, _, exp = repr(ax).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    stripped = digits.rstrip("0")
    scale = (int(exp) if exp else 0) - len(frac_part) + len(digits) - len(stripped)
    return int(stripped), scale


def _decompose(x: float, single: bool) -> tuple[int, int, bool]:
    """``|x| = m * 2**e`` for a finite non-zero double (or float32 value); also whether the gap to
    the next smaller value is half the gap to the next larger one (x is a power of two that is not
    the smallest normal), which makes the rounding interval asymmetric."""
    if single:
        bits = struct.unpack(">I", struct.pack(">f", x))[0] & 0x7FFFFFFF
        frac_bits, bias_shift, frac_width = bits & 0x7FFFFF, bits >> 23, 23
        min_e = -149
    else:
        bits = struct.unpack(">Q", struct.pack(">d", x))[0] & 0x7FFFFFFFFFFFFFFF
        frac_bits, bias_shift, frac_width = bits & 0xFFFFFFFFFFFFF, bits >> 52, 52
        min_e = -1074
    if bias_shift == 0:  # subnormal
        return frac_bits, min_e, False
    m = frac_bits | (1 << frac_width)
    e = min_e + bias_shift - 1
    return m, e, frac_bits == 0 and bias_shift > 1


def _shortest_decimal(m: int, e: int, halved: bool) -> tuple[int, int]:
    """Java's decimal choice for ``m * 2**e`` as ``(c, s)`` meaning ``c * 10**s`` (exact arithmetic).

    The value rounds from the interval between the midpoints to its neighbours; the endpoints
    belong to it only when ``m`` is even (round half to even). Everything is compared as integers:
    binary quantities in units of ``2**(e-2)`` (so the midpoints are whole), a decimal ``c * 10**s``
    and a binary ``t * 2**(e-2)`` become ``c * left`` and ``t * right`` for a common scaling.
    """
    e2 = e - 2
    x_units = 4 * m
    lo_units = x_units - (1 if halved else 2)
    hi_units = x_units + 2
    inclusive = m % 2 == 0

    def scaling(s: int) -> tuple[int, int]:
        left = 10**s if s > 0 else 1
        right = 10**-s if s < 0 else 1
        if e2 < 0:
            left <<= -e2
        else:
            right <<= e2
        return left, right

    # k = floor(log10(value)), estimated in floating point and corrected exactly.
    k = math.floor(math.log10(m) + e * math.log10(2))
    while True:
        left, right = scaling(k)
        if left > x_units * right:
            k -= 1
            continue
        left, right = scaling(k + 1)
        if left <= x_units * right:
            k += 1
            continue
        break

    length = 1
    while True:
        scale = k - length + 1  # decimals of `length` digits near the value: multiples of 10**scale
        left, right = scaling(scale)
        x, lo, hi = x_units * right, lo_units * right, hi_units * right
        below = x // left
        hits = []
        for c in (below, below + 1):
            v = c * left
            if (lo <= v <= hi) if inclusive else (lo < v < hi):
                hits.append((abs(v - x), c % 2, c))  # closest first, then the even last digit
        if hits and length >= 2:
            best = min(hits)[2]
            while best % 10 == 0:
                best //= 10
                scale += 1
            return best, scale
        # A one-digit hit is re-decided among the two-digit decimals (which include it).
        length = 2 if hits else length + 1


def _layout(negative: bool, coeff: int, scale: int) -> str:
    """Java's layout of ``±coeff * 10**scale`` (``coeff`` without trailing zeros)."""
    digits = str(coeff)
    exponent = scale + len(digits) - 1  # value = d.ddd * 10**exponent
    sign = "-" if negative else ""
    if -3 <= exponent < 7:
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1 :] or "0"
        else:
            whole, fraction = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"
