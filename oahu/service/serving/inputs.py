"""What the HTTP API accepts: one definition of each kind of value and the request bodies built
from them, so every endpoint refuses the same inputs the same way, with a 422 naming the field.

- An item id (:data:`ItemId`) is a non-empty string of at most ``MAX_ID_LENGTH`` characters
  without control characters, or an int64 integer; never a boolean. It is normalised to the
  string the item store keys it by (``17`` and ``"17"`` are one item).
- Numbers are strict: booleans and strings are not numbers, and every float is finite
  (:data:`FiniteFloat`); a feature (:data:`Feature`) also fits float32, what the model reads.
- An integer (an id, a label, ``k``, ``batch``, ``seed``) may be written ``17`` or ``17.0``:
  JSON has one kind of number and JSON Schema's ``integer`` admits both, so a client that writes
  ``17.0`` follows the schema; ``17.5`` is refused.
- A label (:data:`Label`) is an int64 other than ``-2^63``, which stores "no label".

Request bodies depend on the served model (features per item) and on ``--max-batch-items``, so
:func:`request_models` makes them per app: the OpenAPI schema then states the exact limits the
server applies (``minItems``/``maxItems``), and the schema and the server agree on what is valid.
FastAPI's OpenAPI models hold numeric bounds as floats, where int64's limits round to ±2^63:
:func:`exact_integer_bounds` writes them back as the integers the server applies.
:class:`SuggestQuery` (``POST /v1/suggest``) depends on neither and is defined once.
"""

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from fastapi.exceptions import RequestValidationError
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    TypeAdapter,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from oahu.active import STRATEGIES as SUGGEST_STRATEGIES
from oahu.connectors.constraint import INT64_MAX, INT64_MIN, MISSING_LABEL

MAX_ID_LENGTH = 256  # characters of a string id
FLOAT32_MAX = float(np.finfo(np.float32).max)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KINDS = {
    bool: "a boolean",
    type(None): "null",
    float: "a number with a fraction",
    list: "an array",
}


def whole(value: Any) -> Any:
    """``value`` as an int when it is a float with no fraction (JSON's ``17.0`` is ``17``);
    anything else unchanged, for the validator that follows to accept or refuse.

    >>> whole(-2222.0), whole(2.5), whole(True), whole(float("inf"))
    (-2222, 2.5, True, inf)
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Whole = BeforeValidator(whole)


def item_id(value: Any) -> str:
    """The store key of an id given through the API (see the module docstring); raises a
    pydantic error (422) otherwise.

    >>> item_id(17), item_id(17.0), item_id("a b"), item_id(-(2**63))
    ('17', '17', 'a b', '-9223372036854775808')
    >>> item_id(True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.PydanticCustomError: an item id is ... not a boolean
    """
    value = whole(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        kind = _KINDS.get(type(value), type(value).__name__)
        raise PydanticCustomError(
            "item_id", "an item id is a non-empty string or an integer, not {kind}", {"kind": kind}
        )
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise PydanticCustomError("item_id", "an integer item id must fit in int64")
        return str(value)
    if not value:
        raise PydanticCustomError("item_id", "an item id must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise PydanticCustomError(
            "item_id",
            "an item id has at most {max} characters, this one {n}",
            {"max": MAX_ID_LENGTH, "n": len(value)},
        )
    if _CONTROL.search(value):
        raise PydanticCustomError("item_id", "an item id must not contain control characters")
    return value


ItemId = Annotated[
    str,
    PlainValidator(item_id),
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_ID_LENGTH,
                    "pattern": "^[^\\u0000-\\u001f\\u007f]*$",
                },
                {"type": "integer", "minimum": INT64_MIN, "exclusiveMaximum": INT64_MAX + 1},
            ],
            "description": f"a string (1 to {MAX_ID_LENGTH} characters, no control characters) "
            'or an int64 integer; 17 and "17" name the same item',
        }
    ),
]
FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Feature = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-FLOAT32_MAX, le=FLOAT32_MAX)]
# The int64 limits are written as ±2^63 (exclusive above): FastAPI's OpenAPI models hold bounds as
# floats, which are exact at ±2^63 but round 2^63 - 1 up to 2^63.
Label = Annotated[int, Field(strict=True, gt=MISSING_LABEL, lt=INT64_MAX + 1), Whole]

_STRICT = ConfigDict(extra="forbid", strict=True)


def invalid(loc: tuple[Any, ...], msg: str) -> RequestValidationError:
    """A 422 naming the offending field of the body, in FastAPI's own format, for what only the
    service's state can tell (an unknown id, a duplicate).

    >>> invalid(("items", 3, "id"), "unknown item id '17'").errors()
    [{'loc': ('body', 'items', 3, 'id'), 'msg': "unknown item id '17'", 'type': 'value_error'}]
    """
    return RequestValidationError([{"loc": ("body", *loc), "msg": msg, "type": "value_error"}])


@dataclass(frozen=True)
class RequestModels:
    """The request bodies of one app (classes made by :func:`request_models`); ``ItemRef`` is
    one item, inline (``x``) or by ``id``, for bodies defined elsewhere."""

    ItemRef: type[BaseModel]
    ItemsQuery: type[BaseModel]
    NeighbourQuery: type[BaseModel]
    VerifyQuery: type[BaseModel]
    AddItems: type[BaseModel]
    RemoveItems: type[BaseModel]


def _one_of_id_or_x(schema: dict[str, Any]) -> None:
    schema["oneOf"] = [{"required": ["id"]}, {"required": ["x"]}]
    for name in ("id", "x"):
        schema["properties"][name].pop("default", None)


def _labels_for_the_gallery(schema: dict[str, Any]) -> None:
    """Items added to the gallery (``gallery`` true, its default) need a label: either
    ``gallery`` is false, or every item has a ``label`` that is not null."""
    schema["anyOf"] = [
        {"properties": {"gallery": {"const": False}}, "required": ["gallery"]},
        {
            "properties": {
                "gallery": {"const": True},
                "items": {
                    "items": {
                        "required": ["label"],
                        "properties": {"label": {"not": {"type": "null"}}},
                    }
                },
            }
        },
    ]


def exact_integer_bounds(schema: Any) -> Any:
    """``schema`` (an OpenAPI document, changed in place) with the bounds of every integer
    schema as inclusive integers: FastAPI's models hold them as floats, where
    ``exclusiveMaximum`` 2^63 reads 9.223372036854776e18 and tools that subtract 1 in floats
    generate 2^63, out of int64.

    >>> exact_integer_bounds({"type": "integer", "exclusiveMaximum": 2.0**63, "minimum": 1.0})
    {'type': 'integer', 'minimum': 1, 'maximum': 9223372036854775807}
    """
    if isinstance(schema, list):
        for value in schema:
            exact_integer_bounds(value)
    elif isinstance(schema, dict):
        if schema.get("type") == "integer":
            for key, step, bound in (
                ("exclusiveMinimum", 1, "minimum"),
                ("exclusiveMaximum", -1, "maximum"),
            ):
                if key in schema:
                    schema[bound] = int(schema.pop(key)) + step
            for key in ("minimum", "maximum"):
                if isinstance(schema.get(key), float):
                    schema[key] = int(schema[key])
        for value in schema.values():
            exact_integer_bounds(value)
    return schema


def request_models(n_features: int, max_items: int) -> RequestModels:
    """Request bodies for a model of ``n_features`` inputs, with at most ``max_items`` items
    (or pairs, or ids) per request.

    >>> m = request_models(n_features=2, max_items=3)
    >>> m.ItemsQuery.model_validate({"items": [{"id": 7}, {"x": [0, 1.5]}]}).items[0].id
    '7'
    >>> m.ItemsQuery.model_validate({"items": [{"id": 7, "x": [0, 1]}]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for ItemsQuery
    items.0
      Value error, give exactly one of 'id' and 'x' [type=value_error, ...
    """
    Features = Annotated[
        list[Feature],
        Field(
            min_length=n_features,
            max_length=n_features,
            description=f"feature vector: {n_features} finite numbers",
        ),
    ]

    def batch(what: str) -> Any:
        return Field(min_length=1, max_length=max_items, description=f"1 to {max_items} {what}")

    class ItemRef(BaseModel):
        """An item given inline (``x``) or by ``id`` (item store, then gallery): exactly one."""

        model_config = ConfigDict(**_STRICT, json_schema_extra=_one_of_id_or_x)
        id: ItemId = Field(None, description="id of a stored item")  # type: ignore[assignment]
        x: Features = Field(None)  # type: ignore[assignment]

        @model_validator(mode="after")
        def _one_of(self) -> "ItemRef":
            if (self.id is None) == (self.x is None):
                raise ValueError("give exactly one of 'id' and 'x'")
            return self

    class ItemsQuery(BaseModel):
        model_config = _STRICT
        items: list[ItemRef] = batch("items")

    class NeighbourQuery(ItemsQuery):
        k: Annotated[int, Field(ge=1, le=1000), Whole] | None = Field(
            None, description="neighbours per depth"
        )

    class Pair(BaseModel):
        model_config = _STRICT
        left: ItemRef
        right: ItemRef

    class VerifyQuery(BaseModel):
        model_config = _STRICT
        pairs: list[Pair] = batch("pairs")
        threshold: FiniteFloat = Field(0.5, description="T of Eq. 26")

    class NewItem(BaseModel):
        model_config = _STRICT
        id: ItemId
        x: Features
        label: Label | None = Field(None, description="class label (int64, not -2^63)")

    class AddItems(BaseModel):
        model_config = ConfigDict(**_STRICT, json_schema_extra=_labels_for_the_gallery)
        items: list[NewItem] = batch("items")
        gallery: bool = Field(True, description="also add the items to the gallery (needs labels)")

    class RemoveItems(BaseModel):
        model_config = _STRICT
        ids: list[ItemId] = batch("ids")

    return RequestModels(ItemRef, ItemsQuery, NeighbourQuery, VerifyQuery, AddItems, RemoveItems)


# ---------------------------------------------------------------------- POST /v1/suggest
MIN_POOL = 3  # a question names three items
MAX_POOL = 50_000  # items in a pool of ids, and items of the gallery a suggestion reads
MAX_SUGGEST_BATCH = 1_000  # questions per request
SUGGEST_KINDS = ("triplet",)
_POOL_TEXT = f'"gallery" or a list of {MIN_POOL} to {MAX_POOL} distinct item ids'


def _pool(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """``"gallery"``, or the ids of the pool as store keys: at least ``MIN_POOL``, each once.

    >>> SuggestQuery.model_validate({"pool": [1, "2", 3], "batch": 2}).pool
    ['1', '2', '3']
    >>> SuggestQuery.model_validate({"pool": [1, "1", 3], "batch": 2})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for SuggestQuery
    pool
      item id '1' is in the pool twice, at positions 0 and 1 [type=pool, ...
    """
    if isinstance(value, str):
        if value == "gallery":
            return value
        raise PydanticCustomError(
            "pool", "the pool is {expected}, not the string '{value}'",
            {"expected": _POOL_TEXT, "value": json_safe(value)},
        )  # fmt: skip
    if isinstance(value, list) and len(value) < MIN_POOL:
        raise PydanticCustomError(
            "pool",
            "the pool is empty"
            if not value
            else "a pool holds at least {min} items (a question names three), this one {n}",
            {"min": MIN_POOL, "n": len(value)},
        )
    ids = handler(value)
    first: dict[str, int] = {}
    for i, key in enumerate(ids):
        if key in first:  # 17 and "17" are one item
            raise PydanticCustomError(
                "pool", "item id '{id}' is in the pool twice, at positions {first} and {i}",
                {"id": json_safe(key), "first": first[key], "i": i},
            )  # fmt: skip
        first[key] = i
    return ids


_ID_LIST = Annotated[list[ItemId], Field(min_length=MIN_POOL, max_length=MAX_POOL)]
Pool = Annotated[
    _ID_LIST,
    WrapValidator(_pool),
    WithJsonSchema(
        {
            "oneOf": [
                {"type": "string", "enum": ["gallery"]},
                {**TypeAdapter(_ID_LIST).json_schema(), "uniqueItems": True},
            ],
            "description": f"the items to ask about: {_POOL_TEXT} (item store, then gallery); "
            f'"gallery": the published gallery (a sample of {MAX_POOL} when larger)',
        }
    ),
]


def _kind(value: Any) -> str:
    if value == "triplet" and isinstance(value, str):
        return value
    raise PydanticCustomError(
        "kind",
        "only triplet questions are suggested for now (quadruplets are planned), not {kind}",
        {"kind": repr(json_safe(value))},
    )


Kind = Annotated[
    str,
    PlainValidator(_kind),
    WithJsonSchema(
        {
            "type": "string",
            "enum": list(SUGGEST_KINDS),
            "description": "the kind of question: triplet (is the anchor more similar to first "
            "or to second?); quadruplets are planned",
        }
    ),
]


class SuggestQuery(BaseModel):
    """Which items to ask about, how many questions, and how to choose them."""

    model_config = _STRICT
    pool: Pool
    batch: Annotated[int, Field(ge=1, le=MAX_SUGGEST_BATCH), Whole] = Field(
        description=f"questions wanted: 1 to {MAX_SUGGEST_BATCH}"
    )
    kind: Kind = "triplet"
    strategy: Literal[SUGGEST_STRATEGIES] = Field(  # type: ignore[valid-type]
        "joint-entropy",
        description="joint-entropy (informative and diverse), uncertainty (most ambiguous "
        "first) or random",
    )
    seed: Annotated[int, Field(ge=0, lt=INT64_MAX + 1), Whole] | None = Field(
        None,
        description="seed of the selection (reported in the answer; drawn at random if absent)",
    )


def json_safe(value: Any, max_chars: int = 80) -> Any:
    """``value`` as a validation error may echo it in JSON: finite, short and plain (NaN and
    infinities as strings, long strings and huge integers cut, containers summarised).

    >>> json_safe(float("nan")), json_safe("x" * 100)[-4:], json_safe(2**200)
    ('nan', 'xxx…', 'an integer of 201 bits')
    >>> json_safe([1, 2]), json_safe({"a": 1})
    ('an array of 2 values', 'an object')
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        in_range = INT64_MIN <= value <= INT64_MAX
        return value if in_range else f"an integer of {value.bit_length()} bits"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return value if len(value) <= max_chars else value[:max_chars] + "…"
    if isinstance(value, list | tuple):
        return f"an array of {len(value)} values"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
