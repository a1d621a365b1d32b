"""Reading the predicted value out of a language model's free-text answer."""

from __future__ import annotations

import math
import re

# A number that stands on its own: not glued to a word before it (the 3 of "cm3", the 1
# of an echoed SMILES "CC1=CC"), with an optional sign, thousands separated by commas
# ("1,234.5"), a decimal part and an exponent ("1e-3"). "−" is the Unicode minus sign.
NUMBER = re.compile(
    r"(?<![\w.])"
    r"(?P<sign>[-+\u2212])?"
    r"(?P<mantissa>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)"
    r"(?P<exponent>[eE][-+\u2212]?\d+)?"
)


def first_number(text: str) -> float | None:
    """The first number written in `text`, or None when it holds no finite number
    (BOOM parsed the first decimal number of Llama's answer)."""
    match = NUMBER.search(text)
    if match is None:
        return None
    sign = "-" if match["sign"] in ("-", "\u2212") else ""
    exponent = (match["exponent"] or "").replace("\u2212", "-")
    value = float(sign + match["mantissa"].replace(",", "") + exponent)
    return value if math.isfinite(value) else None
