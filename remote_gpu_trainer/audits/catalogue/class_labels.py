"""Class labels as VERIFY compares them (V11, V21, V22, V23, V29's pooled metrics): target 3, 3.0 and "3" are
one class, the text that also names a `prob_3` column.

A column is labelled per distinct value (pandas' factorize), not per item: 1,000 items of ten classes cost ten
calls. Object columns keep the call per item, as their equal values may label differently (True == 1).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def label(value: Any) -> str:
    """A class label as text, so target 3, 3.0 and "3" are one class (and match column `prob_3`)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def labels(values: pd.Series) -> list[str]:
    """`label` of every value (none missing), in order."""
    import numpy as np
    import pandas as pd

    if values.dtype == object:
        return [label(v) for v in values.tolist()]
    codes, uniques = pd.factorize(values)
    return np.asarray([label(u) for u in uniques.tolist()] or [""], dtype=object)[codes].tolist()


def label_counts(values: pd.Series) -> Counter[str]:
    """How many values carry each label (none missing), in order of first appearance: Counter(labels(values))
    without a string per item."""
    import numpy as np
    import pandas as pd

    if values.dtype == object:
        return Counter(labels(values))
    codes, uniques = pd.factorize(values)
    counts: Counter[str] = Counter()
    for value, count in zip(uniques.tolist(), np.bincount(codes, minlength=len(uniques)).tolist(), strict=True):
        counts[label(value)] += count
    return counts
