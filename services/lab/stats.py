"""Small statistics for the lab: a least-squares line and medians.

Pure functions on plain lists so they are unit-tested directly; the lab's numbers are few
(a dozen points), so no numpy is needed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LineFit:
    slope: float
    intercept: float
    r2: float

    def predict(self, x: float) -> float:
        return self.slope * x + self.intercept


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LineFit:
    """Ordinary least squares y = slope * x + intercept, with the coefficient of determination.

    r2 = 1 - SS_res / SS_tot. If every y is the same the line explains it perfectly (r2 = 1).
    Raises ValueError when the slope is undefined (fewer than two distinct x values).
    """
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    if len(set(xs)) < 2:
        raise ValueError("need at least two distinct x values to fit a line")
    slope, intercept = statistics.linear_regression(xs, ys)
    mean_y = statistics.fmean(ys)
    ss_tot = sum((y - mean_y) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 if ss_tot == 0 else 1.0 - ss_res / ss_tot
    return LineFit(slope=slope, intercept=intercept, r2=r2)


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that exist; None when there are none (e.g. no first sentence)."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else None
