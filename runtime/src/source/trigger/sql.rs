//! The SQL of trigger capture: what a start installs, what `teardown` drops. No IO.
//!
//! Everything lives in one schema of Tributary's own: the journal, the layouts of the captured
//! tables, the poller's ticks, and one capture function every captured table's triggers call.
//! Names are always quoted ([`quote_ident`]), never pasted.

use crate::source::quote::{quote_ident, quote_literal};

/// The function a captured table's triggers call is this, then the table's oid (a partition's
/// triggers call its root's).
pub const CAPTURE_PREFIX: &str = "capture_";
/// The function that finds (or records) a table's layout.
pub const LAYOUT_FUNCTION: &str = "layout";
/// The function of the DDL watch ([`ddl_watch_sql`]).
pub const DDL_WATCH_FUNCTION: &str = "ddl_watch";
/// What a trigger's name holds between the capture schema's name and the event: the
/// triggers of two schemas (two pipelines capturing one table) never replace each other, and
/// the default schema's are named as before (`tributary_capture_insert`).
pub const TRIGGER_INFIX: &str = "_capture_";
/// The events captured, one trigger each (PostgreSQL allows transition tables only on a
/// trigger of one event).
pub const EVENTS: [Event; 4] = [Event::Insert, Event::Update, Event::Delete, Event::Truncate];
/// The settings Tributary's functions run with, so each value's text is the form pgoutput
/// sends and the text decoders read, whatever the writing session set. The search path comes
/// first and is always set (the functions are `SECURITY DEFINER`); each other one fixes the text
/// of some types only ([`Needs`]), and a capture function written unchecked sets only those its
/// table's columns need: each costs a save and a restore on every captured statement.
/// Each value is written as it stands: the search path is a list of two schemas, `pg_temp`
/// last so that no temporary object can stand in for one of the catalog's (one quoted string
/// would be a single schema of that name).
const SETTINGS: [(&str, &str); 6] = [
    ("search_path", "pg_catalog, pg_temp"),
    ("DateStyle", "'ISO'"),
    ("TimeZone", "'UTC'"),
    ("IntervalStyle", "'postgres'"),
    ("extra_float_digits", "3"),
    ("bytea_output", "'hex'"),
];

/// Which of [`SETTINGS`] the text of a table's values depends on, by the types of its columns
/// and of what they are made of (the elements of an array, the base of a domain, the subtype
/// of a range, the fields of a composite: [`column_types`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    pub date_style: bool,
    pub time_zone: bool,
    pub interval_style: bool,
    pub float_digits: bool,
    pub bytea_output: bool,
}

/// The first oid of an object not built into PostgreSQL.
const FIRST_NORMAL_OID: u32 = 16384;

impl Needs {
    /// Every setting: for the checked form of a capture function, whose general path serves
    /// whatever columns a table has by then.
    pub const ALL: Needs = Needs {
        date_style: true,
        time_zone: true,
        interval_style: true,
        float_digits: true,
        bytea_output: true,
    };

    /// What the types `(oid, typtype, typcategory)` need. A type of PostgreSQL's own is known;
    /// one an extension or a user made is known when it is an enum, or made of others (an
    /// array, a domain, a range: their parts are among the types too); any other (a base type
    /// with an output function of its own, a composite whose fields can change under it) needs
    /// every setting.
    pub fn of(types: &[(u32, char, char)]) -> Needs {
        let mut needs = Needs::default();
        for &(oid, typtype, category) in types {
            if oid >= FIRST_NORMAL_OID {
                match (typtype, category) {
                    ('e' | 'd' | 'r' | 'm', _) | (_, 'A') => continue,
                    _ => return Needs::ALL,
                }
            }
            match oid {
                // date, time, timestamp, timetz
                1082 | 1083 | 1114 | 1266 => needs.date_style = true,
                // timestamptz
                1184 => (needs.date_style, needs.time_zone) = (true, true),
                // interval
                1186 => needs.interval_style = true,
                // float4, float8, and the geometric types printed with them (point, lseg,
                // box and line are also made of them, as their element types say)
                700 | 701 | 600 | 601 | 602 | 603 | 604 | 628 | 718 => needs.float_digits = true,
                17 => needs.bytea_output = true,
                _ => {}
            }
        }
        needs
    }

    fn has(&self, name: &str) -> bool {
        match name {
            "DateStyle" => self.date_style,
            "TimeZone" => self.time_zone,
            "IntervalStyle" => self.interval_style,
            "extra_float_digits" => self.float_digits,
            "bytea_output" => self.bytea_output,
            _ => true,
        }
    }
}

/// A captured event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl Event {
    pub fn keyword(self) -> &'static str {
        match self {
            Event::Insert => "INSERT",
            Event::Update => "UPDATE",
            Event::Delete => "DELETE",
            Event::Truncate => "TRUNCATE",
        }
    }

    /// The name of the trigger for this event, installed by the capture of `schema`.
    pub fn trigger(self, schema: &str) -> String {
        format!(
            "{schema}{TRIGGER_INFIX}{}",
            self.keyword().to_ascii_lowercase()
        )
    }

    /// The transition tables the trigger declares.
    fn referencing(self) -> &'static str {
        match self {
            Event::Insert => " REFERENCING NEW TABLE AS tributary_new",
            Event::Update => " REFERENCING OLD TABLE AS tributary_old NEW TABLE AS tributary_new",
            Event::Delete => " REFERENCING OLD TABLE AS tributary_old",
            Event::Truncate => "",
        }
    }
}

/// `schema.name`, quoted.
pub fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// The `SET` clauses of a function whose values' text depends on `needs`.
fn settings(needs: &Needs) -> String {
    SETTINGS
        .iter()
        .filter(|(name, _)| needs.has(name))
        .map(|(name, value)| format!(" SET {name} TO {value}"))
        .collect()
}

/// The statements that create the schema's tables when missing and replace the layout
/// function, in order. Run in one transaction: a start either has all of it or none.
pub fn install_schema(schema: &str) -> Vec<String> {
    let s = quote_ident(schema);
    let settings = settings(&Needs::ALL);
    vec![
        format!("CREATE SCHEMA IF NOT EXISTS {s}"),
        format!(
            "COMMENT ON SCHEMA {s} IS {}",
            quote_literal(
                "Tributary's trigger capture: the journal of captured changes and what reads it. `tributary teardown` removes it."
            )
        ),
        // `seq` orders rows; `xid` is the writing transaction, 64 bits so that wraparound
        // cannot reorder; `rel` the table (a partition's root); `layout` the columns `old`
        // and `new` hold, one text per column.
        format!(
            "CREATE TABLE IF NOT EXISTS {s}.journal (
                seq bigint GENERATED ALWAYS AS IDENTITY,
                xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
                rel oid NOT NULL,
                op \"char\" NOT NULL,
                layout integer,
                old text[],
                new text[]
            )"
        ),
        // Not unique: two transactions that meet a new layout at once each record it (a
        // unique constraint would make the second wait for the first to end).
        format!(
            "CREATE TABLE IF NOT EXISTS {s}.layouts (
                id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                rel oid NOT NULL,
                shape text NOT NULL,
                identity \"char\" NOT NULL,
                names text[] NOT NULL,
                types oid[] NOT NULL,
                modifiers integer[] NOT NULL,
                keys boolean[] NOT NULL
            )"
        ),
        format!("CREATE INDEX IF NOT EXISTS layouts_by_shape ON {s}.layouts (rel, md5(shape))"),
        // The tables whose capture function is written unchecked, what for, and the
        // statement that replaces it with its checked form (see `ddl_watch_sql`).
        format!(
            "CREATE TABLE IF NOT EXISTS {s}.captured (
                root oid PRIMARY KEY,
                signature text NOT NULL,
                checked text NOT NULL,
                fast boolean NOT NULL
            )"
        ),
        // Who the journal captures for (see `owner`): one row, made with the schema, claimed
        // by the sink of the pipeline that reads it.
        format!(
            "CREATE TABLE IF NOT EXISTS {s}.identity (
                one boolean PRIMARY KEY DEFAULT true CHECK (one),
                journal text NOT NULL DEFAULT gen_random_uuid()::text,
                sink text,
                claimed_at bigint NOT NULL DEFAULT 0,
                claimed timestamptz NOT NULL DEFAULT now()
            )"
        ),
        // A load of every table is due at the next start (see `capture::ask_load`).
        format!(
            "ALTER TABLE {s}.identity ADD COLUMN IF NOT EXISTS load_due boolean NOT NULL DEFAULT false"
        ),
        format!("INSERT INTO {s}.identity DEFAULT VALUES ON CONFLICT DO NOTHING"),
        format!(
            "CREATE TABLE IF NOT EXISTS {s}.ticks (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                snapshot pg_snapshot NOT NULL,
                first_position bigint NOT NULL,
                end_position bigint,
                taken timestamptz NOT NULL DEFAULT now(),
                load boolean NOT NULL DEFAULT false
            )"
        ),
        format!("ALTER TABLE {s}.ticks ADD COLUMN IF NOT EXISTS end_position bigint"),
        format!(
            "ALTER TABLE {s}.ticks ADD COLUMN IF NOT EXISTS load boolean NOT NULL DEFAULT false"
        ),
        format!(
            "CREATE OR REPLACE FUNCTION {s}.{layout}(v_root oid, OUT id integer, OUT new_cols text, OUT old_cols text)
             LANGUAGE plpgsql SECURITY DEFINER{settings}
             AS $tributary$\n{body}\n$tributary$",
            layout = quote_ident(LAYOUT_FUNCTION),
            body = layout_body(schema),
        ),
    ]
}

/// The layout function's body: a table's columns as a statement sees them now (name, type,
/// modifier, in the key), found among the recorded layouts or recorded, with the expressions
/// that cast a transition table's rows to text: every column of a new row; of an old row the
/// key (every column under `REPLICA IDENTITY FULL`), as pgoutput sends it.
fn layout_body(schema: &str) -> String {
    let s = quote_ident(schema);
    format!(
        r#"DECLARE
    v_ident "char";
    v_shape text;
    v_names text[];
    v_types oid[];
    v_mods integer[];
    v_keys boolean[];
BEGIN
    SELECT c.relreplident INTO v_ident FROM pg_class c WHERE c.oid = v_root;
    WITH key AS (
        SELECT i.indkey::int2[] AS attnums FROM pg_index i
        WHERE i.indrelid = v_root
          AND CASE v_ident WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END
    ), cols AS (
        SELECT a.attnum, a.attname, a.atttypid, a.atttypmod, t.typoutput::text AS output,
               v_ident = 'f' OR EXISTS (SELECT 1 FROM key WHERE a.attnum = ANY (key.attnums)) AS is_key
        FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
        WHERE a.attrelid = v_root AND a.attnum > 0 AND NOT a.attisdropped
    )
    -- Each value through its type's output function, as pgoutput sends it: a cast to text is
    -- not always that (bool casts to 'true', inet drops a host's mask, char drops its padding).
    SELECT v_ident::text || ':' || string_agg(format('%s %s %s %s', quote_ident(attname), atttypid, atttypmod, is_key), ',' ORDER BY attnum),
           string_agg(format('%s(r.%I)::text', output, attname), ', ' ORDER BY attnum),
           string_agg(CASE WHEN is_key THEN format('%s(o.%I)::text', output, attname) ELSE 'NULL' END, ', ' ORDER BY attnum),
           array_agg(attname::text ORDER BY attnum), array_agg(atttypid ORDER BY attnum),
           array_agg(atttypmod ORDER BY attnum), array_agg(is_key ORDER BY attnum)
      INTO v_shape, new_cols, old_cols, v_names, v_types, v_mods, v_keys
      FROM cols;
    SELECT l.id INTO id FROM {s}.layouts l
     WHERE l.rel = v_root AND md5(l.shape) = md5(v_shape) AND l.shape = v_shape
     ORDER BY l.id LIMIT 1;
    IF id IS NULL THEN
        INSERT INTO {s}.layouts (rel, shape, identity, names, types, modifiers, keys)
        VALUES (v_root, v_shape, v_ident, v_names, v_types, v_mods, v_keys)
        RETURNING layouts.id INTO id;
    END IF;
END"#
    )
}

/// What a table's capture function is written with: the table (a partitioned table's root),
/// its layout when the function was written, the signature of its columns and key then, the
/// text expressions of a new row's columns and an old row's key ([`layout_body`]), and the
/// settings their text depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub root: u32,
    pub layout: i32,
    pub signature: String,
    pub new_cols: String,
    pub old_cols: String,
    pub needs: Needs,
}

/// The query of the types table `root`'s columns are made of, each once: `(oid, typtype,
/// typcategory)` of the columns' types and, recursively, of an array's elements, a domain's
/// base, a range's subtype, a multirange's range and a composite's fields ([`Needs::of`]).
pub fn column_types(root: u32) -> String {
    format!(
        "WITH RECURSIVE made(oid) AS (
            SELECT a.atttypid FROM pg_attribute a
             WHERE a.attrelid = {root} AND a.attnum > 0 AND NOT a.attisdropped
            UNION
            SELECT part.oid FROM made JOIN pg_type t ON t.oid = made.oid
             CROSS JOIN LATERAL (
                SELECT nullif(t.typelem, 0)
                UNION ALL SELECT nullif(t.typbasetype, 0)
                UNION ALL SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid
                UNION ALL SELECT r.rngtypid FROM pg_range r WHERE r.rngmultitypid = t.oid
                UNION ALL SELECT f.atttypid FROM pg_attribute f
                 WHERE t.typrelid <> 0 AND f.attrelid = t.typrelid AND f.attnum > 0 AND NOT f.attisdropped
             ) part(oid)
             WHERE part.oid IS NOT NULL
         )
         SELECT t.oid, t.typtype, t.typcategory FROM made JOIN pg_type t ON t.oid = made.oid"
    )
}

/// An expression that changes whenever the columns or the key of table `root` change: every
/// column's catalog row version (a column added, dropped, renamed or retyped writes a new one),
/// the replica identity setting, and the key indexes' columns. Three index probes of the
/// catalog: cheap beside the lookup of a layout.
pub fn signature(root: u32) -> String {
    signature_of(&root.to_string())
}

/// [`signature`] of the table whose oid the SQL expression `root` gives.
fn signature_of(root: &str) -> String {
    format!(
        "(SELECT string_agg(a.xmin::text, ',' ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = {root} AND a.attnum > 0)
         || '/' || (SELECT c.relreplident::text FROM pg_class c WHERE c.oid = {root})
         || '/' || coalesce((SELECT string_agg(i.indkey::text, ';' ORDER BY i.indexrelid) FROM pg_index i WHERE i.indrelid = {root} AND (i.indisprimary OR i.indisreplident)), '')"
    )
}

/// The command tags after which the DDL watch looks at the captured tables: those that can
/// change a table's columns, its replica identity or its key.
const WATCHED_TAGS: [&str; 4] = ["ALTER TABLE", "CREATE INDEX", "DROP INDEX", "ALTER INDEX"];

/// The event trigger of the capture schema whose oid is `schema_oid`. Event triggers are
/// named per database, not per schema: the oid keeps two capture schemas' apart.
pub fn ddl_watch_trigger(schema_oid: u32) -> String {
    format!("tributary_ddl_watch_{schema_oid}")
}

/// The statements that put the DDL watch in place; a role that may not create event triggers
/// (any but a superuser) fails at the third. After a statement that may have changed a
/// captured table's columns or key, the watch compares each table's [`signature`] with the
/// one its unchecked capture function was written for (`captured`) and, where they differ,
/// replaces the function with its checked form, in the statement's transaction: before any
/// later statement can write to the table with the old columns. Enabled `ALWAYS`, so DDL
/// applied under `session_replication_role = replica` is watched too.
pub fn ddl_watch_sql(schema: &str, trigger: &str) -> Vec<String> {
    let s = quote_ident(schema);
    let settings = settings(&Needs::ALL);
    let changed = signature_of("w.root");
    let watch = qualified(schema, DDL_WATCH_FUNCTION);
    let trigger = quote_ident(trigger);
    let tags = WATCHED_TAGS.map(quote_literal).join(", ");
    vec![
        format!(
            r#"CREATE OR REPLACE FUNCTION {watch}() RETURNS event_trigger
             LANGUAGE plpgsql SECURITY DEFINER{settings}
             AS $tributary$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT w.root, w.checked FROM {s}.captured w
              WHERE w.fast AND ({changed}) IS DISTINCT FROM w.signature
    LOOP
        EXECUTE r.checked;
        UPDATE {s}.captured SET fast = false WHERE root = r.root;
    END LOOP;
END
$tributary$"#
        ),
        format!("DROP EVENT TRIGGER IF EXISTS {trigger}"),
        format!(
            "CREATE EVENT TRIGGER {trigger} ON ddl_command_end WHEN TAG IN ({tags}) EXECUTE FUNCTION {watch}()"
        ),
        format!("ALTER EVENT TRIGGER {trigger} ENABLE ALWAYS"),
    ]
}

/// Records that table `root`'s capture function is written unchecked for `signature` ($1,
/// $2), with `checked` ($3), the statement that replaces it with its checked form.
pub fn record_unchecked(schema: &str) -> String {
    format!(
        "INSERT INTO {s}.captured (root, signature, checked, fast) VALUES ($1, $2, $3, true)
         ON CONFLICT (root) DO UPDATE SET signature = $2, checked = $3, fast = true",
        s = quote_ident(schema)
    )
}

/// Records that every capture function of the schema is written checked.
pub fn record_all_checked(schema: &str) -> String {
    format!("UPDATE {}.captured SET fast = false", quote_ident(schema))
}

/// The query that records table `root`'s layout now and returns what its capture function is
/// written with (`id`, `new_cols`, `old_cols`, `signature`).
pub fn layout_now(schema: &str, root: u32) -> String {
    format!(
        "SELECT l.id, l.new_cols, l.old_cols, {} FROM {}({root}::oid) l",
        signature(root),
        qualified(schema, LAYOUT_FUNCTION)
    )
}

/// An update's old and new rows are paired by a hash join whatever plan the session cached:
/// the plan of the function's insert is made once per session, with the row count of the
/// first statement's transition tables, and a nested loop planned for one row would take
/// quadratic time over a large update. Only the planner reads `enable_nestloop`, so it is
/// turned off around the insert (and the session's value put back) rather than for every call
/// of the function, which would cost inserts and deletes a save and a restore each.
const NESTLOOP_VARIABLE: &str = "v_nestloop text;";
const PAIR_BY_HASH: &str = "v_nestloop := current_setting('enable_nestloop');\n        \
     PERFORM set_config('enable_nestloop', 'off', true);";
const PAIRED: &str = "PERFORM set_config('enable_nestloop', v_nestloop, true);";

/// The name of table `root`'s capture function.
pub fn capture_function(root: u32) -> String {
    format!("{CAPTURE_PREFIX}{root}")
}

/// Table `root`'s capture function. Per statement (a truncate too, so the reader can name
/// its table): one `INSERT … SELECT` from the transition tables with the columns written in,
/// planned once per session. `checked`, it first makes sure the table's columns and key are
/// as when it was written (the [`signature`], three catalog lookups on every statement); once
/// they changed, it takes the general path: the layout looked up ([`layout_body`]) and the
/// same insert built for it. Unchecked, it relies on the DDL watch ([`ddl_watch_sql`]) to
/// replace it with its checked form when they change. A partition's rows are its root's, as
/// the slot mode's publication has them. An update's old and new rows are paired by
/// position: the trigger machinery appends each row's two images together.
pub fn capture_function_sql(schema: &str, written: &Written, checked: bool) -> String {
    let s = quote_ident(schema);
    let layout = qualified(schema, LAYOUT_FUNCTION);
    let Written {
        root,
        layout: id,
        signature: sig,
        new_cols,
        old_cols,
        needs,
    } = written;
    let name = qualified(schema, &capture_function(*root));
    let settings = settings(if checked { &Needs::ALL } else { needs });
    let as_written = format!(
        r#"IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO {s}.journal (rel, op, layout) VALUES ({root}, 'T', {id});
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO {s}.journal (rel, op, layout, new)
        SELECT {root}, 'I', {id}, ARRAY[{new_cols}] FROM tributary_new r;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {s}.journal (rel, op, layout, old)
        SELECT {root}, 'D', {id}, ARRAY[{old_cols}]::text[] FROM tributary_old o;
    ELSE
        {PAIR_BY_HASH}
        INSERT INTO {s}.journal (rel, op, layout, old, new)
        SELECT {root}, 'U', {id}, ARRAY[{old_cols}]::text[], ARRAY[{new_cols}]
          FROM (SELECT row_number() OVER () AS tributary_n, x.* FROM tributary_old x) o
          JOIN (SELECT row_number() OVER () AS tributary_n, x.* FROM tributary_new x) r
         USING (tributary_n) ORDER BY tributary_n;
        {PAIRED}
    END IF;
    RETURN NULL;"#
    );
    let body = match checked {
        false => format!("DECLARE\n    {NESTLOOP_VARIABLE}\nBEGIN\n    {as_written}\nEND"),
        true => format!(
            r#"DECLARE
    {NESTLOOP_VARIABLE}
    v_layout integer;
    v_new text;
    v_old text;
BEGIN
    IF ({check}) = {sig} THEN
    {as_written}
    END IF;
    -- The table changed since this function was written (the next start writes it again).
    SELECT l.id, l.new_cols, l.old_cols INTO v_layout, v_new, v_old FROM {layout}({root}::oid) l;
    IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO {s}.journal (rel, op, layout) VALUES ({root}, 'T', v_layout);
    ELSIF TG_OP = 'INSERT' THEN
        EXECUTE format('INSERT INTO {s}.journal (rel, op, layout, new) SELECT %s, ''I'', %s, ARRAY[%s] FROM tributary_new r',
                       {root}, v_layout, v_new);
    ELSIF TG_OP = 'DELETE' THEN
        EXECUTE format('INSERT INTO {s}.journal (rel, op, layout, old) SELECT %s, ''D'', %s, ARRAY[%s]::text[] FROM tributary_old o',
                       {root}, v_layout, v_old);
    ELSE
        EXECUTE format('INSERT INTO {s}.journal (rel, op, layout, old, new) SELECT %s, ''U'', %s, ARRAY[%s]::text[], ARRAY[%s] FROM (SELECT row_number() OVER () AS tributary_n, x.* FROM tributary_old x) o JOIN (SELECT row_number() OVER () AS tributary_n, x.* FROM tributary_new x) r USING (tributary_n) ORDER BY tributary_n',
                       {root}, v_layout, v_old, v_new);
    END IF;
    RETURN NULL;
END"#,
            check = signature(*root),
            sig = quote_literal(sig),
        ),
    };
    format!(
        "CREATE OR REPLACE FUNCTION {name}() RETURNS trigger
         LANGUAGE plpgsql SECURITY DEFINER{settings}
         AS $tributary$\n{body}\n$tributary$"
    )
}

/// The statements that put the capture triggers on `table` (`schema.table`, quoted
/// already), calling the capture function of its root `root`, replacing those a start before
/// installed.
pub fn install_triggers(schema: &str, table: &str, root: u32) -> Vec<String> {
    let function = qualified(schema, &capture_function(root));
    EVENTS
        .iter()
        .map(|event| {
            let name = quote_ident(&event.trigger(schema));
            format!(
                "CREATE OR REPLACE TRIGGER {name} AFTER {} ON {table}{} FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
                event.keyword(),
                event.referencing()
            )
        })
        .collect()
}

/// The statement that drops the schema and everything in it.
pub fn drop_schema(schema: &str) -> String {
    format!("DROP SCHEMA IF EXISTS {} CASCADE", quote_ident(schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_triggers_of_two_schemas_have_names_of_their_own() {
        let ours = install_triggers("tributary", "\"public\".\"t\"", 1);
        let theirs = install_triggers("cdc_two", "\"public\".\"t\"", 1);
        assert!(ours[0].starts_with("CREATE OR REPLACE TRIGGER \"tributary_capture_insert\""));
        assert!(theirs[0].starts_with("CREATE OR REPLACE TRIGGER \"cdc_two_capture_insert\""));
        assert!(theirs[0].ends_with("EXECUTE FUNCTION \"cdc_two\".\"capture_1\"()"));
    }

    #[test]
    fn each_event_has_its_trigger_with_the_transition_tables_it_may_have() {
        let sql = install_triggers("tributary", "\"public\".\"t\"", 16384);
        assert_eq!(sql.len(), 4);
        assert_eq!(
            sql[1],
            "CREATE OR REPLACE TRIGGER \"tributary_capture_update\" AFTER UPDATE ON \"public\".\"t\" \
             REFERENCING OLD TABLE AS tributary_old NEW TABLE AS tributary_new FOR EACH STATEMENT \
             EXECUTE FUNCTION \"tributary\".\"capture_16384\"()"
        );
        assert!(sql[3].contains("AFTER TRUNCATE ON \"public\".\"t\" FOR EACH STATEMENT"));
    }

    #[test]
    fn the_schema_is_quoted_everywhere_and_the_function_fixes_its_settings() {
        let sql = install_schema("we\"ird").join(";\n");
        assert!(sql.contains("CREATE SCHEMA IF NOT EXISTS \"we\"\"ird\""));
        assert!(!sql.contains(" we\"ird"), "never pasted unquoted");
        assert!(sql.contains("SECURITY DEFINER SET search_path TO pg_catalog, pg_temp SET"));
        assert!(sql.contains("SET TimeZone TO 'UTC'"));
        assert!(sql.contains("INSERT INTO \"we\"\"ird\".layouts"));
        assert_eq!(drop_schema("t"), "DROP SCHEMA IF EXISTS \"t\" CASCADE");
    }

    #[test]
    fn a_capture_function_has_its_table_written_in_and_a_general_path_once_it_changed() {
        let written = Written {
            root: 16384,
            layout: 7,
            signature: "1,2/d/1".into(),
            new_cols: "r.\"id\"::text".into(),
            old_cols: "o.\"id\"::text".into(),
            needs: Needs::default(),
        };
        let sql = capture_function_sql("tributary", &written, true);
        assert!(sql.starts_with("CREATE OR REPLACE FUNCTION \"tributary\".\"capture_16384\"()"));
        assert!(sql.contains("= '1,2/d/1' THEN"), "{sql}");
        assert!(
            sql.contains("SELECT 16384, 'I', 7, ARRAY[r.\"id\"::text]"),
            "{sql}"
        );
        assert!(
            sql.contains("EXECUTE format('INSERT INTO \"tributary\".journal"),
            "{sql}"
        );
        assert!(sql.contains("WHERE a.attrelid = 16384"), "{sql}");

        // Unchecked (the DDL watch replaces it once the table changes): the insert alone.
        let fast = capture_function_sql("tributary", &written, false);
        assert!(
            fast.contains("SELECT 16384, 'I', 7, ARRAY[r.\"id\"::text]"),
            "{fast}"
        );
        assert!(!fast.contains("pg_attribute"), "{fast}");
        assert!(!fast.contains("EXECUTE"), "{fast}");

        // Unchecked, it sets only what its columns' text needs (an integer's, nothing but the
        // search path); checked, every setting, for whatever columns the table has by then.
        assert!(fast.contains("SECURITY DEFINER SET search_path TO pg_catalog, pg_temp\n"));
        assert!(!fast.contains("SET DateStyle"), "{fast}");
        for setting in [
            "DateStyle",
            "TimeZone",
            "IntervalStyle",
            "extra_float_digits",
            "bytea_output",
        ] {
            assert!(
                sql.contains(&format!(" SET {setting} TO ")),
                "{setting}: {sql}"
            );
        }
        let dated = Written {
            needs: Needs {
                date_style: true,
                time_zone: true,
                ..Needs::default()
            },
            ..written
        };
        let dated = capture_function_sql("tributary", &dated, false);
        assert!(
            dated.contains("SET DateStyle TO 'ISO' SET TimeZone TO 'UTC'\n"),
            "{dated}"
        );
        assert!(!dated.contains("IntervalStyle"), "{dated}");

        // Neither form sets enable_nestloop per call: only around the pairing of an update.
        for form in [&sql, &fast] {
            assert!(!form.contains("SET enable_nestloop"), "{form}");
            let off = form
                .find("set_config('enable_nestloop', 'off', true)")
                .expect(form);
            let join = form[off..].find("USING (tributary_n)").expect(form);
            assert!(form[off + join..].contains("set_config('enable_nestloop', v_nestloop, true)"));
        }
    }

    #[test]
    fn a_table_needs_the_settings_its_types_text_depends_on() {
        let builtin = |oid| (oid, 'b', 'N');
        assert_eq!(
            Needs::of(&[builtin(23), builtin(25), builtin(2950)]),
            Needs::default()
        );
        assert_eq!(
            Needs::of(&[builtin(23), builtin(1184)]),
            Needs {
                date_style: true,
                time_zone: true,
                ..Needs::default()
            }
        );
        assert_eq!(
            Needs::of(&[builtin(1082), builtin(1186), builtin(17), builtin(701)]),
            Needs {
                date_style: true,
                interval_style: true,
                float_digits: true,
                bytea_output: true,
                ..Needs::default()
            }
        );
        // A user's enum, array, domain or range is made of types found beside it; an
        // extension's base type or a composite type is not known, and needs every setting.
        let user = [
            (16390, 'e', 'E'),
            (16391, 'b', 'A'),
            (16392, 'd', 'N'),
            (16393, 'r', 'R'),
        ];
        assert_eq!(Needs::of(&user), Needs::default());
        assert_eq!(Needs::of(&[builtin(23), (16400, 'b', 'U')]), Needs::ALL);
        assert_eq!(Needs::of(&[(16401, 'c', 'C')]), Needs::ALL);
    }

    #[test]
    fn the_ddl_watch_replaces_changed_tables_functions_and_is_enabled_always() {
        let sql = ddl_watch_sql("we\"ird", &ddl_watch_trigger(16500)).join(";\n");
        assert!(sql.contains("RETURNS event_trigger"), "{sql}");
        assert!(sql.contains("FROM \"we\"\"ird\".captured w"), "{sql}");
        assert!(sql.contains("WHERE a.attrelid = w.root"), "{sql}");
        assert!(sql.contains("EXECUTE r.checked"), "{sql}");
        assert!(
            sql.contains("CREATE EVENT TRIGGER \"tributary_ddl_watch_16500\" ON ddl_command_end WHEN TAG IN ('ALTER TABLE', 'CREATE INDEX', 'DROP INDEX', 'ALTER INDEX')"),
            "{sql}"
        );
        assert!(sql.ends_with("ALTER EVENT TRIGGER \"tributary_ddl_watch_16500\" ENABLE ALWAYS"));
    }
}
