"""What one event does to a read model's table, as a value: the change vocabulary its folds
return (``projections.fold`` writes the changes as SQL and into rows held in memory).

A read model's module says, per event class, what the event does to its table as a ``Change``
(``Insert``, ``Put``, ``Update``, ``Delete``, or None for nothing) with the new column values;
a value may be an ``Op`` computed from the column's current one. The frequent folds are written
as the values of a ``Shape`` instead, which each writer turns into code once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from engine.events import RecordedEvent

# -- what an event does ---------------------------------------------------------------------


class Op:
    """A column's new value computed from its current one."""

    __slots__ = ()

    @staticmethod
    def sql(column: str) -> str:
        """The SET clause, with one ``?`` for ``param``."""
        raise NotImplementedError

    @staticmethod
    def code(target: str, value: str) -> str:
        """The Python statement that does the same to ``target`` (a row's item), for a
        ``Shape``'s generated writer."""
        raise NotImplementedError

    @property
    def param(self) -> Any:
        raise NotImplementedError

    def apply(self, current: Any) -> Any:
        raise NotImplementedError


class Add(Op):
    """``column + n``."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    @staticmethod
    def sql(column: str) -> str:
        return f"{column} = {column} + ?"

    @staticmethod
    def code(target: str, value: str) -> str:
        return f"{target} += {value}"

    @property
    def param(self) -> Any:
        return self.n

    def apply(self, current: Any) -> Any:
        return current + self.n


class IfNull(Op):
    """``value`` only where the column is still NULL: the first time wins."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    @staticmethod
    def sql(column: str) -> str:
        return f"{column} = coalesce({column}, ?)"

    @staticmethod
    def code(target: str, value: str) -> str:
        return f"if {target} is None:\n        {target} = {value}"

    @property
    def param(self) -> Any:
        return self.value

    def apply(self, current: Any) -> Any:
        return self.value if current is None else current


class Appended(Op):
    """A column of JSON list text with one more item (``json.dumps`` of the whole list). SQL
    reads the current text first: the row must exist (``LookupError`` otherwise)."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item

    def apply(self, current: Any) -> Any:
        return json.dumps([*json.loads(current), self.item])


OPS = frozenset({Add, IfNull, Appended})


class Insert(NamedTuple):
    """A new row: a second one with the same key is an error (the key's UNIQUE constraint)."""

    key: Any
    columns: tuple[str, ...]
    values: tuple[Any, ...]


class Put(NamedTuple):
    """The whole row, replacing any row with the same key."""

    key: Any
    columns: tuple[str, ...]
    values: tuple[Any, ...]


class Update(NamedTuple):
    """These columns of the row with ``key``; nothing when there is no such row."""

    key: Any
    columns: tuple[str, ...]
    values: tuple[Any, ...]


class Delete(NamedTuple):
    key: Any


def insert(key: Any, **values: Any) -> Insert:
    return Insert(key, tuple(values), tuple(values.values()))


def put(key: Any, **values: Any) -> Put:
    return Put(key, tuple(values), tuple(values.values()))


def update(key: Any, **values: Any) -> Update:
    return Update(key, tuple(values), tuple(values.values()))


Values = Callable[[RecordedEvent, str], tuple[Any, ...] | None]
"""A shaped fold's body: the row's key columns, then its shape's values (None: nothing)."""


class Shape:
    """The columns a frequent fold writes, named once beside it, and the ``Op`` (``Add`` or
    ``IfNull``) of each column computed from its current value (named last, as keywords).

    A fold decorated with ``inserts``, ``puts`` or ``updates`` (or ``deletes``) returns one
    tuple: the row's key columns, then the values in this order (an op's column gets the op's
    operand: ``1`` for ``runs=Add``), or None for nothing. Each writer turns such a fold into
    code once, when it is made (one SQL statement; one unpacking straight into the row held in
    memory), so no change object is built and no column is looked at per event: the audit
    refolds millions of them."""

    def __init__(self, *columns: str, **ops: type[Add | IfNull]) -> None:
        for op in ops.values():
            if op not in (Add, IfNull):  # Appended needs the current text read first
                raise TypeError(f"a Shape computes columns with Add or IfNull, not {op}")
        self.columns = (*columns, *ops)
        self.ops = ops

    def inserts(self, values: Values) -> Shaped:
        return Shaped(Insert, self._plain(), values)

    def puts(self, values: Values) -> Shaped:
        return Shaped(Put, self._plain(), values)

    def _plain(self) -> Shape:
        if self.ops:
            raise TypeError("a new row's columns are values, not ops")
        return self

    def updates(self, values: Values) -> Shaped:
        if not self.columns:
            raise TypeError("an update of no column")
        return Shaped(Update, self, values)


def deletes(values: Values) -> Shaped:
    """A fold that returns the key columns of the row to delete (or None for nothing)."""
    return Shaped(Delete, Shape(), values)


class Shaped:
    """A fold written as the values of one ``Shape``: called, it returns its ``Change`` as any
    fold does; the writers run ``values`` through code made for the shape instead."""

    __slots__ = ("__name__", "kind", "shape", "values")

    def __init__(self, kind: type[Any], shape: Shape, values: Values) -> None:
        self.kind, self.shape, self.values = kind, shape, values
        self.__name__ = getattr(values, "__name__", "fold")

    def __call__(self, e: RecordedEvent, entity: str) -> Change:
        found = self.values(e, entity)
        if found is None:
            return None
        columns, ops = self.shape.columns, self.shape.ops
        width = len(found) - len(columns)  # the key's
        key = found[0] if width == 1 else tuple(found[:width])
        if self.kind is Delete:
            return Delete(key)
        values = tuple(
            ops[c](v) if c in ops else v for c, v in zip(columns, found[width:], strict=True)
        )
        change: Change = self.kind(key, columns, values)
        return change


Change = Insert | Put | Update | Delete | None
Fold = Callable[[RecordedEvent, str], Change]  # a plain function or a ``Shaped``
"""What one event does, given the id of the entity its stream belongs to (``j1`` of
``job:j1``)."""


def json_list(items: Any) -> str:
    """A JSON list column's text: ``json.dumps(list(items))``."""
    return json.dumps(list(items)) if items else "[]"
