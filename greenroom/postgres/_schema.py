"""The schema, created and migrated by greenroom (``greenroom db upgrade``), versioned.

Each migration is a list of statements run in one transaction with the version bump, under
an advisory lock, so two daemons upgrading at once do it once. A database newer than this
greenroom is refused (it would not know the tables' meaning).
"""

from __future__ import annotations

from typing import Any

from .._errors import DataError

LOCK_KEY = 0x6772_6E72  # "grnr": the advisory lock of migrations

MIGRATIONS: list[list[str]] = [
    [  # 1: the task graph and the event log
        """CREATE TABLE gr_tasks (
            id text PRIMARY KEY,
            type text NOT NULL,
            status text NOT NULL,
            owner text,
            priority integer NOT NULL,
            ord bigint NOT NULL,
            attempt integer NOT NULL,
            max_attempts integer NOT NULL,
            crashes integer NOT NULL DEFAULT 0,
            unmet integer NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            lease_expires_at double precision,
            last_heartbeat_at double precision,
            doc jsonb NOT NULL
        )""",
        "CREATE INDEX gr_tasks_ready ON gr_tasks (type, priority DESC, ord) "
        "WHERE status = 'PENDING' AND unmet = 0",
        "CREATE INDEX gr_tasks_leases ON gr_tasks (lease_expires_at) WHERE status = 'IN_PROGRESS'",
        "CREATE INDEX gr_tasks_order ON gr_tasks (ord)",
        "CREATE TABLE gr_deps (dep_id text NOT NULL, task_id text NOT NULL, PRIMARY KEY (dep_id, task_id))",
        "CREATE SEQUENCE gr_task_order",
        "CREATE SEQUENCE gr_event_ids",
        """CREATE TABLE gr_events (
            seq bigint PRIMARY KEY DEFAULT nextval('gr_event_ids'),
            xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
            ts double precision NOT NULL,
            type text NOT NULL,
            task_id text,
            agent_id text,
            visibility text NOT NULL,
            payload jsonb NOT NULL
        )""",
    ],
    [  # 2: the chat assistant's data (its own schema: generic table names stay out of the way)
        "CREATE SCHEMA greenroom_chat",
        """CREATE TABLE greenroom_chat.tasks (
            user_id text NOT NULL,
            id bigserial PRIMARY KEY,
            title text NOT NULL,
            description text NOT NULL DEFAULT '',
            completed integer NOT NULL DEFAULT 0,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        )""",
        "CREATE INDEX tasks_by_user ON greenroom_chat.tasks (user_id, id)",
        """CREATE TABLE greenroom_chat.conversations (
            id text PRIMARY KEY,
            user_id text NOT NULL,
            created_at double precision NOT NULL,
            busy_by text,
            busy_until double precision
        )""",
        """CREATE TABLE greenroom_chat.messages (
            conversation_id text NOT NULL REFERENCES greenroom_chat.conversations (id),
            seq integer NOT NULL,
            role text NOT NULL,
            content text NOT NULL,
            tool_calls text,
            created_at double precision NOT NULL,
            PRIMARY KEY (conversation_id, seq)
        )""",
        """CREATE TABLE greenroom_chat.pending_actions (
            conversation_id text PRIMARY KEY REFERENCES greenroom_chat.conversations (id),
            tool_name text NOT NULL,
            parameters text NOT NULL,
            title text NOT NULL,
            expires_at double precision NOT NULL
        )""",
    ],
    [  # 3: indexes a generic plan cannot misuse. A completion's or heartbeat's `status =
        # 'IN_PROGRESS'` matched the old lease index's predicate, and with statistics taken
        # when few tasks ran, the planner scanned every running task (and the index's dead
        # entries) instead of looking the one id up; the lease index is now keyed on the
        # lease alone, and the suspects' check has a (normally empty) index of its own
        "DROP INDEX gr_tasks_leases",
        "CREATE INDEX gr_tasks_leases ON gr_tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL",
        "CREATE INDEX gr_tasks_suspects ON gr_tasks (id) WHERE status = 'IN_PROGRESS' AND crashes > 0",
    ],
    [  # 4: the step journal of durable agent work (a task resumed anywhere replays it)
        """CREATE TABLE gr_steps (
            seq bigserial PRIMARY KEY,
            task_id text NOT NULL,
            key text NOT NULL,
            kind text NOT NULL,
            fingerprint text NOT NULL,
            body jsonb NOT NULL,
            attempt integer NOT NULL,
            at double precision NOT NULL,
            UNIQUE (task_id, key, kind)
        )""",
    ],
    [  # 5: what each named budget spent, across restarts and daemons; the archive of
        # finished tasks, partitioned by the day they finished (retention drops a day whole)
        """CREATE TABLE gr_budgets (
            name text PRIMARY KEY,
            tokens bigint NOT NULL,
            cost double precision NOT NULL,
            calls bigint NOT NULL,
            updated_at double precision NOT NULL
        )""",
        """CREATE TABLE gr_archive (
            id text NOT NULL,
            ord bigint NOT NULL,
            status text NOT NULL,
            type text NOT NULL,
            finished_at double precision NOT NULL,
            task jsonb NOT NULL
        ) PARTITION BY RANGE (finished_at)""",
        "CREATE INDEX gr_archive_id ON gr_archive (id)",
        "CREATE INDEX gr_archive_ord ON gr_archive (ord)",
        "CREATE INDEX gr_tasks_finished ON gr_tasks (updated_at) "
        "WHERE status IN ('COMPLETED', 'FAILED', 'CANCELLED', 'DEPENDENCY_FAILED')",
    ],
    [  # 6: the event log in segments: gr_events partitioned by ranges of seq, named
        # gr_events_<first>_<end> (end excluded), so retention drops a range whole; what
        # was dropped is remembered (gr_events_dropped: a reader after it gets a 410). The
        # old table becomes the first range as it is (attached, not copied).
        "ALTER TABLE gr_events RENAME TO gr_events_before",
        "ALTER INDEX gr_events_pkey RENAME TO gr_events_before_pkey",
        """CREATE TABLE gr_events (
            seq bigint NOT NULL DEFAULT nextval('gr_event_ids'),
            xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
            ts double precision NOT NULL,
            type text NOT NULL,
            task_id text,
            agent_id text,
            visibility text NOT NULL,
            payload jsonb NOT NULL,
            PRIMARY KEY (seq)
        ) PARTITION BY RANGE (seq)""",
        """DO $$
        DECLARE
            top bigint;
        BEGIN
            SELECT greatest(coalesce(max(seq), 0), (SELECT last_value FROM gr_event_ids)) + 1
                INTO top FROM gr_events_before;
            ALTER TABLE gr_events_before ALTER COLUMN seq DROP DEFAULT;
            EXECUTE format('ALTER TABLE gr_events_before RENAME TO %I', 'gr_events_1_' || top);
            EXECUTE format('ALTER TABLE gr_events ATTACH PARTITION %I FOR VALUES FROM (1) TO (%s)',
                           'gr_events_1_' || top, top);
        END $$""",
        "CREATE TABLE gr_events_dropped (seq bigint NOT NULL)",
        "INSERT INTO gr_events_dropped VALUES (0)",
    ],
    [  # 7: an appending transaction has its xid before it draws a seq (a row's defaults run
        # in column order, so it used to draw seq first and take its xid with the next
        # default: a reader meeting the hole in between did not count it as in flight, and
        # skipped its event). CASE evaluates its condition first.
        "ALTER TABLE gr_events ALTER COLUMN seq SET DEFAULT "
        "CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('gr_event_ids') END",
    ],
    [  # 8: a step's body is kept as the text it was written (json, not jsonb): a replay
        # gives a model back the arguments it sent, byte for byte (jsonb reorders keys);
        # the steps of tasks in flight keep jsonb's order, which is all they still have
        "ALTER TABLE gr_steps ALTER COLUMN body TYPE json USING body::json",
    ],
    [  # 9: what load runs measured, every daemon's records of a run together (greenroom load)
        """CREATE TABLE gr_load (
            seq bigserial PRIMARY KEY,
            run text NOT NULL,
            key text NOT NULL,
            body bytea NOT NULL,
            UNIQUE (run, key)
        )""",
    ],
    [  # 10: entities' saved states (an actor per key, passivated when idle); ``node`` and
        # ``lease_until``: which daemon has it active, until when (placement)
        """CREATE TABLE gr_entities (
            kind text NOT NULL,
            key text NOT NULL,
            state bytea NOT NULL,
            version bigint NOT NULL,
            saved_at double precision NOT NULL,
            node text,
            lease_until double precision,
            PRIMARY KEY (kind, key)
        )""",
        "CREATE INDEX gr_entities_node ON gr_entities (node) WHERE node IS NOT NULL",
        # messages for entities held by another daemon, kept until handled; their answers
        """CREATE TABLE gr_entity_mail (
            seq bigserial PRIMARY KEY,
            kind text NOT NULL,
            key text NOT NULL,
            body bytea NOT NULL,
            asker text,
            ask_id bigint,
            taken_by text
        )""",
        "CREATE INDEX gr_entity_mail_entity ON gr_entity_mail (kind, key, seq)",
        """CREATE TABLE gr_entity_answers (
            seq bigserial PRIMARY KEY,
            asker text NOT NULL,
            ask_id bigint NOT NULL,
            ok boolean NOT NULL,
            body bytea NOT NULL
        )""",
        "CREATE INDEX gr_entity_answers_asker ON gr_entity_answers (asker, seq)",
    ],
    [  # 11: fencing: each grant of a task gives its attempt the next token, and every report
        # of an attempt (and every step it records) names it — refused once a newer exists
        "ALTER TABLE gr_tasks ADD COLUMN token bigint NOT NULL DEFAULT 0",
    ],
    [  # 12: fencing for entities: each new holding of an entity's lease gives the next token,
        # and a save (with the mail it settles) under an older one is refused
        "ALTER TABLE gr_entities ADD COLUMN token bigint NOT NULL DEFAULT 0",
    ],
    [  # 13: fencing for chat: each new holding of a conversation gives the next token, and a
        # turn saved under an older one is refused
        "ALTER TABLE greenroom_chat.conversations ADD COLUMN busy_token bigint NOT NULL DEFAULT 0",
    ],
    [  # 14: keyed records with versions, the primitive durable features are built on; the
        # budgets' totals and the load runs' records move into it (collections ``budgets``
        # and ``load/<run>``, in the order they were written) and their tables go
        "CREATE SEQUENCE gr_record_seq",
        """CREATE TABLE gr_records (
            collection text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            body bytea NOT NULL,
            version bigint NOT NULL,
            seq bigint NOT NULL DEFAULT nextval('gr_record_seq'),
            updated_at double precision NOT NULL,
            PRIMARY KEY (collection, key)
        )""",
        "CREATE INDEX gr_records_by_seq ON gr_records (collection, seq)",
        "INSERT INTO gr_records (collection, key, body, version, updated_at) "
        "SELECT 'budgets', name, convert_to(json_build_object('tokens', tokens, 'cost', cost, "
        "'calls', calls)::text, 'UTF8'), 1, updated_at FROM gr_budgets ORDER BY name",
        "INSERT INTO gr_records (collection, key, body, version, updated_at) "
        "SELECT 'load/' || run, key, body, 1, 0 FROM gr_load ORDER BY seq",
        "DROP TABLE gr_budgets",
        "DROP TABLE gr_load",
    ],
    [  # 15: the chat assistant's data moves onto the records, as the chat package keeps it
        # (greenroom/chat/_kept.py: collections chat/conversations — the messages beside
        # their conversation — chat/idle and chat/todo, keys joined by chr(31)), and its
        # schema goes
        "INSERT INTO gr_records (collection, key, body, version, updated_at) "
        "SELECT 'chat/conversations', c.id, convert_to(json_build_object('user', c.user_id, "
        "'created_at', c.created_at, 'last_at', coalesce(m.last_at, c.created_at), 'count', "
        "coalesce(m.n, 0), 'pending', CASE WHEN p.conversation_id IS NULL THEN NULL ELSE "
        "json_build_object('tool_name', p.tool_name, 'parameters', p.parameters::json, 'title', p.title, "
        "'expires_at', p.expires_at) END, "
        "'holder', CASE WHEN c.busy_until IS NULL THEN NULL ELSE c.busy_by END, "
        "'hold_until', coalesce(c.busy_until, 0), 'hold_token', c.busy_token)::text, 'UTF8'), 1, "
        "coalesce(m.last_at, c.created_at) FROM greenroom_chat.conversations c "
        "LEFT JOIN (SELECT conversation_id, max(seq) AS n, max(created_at) AS last_at "
        "FROM greenroom_chat.messages GROUP BY conversation_id) m ON m.conversation_id = c.id "
        "LEFT JOIN greenroom_chat.pending_actions p ON p.conversation_id = c.id",
        "INSERT INTO gr_records (collection, key, body, version, updated_at) "
        "SELECT 'chat/idle', to_char(floor(updated_at / 60) * 60, 'FM0000000000.000000') || chr(31) || key, "
        "'', 1, updated_at "
        "FROM gr_records WHERE collection = 'chat/conversations'",
        "INSERT INTO gr_records (collection, key, body, version, updated_at) "
        "SELECT 'chat/conversations', conversation_id || chr(31) || lpad(seq::text, 10, '0'), "
        "convert_to(CASE WHEN tool_calls IS NULL THEN json_build_object('role', role, 'content', content, "
        "'created_at', created_at) ELSE json_build_object('role', role, 'content', content, 'created_at', "
        "created_at, 'tool_calls', tool_calls::json) END::text, 'UTF8'), 1, created_at "
        "FROM greenroom_chat.messages ORDER BY conversation_id, seq",
        "INSERT INTO gr_records (collection, key, body, version, updated_at) "
        "SELECT 'chat/todo', user_id || chr(31) || 'i' || lpad(id::text, 12, '0'), "
        "convert_to(json_build_object('title', title, 'description', description, 'completed', "
        "completed <> 0, 'created_at', created_at, 'updated_at', updated_at)::text, 'UTF8'), 1, updated_at "
        "FROM greenroom_chat.tasks ORDER BY id",
        "INSERT INTO gr_records (collection, key, body, version, updated_at) "
        "SELECT 'chat/todo', chr(31) || 'n', convert_to(max(id)::text, 'UTF8'), 1, 0 "
        "FROM greenroom_chat.tasks HAVING count(*) > 0",
        "DROP SCHEMA greenroom_chat CASCADE",
    ],
]
VERSION = len(MIGRATIONS)


class SchemaError(DataError):
    """The database's schema is missing, older (run ``greenroom db upgrade``) or newer."""


def current_version(connection: Any) -> int:
    exists = connection.execute("SELECT to_regclass('gr_schema') IS NOT NULL").fetchone()[0]
    if not exists:
        return 0
    row = connection.execute("SELECT version FROM gr_schema").fetchone()
    return int(row[0]) if row else 0


def upgrade(connection: Any) -> tuple[int, int]:
    """Apply the missing migrations in this transaction; returns ``(before, after)``."""
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
    connection.execute("CREATE TABLE IF NOT EXISTS gr_schema (version integer NOT NULL)")
    before = current_version(connection)
    if before > VERSION:
        raise SchemaError(
            f"the database's schema is version {before}, newer than this greenroom's ({VERSION}): "
            "upgrade greenroom"
        )
    for statements in MIGRATIONS[before:]:
        for statement in statements:
            connection.execute(statement)
    if before == 0:
        connection.execute("INSERT INTO gr_schema VALUES (%s)", (VERSION,))
    else:
        connection.execute("UPDATE gr_schema SET version = %s", (VERSION,))
    return before, VERSION


def check(connection: Any) -> None:
    """Refuse a database whose schema is not this greenroom's version."""
    version = current_version(connection)
    if version != VERSION:
        hint = "run `greenroom db upgrade --store URL`" if version < VERSION else "upgrade greenroom"
        raise SchemaError(
            f"the database's schema is version {version}, this greenroom needs {VERSION}: {hint}"
        )
