"""The log's schema on PostgreSQL, as numbered migrations (the SQLite schema's counterpart).

The tables and their columns are SQLite's (same names, same order, same meaning), so rows
cross the seam unchanged and the audit tools compare logs across backends. What only this
backend has: the ``head`` row every write locks (ADR 0026), and the SQL functions the read
models call by SQLite's names (``engine.storage.postgres.dialect``). Numbers match
``engine.storage.sqlite.schema``: a log at migration N has the same tables on either backend.
"""

from __future__ import annotations

from engine.storage.seam import Migration

_APPEND_ONLY = """
CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'foldline: % is append-only', TG_TABLE_NAME; END $$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
CREATE TRIGGER commands_append_only BEFORE UPDATE OR DELETE ON commands
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
"""

# SQLite's functions that the read models use, in this schema only, with SQLite's compact
# JSON text (no spaces), so a projection's rows are the same on both backends and an audit of
# a copy refolds them byte for byte. ``json_array`` is SQL's own JSON_ARRAY constructor since
# PostgreSQL 16, so the dialect calls ours ``foldline_json_array``.
_SQLITE_FUNCTIONS = """
CREATE FUNCTION instr(haystack text, needle text) RETURNS integer
    LANGUAGE sql IMMUTABLE AS 'SELECT strpos(haystack, needle)';
CREATE FUNCTION foldline_json_array(VARIADIC items text[]) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
SELECT '[' || coalesce(string_agg(to_json(item)::text, ',' ORDER BY n), '') || ']'
FROM unnest(items) WITH ORDINALITY AS u(item, n) $$;
CREATE FUNCTION json_insert(doc text, path text, item text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF path <> '$[#]' THEN
        RAISE EXCEPTION 'foldline: json_insert supports the path $[#] only, got %', path;
    END IF;
    IF btrim(doc) = '[]' THEN
        RETURN '[' || item || ']';
    END IF;
    RETURN left(rtrim(doc), -1) || ',' || item || ']';
END $$;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "events, commands, projection checkpoints and the head row",
        """
        CREATE TABLE schema_migrations (
            number     integer PRIMARY KEY,
            name       text    NOT NULL,
            applied_at text    NOT NULL
        );
        CREATE TABLE events (
            position    bigint  PRIMARY KEY,
            stream_id   text    COLLATE "C" NOT NULL,
            version     bigint  NOT NULL CHECK (version >= 1),
            event_type  text    COLLATE "C" NOT NULL,
            recorded_at text    COLLATE "C" NOT NULL,
            epoch       bigint  NOT NULL CHECK (epoch >= 0),
            command_id  text    COLLATE "C",
            state       text    COLLATE "C" NOT NULL,
            payload     bytea   NOT NULL,
            hash        bytea   NOT NULL,
            UNIQUE (stream_id, version)
        );
        CREATE TABLE commands (
            command_id     text   COLLATE "C" PRIMARY KEY,
            stream_id      text   COLLATE "C" NOT NULL,
            first_position bigint NOT NULL,
            last_position  bigint NOT NULL
        );
        CREATE TABLE projections (
            name       text    COLLATE "C" PRIMARY KEY,
            version    bigint  NOT NULL,
            checkpoint bigint  -- NULL: applied up to the head
        );
        -- The one row every write transaction locks first (ADR 0026): the tail it chains
        -- from, the newest epoch, and a counter that moves with every commit.
        CREATE TABLE head (
            id       integer PRIMARY KEY CHECK (id = 1),
            position bigint  NOT NULL,
            hash     bytea   NOT NULL,
            epoch    bigint  NOT NULL,
            changes  bigint  NOT NULL
        );
        INSERT INTO head VALUES (1, 0, ''::bytea, 0, 0);
        """
        + _APPEND_ONLY
        + _SQLITE_FUNCTIONS,
    ),
    Migration(
        2,
        "stored interior nodes of the Merkle tree",
        """
        CREATE TABLE tree_nodes (
            level integer NOT NULL,
            idx   bigint  NOT NULL,
            hash  bytea   NOT NULL,
            PRIMARY KEY (level, idx)
        );
        """,
    ),
)

LATEST = MIGRATIONS[-1].number
