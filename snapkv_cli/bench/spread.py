"""Median and interquartile range of repeated measurements (quartiles by the inclusive method).

With 5 repeats the quartiles are the 2nd and 4th values in order: a single outlier moves neither the median nor
the interquartile range.
"""

from __future__ import annotations

import statistics


def spread(values: list[float], digits: int = 4) -> dict:
    """``{"median", "q1", "q3", "n"}`` of ``values``, rounded to ``digits`` decimals."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        q1 = median = q3 = values[0]
    else:
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": round(median, digits), "q1": round(q1, digits), "q3": round(q3, digits), "n": len(values)}
