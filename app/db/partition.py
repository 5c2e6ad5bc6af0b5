"""Hash partitions on Postgres, on demand (`rollscope db partition`): `rollout` and the rollups
(`step_rollup`, `task_rollup`, `run_task_rollup`) by run (`run_id`), `node` and `finding` by
their rollout (`rollout_pk`: neither has a run column to split on; a rollout's nodes and findings
stay together, the group findings, `rollout_pk` NULL, share one partition).

Not a migration of the Alembic chain: the schema keeps its revision (`alembic_version` is not
touched, so `app.db.migrate.at_head` still holds and later migrations run on the partitioned
tables: ADD COLUMN and CREATE INDEX propagate to every partition; see docs/deploy.md for what a
later migration must not do). Each table is converted in one transaction, with its data, its
indexes, its check constraints, defaults and sequences, and the foreign keys it holds. What
Postgres requires of a partitioned table changes three things (`convert`):

- every primary key and unique index must contain the partition key, so the key is appended
  where it is missing: `rollout` (pk, run_id), `node` (pk, rollout_pk), the rollups (pk, run_id);
  `finding`'s `rollout_pk` may be NULL, so its primary key becomes the unique index
  `finding_pkey` on (pk, rollout_pk). Every `pk` is still unique (one sequence hands them out).
- a foreign key can only reference a unique constraint, and `rollout.pk` alone no longer is one:
  the foreign keys to `rollout.pk` (rollout_detail, reward_component, node, finding,
  rollout_signature, search_doc) are dropped, and their ON DELETE CASCADE is kept by one
  statement trigger on `rollout` (`rollscope_cascade`) that deletes the children of the deleted
  rows. Inserting a child of a rollout that does not exist is no longer refused by the database
  (the app writes both in one transaction).
- statistics of a partitioned parent are gathered only by ANALYZE, which `partition` runs.

Idempotent: a table already partitioned is left as it is (whatever its number of partitions).
Raises NotPartitionable on SQLite, which has no partitions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa

from app.db.migrate import LOCK_KEY

# table → partition key, in the order converted (rollout first: its children's foreign keys go with it)
TABLES: dict[str, str] = {"rollout": "run_id", "node": "rollout_pk", "finding": "rollout_pk",
                          "step_rollup": "run_id", "task_rollup": "run_id", "run_task_rollup": "run_id"}
DEFAULT_PARTITIONS = 16
CASCADE_TRIGGER = "rollscope_cascade"


class NotPartitionable(Exception):
    """The database cannot be partitioned (SQLite), or the number of partitions is out of range."""


@dataclass(frozen=True)
class Converted:
    """What `partition` did to one table: `partitions` it has now, `rows` copied (0 when it was
    partitioned already), `dropped_fks` the foreign keys to it that a trigger replaced."""

    table: str
    key: str
    partitions: int
    rows: int
    already: bool
    dropped_fks: tuple[str, ...] = ()


def partition(engine: sa.Engine, partitions: int = DEFAULT_PARTITIONS) -> list[Converted]:
    """Partition every table of TABLES that is not yet partitioned into `partitions` hash
    partitions (2..1024), one transaction per table, under the migrations' advisory lock (a
    migration or another conversion waits). Returns one Converted per table, in TABLES order.
    Raises NotPartitionable on SQLite or for a count out of range."""
    if engine.dialect.name != "postgresql":
        raise NotPartitionable(f"partitions need Postgres; {engine.url.render_as_string()} is "
                               f"{engine.dialect.name} (nothing was changed)")
    if not 2 <= partitions <= 1024:
        raise NotPartitionable(f"--partitions {partitions}: give 2 to 1024")
    out = []
    for table, key in TABLES.items():
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
            out.append(convert(conn, table, key, partitions))
    return out


def partition_count(conn: sa.Connection, table: str) -> int | None:
    """The number of partitions of `table`, or None when it is a plain table."""
    kind = conn.execute(sa.text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:t)"), {"t": table}).scalar()
    if kind != "p":
        return None
    return conn.execute(sa.text("SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass(:t)"),
                        {"t": table}).scalar()


def convert(conn: sa.Connection, table: str, key: str, partitions: int) -> Converted:
    """Replace the plain table `table` by one hash-partitioned on `key`, in the caller's
    transaction (see the module's docstring for what changes); a partitioned one is left alone."""
    have = partition_count(conn, table)
    if have is not None:
        return Converted(table, key, have, 0, already=True)
    q = lambda sql, **kw: conn.execute(sa.text(sql), kw).all()  # noqa: E731
    oid = conn.execute(sa.text("SELECT to_regclass(:t)::oid"), {"t": table}).scalar()
    if oid is None:
        raise NotPartitionable(f"table {table} does not exist: is the database migrated?")
    key_nullable = q("SELECT NOT attnotnull FROM pg_attribute WHERE attrelid = :o AND attname = :k", o=oid, k=key)[0][0]
    indexes = q("""SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisunique, i.indisprimary, con.conname,
                          ARRAY(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(n, o)
                                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n ORDER BY k.o)
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid
                   WHERE i.indrelid = :o ORDER BY c.relname""", o=oid)
    outgoing = q("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = :o AND contype = 'f'",
                 o=oid)
    incoming = q("""SELECT con.conname, con.conrelid::regclass::text, a.attname, p.attname, con.confdeltype
                    FROM pg_constraint con
                    JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
                    JOIN pg_attribute p ON p.attrelid = con.confrelid AND p.attnum = con.confkey[1]
                    WHERE con.confrelid = :o AND con.contype = 'f' AND con.conrelid <> :o""", o=oid)
    sequences = q("""SELECT a.attname, pg_get_serial_sequence(:t, a.attname) FROM pg_attribute a
                     WHERE a.attrelid = :o AND a.attnum > 0 AND NOT a.attisdropped
                       AND pg_get_serial_sequence(:t, a.attname) IS NOT NULL""", t=table, o=oid)

    new = f"{table}__partitioned"
    for name, child, *_ in incoming:
        conn.execute(sa.text(f'ALTER TABLE {child} DROP CONSTRAINT "{name}"'))
    conn.execute(sa.text(f"CREATE TABLE {new} (LIKE {table} INCLUDING ALL EXCLUDING INDEXES) "
                         f"PARTITION BY HASH ({key})"))
    for r in range(partitions):
        conn.execute(sa.text(f"CREATE TABLE {table}_p{r} PARTITION OF {new} "
                             f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {r})"))
    rows = conn.execute(sa.text(f"INSERT INTO {new} SELECT * FROM {table}")).rowcount
    for _, seq in sequences:
        conn.execute(sa.text(f"ALTER SEQUENCE {seq} OWNED BY NONE"))
    conn.execute(sa.text(f"DROP TABLE {table}"))
    conn.execute(sa.text(f"ALTER TABLE {new} RENAME TO {table}"))
    for column, seq in sequences:
        conn.execute(sa.text(f"ALTER SEQUENCE {seq} OWNED BY {table}.{column}"))
    for name, definition, unique, primary, constraint, columns in indexes:
        conn.execute(sa.text(_index_sql(table, key, key_nullable, name, definition, unique, primary, constraint,
                                        columns)))
    for name, definition in outgoing:
        conn.execute(sa.text(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}'))
    _cascade_trigger(conn, table, [(child, col, ref) for _, child, col, ref, action in incoming if action == "c"])
    conn.execute(sa.text(f"ANALYZE {table}"))
    return Converted(table, key, partitions, rows, already=False, dropped_fks=tuple(f"{child}.{col}" for _, child, col,
                                                                                     *_ in incoming))


def _index_sql(table: str, key: str, key_nullable: bool, name: str, definition: str, unique: bool, primary: bool,
               constraint: str | None, columns: list[str]) -> str:
    """The statement that makes index `name` again on the partitioned `table`: as it was, with
    `key` appended to a primary key or unique index that lacks it. A primary key whose partition
    key may be NULL becomes a unique index of the same name."""
    if not unique or key in columns:
        if primary or constraint:
            kind = "PRIMARY KEY" if primary else "UNIQUE"
            return f'ALTER TABLE {table} ADD CONSTRAINT "{constraint or name}" {kind} ({", ".join(columns)})'
        return definition
    if (primary or constraint) and not (primary and key_nullable):  # constraints hold columns only
        kind = "PRIMARY KEY" if primary else "UNIQUE"
        return f'ALTER TABLE {table} ADD CONSTRAINT "{constraint or name}" {kind} ({", ".join([*columns, key])})'
    # a unique index (or a primary key on a nullable key): the key goes after the last indexed column
    head, sep, rest = definition.partition(" USING btree (")
    if not sep:
        raise NotPartitionable(f"index {name} of {table}: cannot add the partition key to {definition!r}")
    depth, end = 1, 0
    for end, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            break
    return f"{head}{sep}{rest[:end]}, {key}{rest[end:]}"


_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


def _cascade_trigger(conn: sa.Connection, table: str, children: list[tuple[str, str, str]]) -> None:
    """ON DELETE CASCADE of the dropped foreign keys to `table`: one AFTER DELETE statement
    trigger that deletes, in each (child, column, referenced column), the rows that named a
    deleted row (`children` empty: nothing)."""
    if not children:
        return
    for part in (table, *(x for c in children for x in c)):
        if not _IDENT.match(part):
            raise NotPartitionable(f"unexpected name {part!r} in a foreign key to {table}")
    body = "\n".join(f"  DELETE FROM {child} WHERE {col} IN (SELECT {ref} FROM gone);" for child, col, ref in children)
    conn.execute(sa.text(f"""CREATE FUNCTION {CASCADE_TRIGGER}_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM gone) THEN RETURN NULL; END IF;
{body}
  RETURN NULL;
END $$"""))
    conn.execute(sa.text(f"CREATE TRIGGER {CASCADE_TRIGGER} AFTER DELETE ON {table} REFERENCING OLD TABLE AS gone "
                         f"FOR EACH STATEMENT EXECUTE FUNCTION {CASCADE_TRIGGER}_{table}()"))
