"""One fold per event, written two ways: as SQL on the read model's table (the projection in
the append transaction, a rebuild) and into rows held in memory (the audit's refold, which
writes each row once at the end instead of one statement per event).

A read model's module says, per event class, what the event does to its table as a ``Change``
of ``projections.changes`` (or as the values of a ``Shape``, which each writer here turns into
code once: the frequent events). ``FoldedProjection`` turns those folds into both writers,
so adding a column is one edit to the DDL and one to the fold, and the two can never fold
differently (``tests/unit/test_memory_folds.py`` folds a log of
every event type both ways and compares the tables).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast

from engine.events import Event, RecordedEvent, event_type_of
from engine.projection import Folder, Projection
from projections.changes import (
    OPS,
    Appended,
    Change,
    Delete,
    Fold,
    Insert,
    Put,
    Shaped,
    Update,
)

# -- the SQL writer -------------------------------------------------------------------------


class SqlTable:
    """Writes changes to one table as SQL, each statement's text made once per shape of
    change (kind, columns, and which values are ops) and kept."""

    def __init__(self, name: str, key_columns: tuple[str, ...]) -> None:
        self.name, self.key_columns = name, key_columns
        self.single_key = len(key_columns) == 1
        self.where = " AND ".join(f"{c} = ?" for c in key_columns)
        self._text: dict[Any, str] = {}

    def write(self, cursor: Any, change: Change) -> None:
        if change is None:
            return
        key = (change.key,) if self.single_key else tuple(change.key)
        kind = type(change)
        if kind is Delete:
            cursor.execute(self._statement((Delete,)), key)
            return
        columns, values = change.columns, change.values  # type: ignore[union-attr]
        if kind is not Update:
            cursor.execute(self._statement((kind, columns)), (*key, *values))
            return
        if not OPS.isdisjoint(map(type, values)):
            values = tuple(
                self._current(cursor, key, c, v) for c, v in zip(columns, values, strict=True)
            )
            ops = tuple(type(v) if type(v) in OPS else None for v in values)
            params = tuple(v.param if type(v) in OPS else v for v in values)
            cursor.execute(self._statement((Update, columns, ops)), (*params, *key))
            return
        cursor.execute(self._statement((Update, columns, None)), (*values, *key))

    def shaped(self, fold: Shaped) -> Callable[[Any, RecordedEvent, str], None]:
        """``fold``'s writer: its one statement, made once, and the fold's tuple as the
        parameters (an update's key, which comes first, moved to its WHERE clause)."""
        values, width = fold.values, len(self.key_columns)
        if fold.kind is Delete:
            text = self._statement((Delete,))
        elif fold.kind is Update:
            ops = tuple(fold.shape.ops.get(c) for c in fold.shape.columns)
            text = self._statement((Update, fold.shape.columns, ops))

            def update(cursor: Any, e: RecordedEvent, entity: str) -> None:
                found = values(e, entity)
                if found is not None:
                    cursor.execute(text, found[width:] + found[:width])

            return update
        else:
            text = self._statement((fold.kind, fold.shape.columns))

        def write(cursor: Any, e: RecordedEvent, entity: str) -> None:
            found = values(e, entity)
            if found is not None:
                cursor.execute(text, found)

        return write

    def _current(self, cursor: Any, key: tuple[Any, ...], column: str, value: Any) -> Any:
        """An ``Appended`` as the column's whole new text: SQL reads the current one first."""
        if type(value) is not Appended:
            return value
        found = cursor.execute(f"SELECT {column} FROM {self.name} WHERE {self.where}", key)
        rows = found.fetchall()
        if not rows:
            raise LookupError(f"no {self.name} row {key!r} to append to")
        return value.apply(rows[0][0])

    def _statement(self, shape: tuple[Any, ...]) -> str:
        text = self._text.get(shape)
        if text is None:
            text = self._text[shape] = self._make(shape)
        return text

    def _make(self, shape: tuple[Any, ...]) -> str:
        kind = shape[0]
        if kind is Delete:
            return f"DELETE FROM {self.name} WHERE {self.where}"
        if kind is Update:
            _, columns, ops = shape
            sets = [
                op.sql(column) if op is not None else f"{column} = ?"
                for column, op in zip(columns, ops or (None,) * len(columns), strict=True)
            ]
            return f"UPDATE {self.name} SET {', '.join(sets)} WHERE {self.where}"
        columns = (*self.key_columns, *shape[1])
        verb = "INSERT OR REPLACE" if kind is Put else "INSERT"
        marks = ", ".join("?" * len(columns))
        return f"{verb} INTO {self.name} ({', '.join(columns)}) VALUES ({marks})"


# -- the in-memory writer -------------------------------------------------------------------


def _default(sql: str | None) -> Any:
    """A column's DEFAULT as PRAGMA table_info reports it (SQL text), as a value."""
    if sql is None:
        return None
    if sql.startswith("'"):
        return sql[1:-1].replace("''", "'")
    return int(sql)


class MemoryTable:
    """One table's rows by primary key (a tuple for several columns), as lists in the table's
    column order, written into the table once by ``finish``."""

    def __init__(self, cursor: Any, name: str, key_columns: tuple[str, ...]) -> None:
        self.cursor, self.name, self.key_columns = cursor, name, key_columns
        info = cursor.execute(f"PRAGMA table_info({name})").fetchall()
        self.at = {row[1]: i for i, row in enumerate(info)}
        self.blank = [_default(row[4]) for row in info]
        self._places: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._rows_of: dict[tuple[str, ...], Callable[[tuple[Any, ...]], tuple[Any, ...]]] = {}
        self.rows: dict[Any, list[Any]] = {}

    def _row_of(self, columns: tuple[str, ...]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
        """A new row from a key and values for ``columns``: picks, in the table's column order,
        from ``(*key, *values, *blank)`` in one step."""
        picked = {c: i for i, c in enumerate((*self.key_columns, *columns))}
        width = len(picked)
        return operator.itemgetter(*(picked.get(c, width + i) for i, c in enumerate(self.at)))

    def write(self, change: Change) -> None:
        # Compared by type, not isinstance, new rows built in one step, and ops told apart in
        # one pass: the audit refolds a million events through here.
        if change is None:
            return
        rows = self.rows
        key, kind = change.key, type(change)
        if kind is Delete:
            rows.pop(key, None)
            return
        columns, values = change.columns, change.values  # type: ignore[union-attr]
        if kind is Update:
            row = rows.get(key)
            if row is None:
                if any(type(v) is Appended for v in values):
                    raise LookupError(f"no {self.name} row {key!r} to append to")
                return
            places = self._places.get(columns)
            if places is None:
                places = self._places[columns] = tuple(self.at[c] for c in columns)
            if OPS.isdisjoint(map(type, values)):
                for i, value in zip(places, values, strict=True):
                    row[i] = value
            else:
                for i, value in zip(places, values, strict=True):
                    row[i] = value.apply(row[i]) if type(value) in OPS else value
            return
        if kind is Insert and key in rows:
            raise ValueError(f"UNIQUE constraint failed: {self.name} {key!r}")
        row_of = self._rows_of.get(columns)
        if row_of is None:
            row_of = self._rows_of[columns] = self._row_of(columns)
        keys = key if len(self.key_columns) > 1 else (key,)
        rows[key] = list(row_of((*keys, *values, *self.blank)))

    def shaped(self, fold: Shaped) -> Callable[[RecordedEvent, str], None]:
        """``fold``'s writer, generated once: the fold's tuple unpacked straight into the row's
        places (an op's operand into a local the op's statement then uses), or into a copy of the
        blank row for a new row, as ``write`` would do with its change."""
        width = len(self.key_columns)
        key = "found[0]" if width == 1 else f"found[:{width}]"
        body = ["found = values(e, entity)", "if found is None:", "    return"]
        if fold.kind is Delete:
            body.append(f"rows.pop({key}, None)")
        elif fold.kind is Update:
            shape = fold.shape
            targets = [f"_{i}" for i in range(width)]
            ops = []
            for i, column in enumerate(shape.columns):
                place = f"row[{self.at[column]}]"
                if column in shape.ops:
                    targets.append(f"op{i}")
                    ops.append(shape.ops[column].code(place, f"op{i}"))
                else:
                    targets.append(place)
            body += [f"row = rows.get({key})", "if row is None:", "    return"]
            body += [f"{', '.join(targets)} = found", *ops]
        else:
            body += [f"key = {key}"]
            if fold.kind is Insert:
                body += ["if key in rows:", "    raise ValueError(f'UNIQUE constraint failed:"
                         f" {self.name} {{key!r}}')"]  # fmt: skip
            # A copy of the blank row with the fold's tuple unpacked into its places: a
            # third of what picking the row from the tuple and the blank one took (measured
            # on the jobs table's 62 columns). The blank values are immutable: a shallow copy.
            places = [self.at[c] for c in (*self.key_columns, *fold.shape.columns)]
            body += ["row = blank.copy()", f"{', '.join(f'row[{i}]' for i in places)} = found"]
            body.append("rows[key] = row")
        # What the body uses comes in as defaults: locals, the quickest names to look up.
        names = "values=values, rows=rows, blank=blank"
        code = f"def write(e, entity, {names}):\n" + "".join(f"    {line}\n" for line in body)
        scope = {"values": fold.values, "rows": self.rows, "blank": list(self.blank)}
        exec(compile(code, f"<{self.name} {fold.__name__}>", "exec"), scope)
        # Taken out of the scope it was defined in, which is its globals: left there, the two
        # would hold each other, and the table's rows, until the next cycle collection.
        return cast(Callable[[RecordedEvent, str], None], scope.pop("write"))

    def finish(self) -> None:
        marks = ", ".join("?" * len(self.blank))
        self.cursor.executemany(f"INSERT INTO {self.name} VALUES ({marks})", self.rows.values())


# -- the projection -------------------------------------------------------------------------


class FoldedProjection(Projection):
    """A read model of one table whose every event is a ``Fold`` in ``folds``: ``apply`` and
    ``folder`` write the changes as SQL, ``memory_folder`` into a ``MemoryTable`` (a
    ``Shaped`` fold through the code each writer makes for it)."""

    key: ClassVar[tuple[str, ...]]
    folds: ClassVar[Mapping[type[Event], Fold]]

    def __init__(self) -> None:
        self._folds: dict[str, Fold] = {event_type_of(c): f for c, f in self.folds.items()}
        (self._table,) = self.tables
        sql = self._sql = SqlTable(self._table, self.key)

        def route(fold: Fold) -> Callable[[Any, RecordedEvent, str], None]:
            if type(fold) is Shaped:
                return sql.shaped(fold)
            return lambda cursor, e, entity: sql.write(cursor, fold(e, entity))

        self._routes = {event_type: route(fold) for event_type, fold in self._folds.items()}

    def handled_events(self) -> dict[str, type[Event]] | None:
        return {event_type_of(c): c for c in self.folds}

    def apply(self, cursor: Any, event: RecordedEvent) -> None:
        route = self._routes.get(event.event_type)
        if route is not None:
            route(cursor, event, event.stream_id.partition(":")[2])

    def folder(self, cursor: Any) -> Folder:
        return Folder(lambda e: self.apply(cursor, e), lambda: None, frozenset(self._folds))

    def memory_folder(self, cursor: Any) -> Folder:
        table = MemoryTable(cursor, self._table, self.key)
        write = table.write

        def route(fold: Fold) -> Callable[[RecordedEvent, str], None]:
            if type(fold) is Shaped:
                return table.shaped(fold)
            return lambda e, entity: write(fold(e, entity))

        routes = {event_type: route(fold) for event_type, fold in self._folds.items()}

        def feed(e: RecordedEvent) -> None:
            fold = routes.get(e.event_type)
            if fold is not None:
                fold(e, e.stream_id.partition(":")[2])

        return Folder(
            feed, table.finish, frozenset(routes), lambda: {table.name: table.rows}, routes
        )
