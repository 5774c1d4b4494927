"""Plain JSON values from the library's objects, for storing and printing them.

Used by ``storage`` (every JSON column) and by the evaluation command line's ``--json`` output, so
both write the same values for the same object.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any


def to_jsonable(value: Any) -> Any:
    """Plain JSON values from dataclasses, tuples, numpy/torch values, datetimes.

    Non-finite floats become None: JSON has no NaN/Infinity, and PostgreSQL
    rejects them (e.g. a verification ratio of inf when p_S0(y) underflows to 0).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = value.to_dict() if hasattr(value, "to_dict") else dataclasses.asdict(value)
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(value.tolist())
    if isinstance(value, (set, frozenset)):
        return [to_jsonable(item) for item in sorted(value, key=repr)]
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item) for item in value]
    raise TypeError(f"cannot store a {type(value).__name__} as JSON")
