"""``_util.validate``: msgspec conversion into typed structs, its errors as ``InvalidInput`` naming the field."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

import msgspec
import pytest

from eidetica._util.validate import field_of, validated
from eidetica.errors import InvalidInput

Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class _Opts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    weight: Unit = 0.5
    pair: Unit | Annotated[tuple[Unit, ...], msgspec.Meta(min_length=2, max_length=2)] = (0.1, 0.1)
    mode: Literal["a", "b"] = "a"
    count: Annotated[int, msgspec.Meta(ge=1)] = 1
    every: dt.timedelta | None = None
    need: str = ""

    def __post_init__(self) -> None:
        if self.every is not None and self.every <= dt.timedelta(0):
            raise InvalidInput("every", "must be positive", self.every)


@pytest.mark.parametrize("raw, field", [
    ({"weight": float("nan")}, "weight"), ({"weight": 1.5}, "weight"), ({"weight": True}, "weight"),
    ({"pair": [0.1, 2]}, "pair"), ({"pair": [0.1]}, "pair"), ({"pair": -1}, "pair"),
    ({"mode": "c"}, "mode"), ({"count": 0}, "count"), ({"count": 2.0}, "count"),
    ({"every": 60}, "every"), ({"every": dt.timedelta(0)}, "every"), ({"nope": 1}, "nope"),
])
def test_a_bad_value_raises_invalid_input_naming_its_field_and_value(raw, field) -> None:
    with pytest.raises(InvalidInput) as e:
        validated(_Opts, raw)
    assert e.value.field == field and e.value.value is raw[field]
    assert "$" not in e.value.problem  # msgspec's path is turned into the field, not repeated


def test_good_values_come_back_typed_and_normalised() -> None:
    out = validated(_Opts, {"weight": 1, "pair": [0.2, 0.3], "every": dt.timedelta(seconds=5)})
    assert out.weight == 1.0 and isinstance(out.weight, float) and out.pair == (0.2, 0.3)
    assert validated(_Opts, {"every": 60.0}, strict=False).every == dt.timedelta(seconds=60)  # the wire's seconds


def test_field_of_reads_the_path_and_the_unknown_field() -> None:
    with pytest.raises(msgspec.ValidationError) as e:
        msgspec.convert({"pair": [0.1, 5]}, _Opts)
    assert field_of(e.value) == "pair"
    assert field_of(msgspec.ValidationError("Expected `int`, got `str`")) == "value"
    with pytest.raises(InvalidInput) as bad:
        validated(_Opts, "not a mapping", name="options")  # type: ignore[arg-type]
    assert bad.value.field == "options"
