/* pg_store.c — the PostgreSQL store: opening (creating and checking the schema and the settings the
 * nodes share), closing, what the store says of itself, backup. See docs/architecture.md "PostgreSQL". */
#include "store/pg/pg.h"
#include "store/pg/pg_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"

/* --- schema and shared settings --- */

static const char SCHEMA_SQL[] =
    "CREATE TABLE tally_meta (name text PRIMARY KEY, value text NOT NULL);"
    "CREATE TABLE tally_rows (item text COLLATE \"C\" NOT NULL, \"user\" text COLLATE \"C\" NOT NULL,"
    "  kind integer NOT NULL, version bigint NOT NULL, PRIMARY KEY (item, \"user\"));"
    "CREATE INDEX tally_rows_by_user ON tally_rows (\"user\", item);"
    "CREATE TABLE tally_log (seq bigint PRIMARY KEY, item text COLLATE \"C\" NOT NULL,"
    "  \"user\" text COLLATE \"C\" NOT NULL, from_kind integer NOT NULL, to_kind integer NOT NULL,"
    "  version bigint NOT NULL, at_ms bigint NOT NULL);"
    "CREATE TABLE tally_log_head (id int PRIMARY KEY CHECK (id = 1), seq bigint NOT NULL);"
    "INSERT INTO tally_log_head VALUES (1, 0);"
    "CREATE TABLE tally_counts (item text COLLATE \"C\" NOT NULL, kind smallint NOT NULL, n bigint NOT NULL,"
    "  PRIMARY KEY (item, kind));"
    "CREATE TABLE tally_pipeline (id int PRIMARY KEY CHECK (id = 1), checkpoint bigint NOT NULL);"
    "INSERT INTO tally_pipeline VALUES (1, 0);"
    "CREATE TABLE tally_idem (\"user\" text COLLATE \"C\" NOT NULL, key text COLLATE \"C\" NOT NULL,"
    "  expires_ms bigint NOT NULL, fingerprint text NOT NULL, status int NOT NULL, type int NOT NULL,"
    "  has_etag boolean NOT NULL, etag_version bigint NOT NULL, body text NOT NULL, PRIMARY KEY (\"user\", key));"
    "CREATE INDEX tally_idem_by_expiry ON tally_idem (expires_ms);"
    "CREATE TABLE tally_aux (key text COLLATE \"C\" PRIMARY KEY, value bytea NOT NULL);" PG_LISTS_SCHEMA_SQL
        PG_CLAIMS_SCHEMA_SQL;

typedef struct {
    const char *name; /* in tally_meta */
    const char *flag; /* the flag that sets it, for the message */
    char value[64];   /* this node's; empty: not checked */
} pg_setting_t;

/* Compares this node's settings with the database's (storing those it lacks). */
static int settings_check(pg_store_t *s, pg_setting_t *set, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (!set[i].value[0])
            continue;
        int rc;
        const char *p[] = {set[i].name, set[i].value};
        PGresult *res =
            pg_exec(s, s->wsess.conn, "settings",
                    "WITH ins AS (INSERT INTO tally_meta VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING value)"
                    " SELECT value FROM ins UNION ALL SELECT value FROM tally_meta WHERE name = $1",
                    2, p, &rc);
        if (!res) {
            snprintf(err, errlen, "reading the settings failed");
            return STORE_ERROR;
        }
        const char *stored = PQntuples(res) ? PQgetvalue(res, 0, 0) : set[i].value;
        if (strcmp(stored, set[i].value) != 0) {
            snprintf(err, errlen,
                     "%s differs from the database's: this node has %s, the database %s (nodes sharing a database must "
                     "agree; see docs/postgresql.md \"Settings that must agree\")",
                     set[i].flag, set[i].value, stored);
            PQclear(res);
            return STORE_ERROR;
        }
        PQclear(res);
    }
    return STORE_OK;
}

/* The reaction mode's own state, after the settings agreed. Many mode keeps each item's reactors (kind
 * 0 in tally_counts) and may store sets as negative codes: the first start in many mode widens the
 * columns and counts the reactors once (every user held one kind until then, so they are the sum of
 * the counts). One mode is refused while a row holds several kinds. */
static int mode_setup(pg_store_t *s, char *err, size_t errlen)
{
    int rc;
    PGresult *res =
        pg_exec(s, s->wsess.conn, "mode", "SELECT 1 FROM tally_meta WHERE name = 'reactors_counted'", 0, NULL, &rc);
    if (!res)
        goto fail;
    bool counted = PQntuples(res) == 1;
    PQclear(res);
    if (s->kinds.mode == REACTION_MODE_MANY && !counted) {
        static const char *const steps[] = {
            "ALTER TABLE tally_rows ALTER COLUMN kind TYPE integer",
            "ALTER TABLE tally_log ALTER COLUMN from_kind TYPE integer, ALTER COLUMN to_kind TYPE integer",
            "INSERT INTO tally_counts SELECT item, 0, sum(n) FROM tally_counts WHERE kind <> 0 GROUP BY item"
            " ON CONFLICT (item, kind) DO UPDATE SET n = excluded.n",
            "INSERT INTO tally_meta VALUES ('reactors_counted', '1')",
        };
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
            if (pg_run(s, s->wsess.conn, "mode", steps[i], 0, NULL) != STORE_OK)
                goto fail;
        log_line("level=info event=pg-reactors-counted");
    } else if (s->kinds.mode == REACTION_MODE_ONE && counted) {
        if (!(res = pg_exec(s, s->wsess.conn, "mode", "SELECT EXISTS (SELECT 1 FROM tally_rows WHERE kind < 0)", 0,
                            NULL, &rc)))
            goto fail;
        bool sets = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        if (sets) {
            snprintf(err, errlen,
                     "the database was used with --reaction-mode many and some users hold several reactions on one "
                     "item: it cannot be used with --reaction-mode one");
            return STORE_ERROR;
        }
        if (pg_run(s, s->wsess.conn, "mode", "DELETE FROM tally_meta WHERE name = 'reactors_counted'", 0, NULL) !=
            STORE_OK)
            goto fail;
    }
    return STORE_OK;
fail:
    snprintf(err, errlen, "setting up the reaction mode failed: %s", PQerrorMessage(s->wsess.conn));
    return STORE_ERROR;
}

/* The stored kinds (in disk order) against the configured ones: the same set, or a refusal. */
static int kinds_check(pg_store_t *s, const kinds_t *cfg, char *err, size_t errlen)
{
    char list[KINDS_MAX * (KIND_NAME_MAX + 1) + 1] = "";
    const kinds_t *want = cfg;
    for (int k = 1; want && k <= want->count; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k > 1 ? "," : "", want->names[k]);
    int rc;
    const char *p[] = {list};
    PGresult *res =
        pg_exec(s, s->wsess.conn, "kinds", "SELECT value FROM tally_meta WHERE name = 'kinds'", 0, NULL, &rc);
    if (!res) {
        snprintf(err, errlen, "reading the kinds failed");
        return STORE_ERROR;
    }
    char stored[sizeof list];
    bool have = PQntuples(res) == 1;
    snprintf(stored, sizeof stored, "%s", have ? PQgetvalue(res, 0, 0) : list);
    PQclear(res);
    if (!have &&
        (!cfg || pg_run(s, s->wsess.conn, "kinds", "INSERT INTO tally_meta VALUES ('kinds', $1)", 1, p) != STORE_OK)) {
        snprintf(err, errlen, cfg ? "storing the kinds failed" : "the database holds no tally store");
        return STORE_ERROR;
    }
    kinds_t db;
    char perr[128];
    if (kinds_parse(&db, stored, perr, sizeof perr) != 0) {
        snprintf(err, errlen, "the database's kinds (%s) are unreadable: %s", stored, perr);
        return STORE_ERROR;
    }
    if (!cfg)
        cfg = &db;
    bool same = db.count == cfg->count;
    for (int d = 1; same && d <= db.count; d++)
        same = kinds_find(cfg, span_of(db.names[d]), false) > 0;
    if (!same) {
        snprintf(err, errlen,
                 "--reactions differs from the database's: this node has %s, the database %s (nodes sharing a "
                 "database must agree)",
                 list, stored);
        return STORE_ERROR;
    }
    s->kinds = *cfg;
    s->db_kinds = db.count;
    for (int d = 1; d <= db.count; d++) {
        int c = kinds_find(cfg, span_of(db.names[d]), false);
        s->db_to_cfg[d] = c;
        s->cfg_to_db[c] = d;
    }
    return STORE_OK;
}

/* Version 1 had no lists: the table is made and built from the rows and the log, under the schema
 * lock and in the opening transaction (so every node finds them whole), and version 1 nodes, which
 * would fold without keeping them, can no longer run beside this one (schema_upgraded). */
static int schema_upgrade_from_1(pg_store_t *s)
{
    uint64_t t0 = clock_ms(CLOCK_MONOTONIC);
    PGresult *res = PQexec(s->wsess.conn, PG_LISTS_SCHEMA_SQL);
    bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    for (int i = 0; ok && i < PG_LISTS_BUILD_STEPS; i++)
        ok = pg_run(s, s->wsess.conn, "lists-build", PG_LISTS_BUILD_SQL[i], 0, NULL) == STORE_OK;
    if (!ok)
        return STORE_ERROR;
    log_line("level=info event=pg-schema-upgraded from=1 to=%d lists_built_ms=%llu", PG_SCHEMA_VERSION,
             (unsigned long long)(clock_ms(CLOCK_MONOTONIC) - t0));
    return STORE_OK;
}

/* Versions 1 and 2 had no idempotency claims: the table is made, empty. Version 2 nodes may run beside
 * it (they never claim: a cluster of one shard needs no claims). */
static int schema_upgrade_from_2(pg_store_t *s, long stored)
{
    PGresult *res = PQexec(s->wsess.conn, PG_CLAIMS_SCHEMA_SQL);
    bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok)
        return STORE_ERROR;
    log_line("level=info event=pg-schema-upgraded from=%ld to=%d claims=created", stored, PG_SCHEMA_VERSION);
    return STORE_OK;
}

/* After an upgrade: this version, and the oldest whose nodes may run beside it (never lowered). */
static int schema_upgraded(pg_store_t *s, const char *version)
{
    char compatible[16];
    snprintf(compatible, sizeof compatible, "%d", PG_SCHEMA_COMPATIBLE_FROM);
    const char *p[] = {version, compatible};
    return pg_run(s, s->wsess.conn, "schema",
                  "INSERT INTO tally_meta VALUES ('schema_version', $1), ('schema_compatible_from', $2)"
                  " ON CONFLICT (name) DO UPDATE SET value = CASE WHEN tally_meta.name = 'schema_version'"
                  " THEN excluded.value ELSE greatest(tally_meta.value::int, excluded.value::int)::text END",
                  2, p);
}

/* Creates the schema in an empty database, or checks the one there, under a lock so that nodes
 * starting together do not race. */
static int schema_setup(pg_store_t *s, const kinds_t *kinds, const store_options_t *opt, char *err, size_t errlen)
{
    int rc;
    char version[16];
    snprintf(version, sizeof version, "%d", PG_SCHEMA_VERSION);
    if (pg_run(s, s->wsess.conn, "schema", "BEGIN", 0, NULL) != STORE_OK ||
        pg_run(s, s->wsess.conn, "schema", "SELECT pg_advisory_xact_lock(" PG_LOCK_SCHEMA_SQL ")", 0, NULL) !=
            STORE_OK) {
        snprintf(err, errlen, "cannot lock the schema: %s", PQerrorMessage(s->wsess.conn));
        return STORE_ERROR;
    }
    PGresult *res = pg_exec(s, s->wsess.conn, "schema", "SELECT to_regclass('tally_meta') IS NOT NULL", 0, NULL, &rc);
    bool exists = res && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!res)
        goto fail;
    if (!exists) {
        if (!kinds) {
            snprintf(err, errlen, "the database holds no tally store");
            goto fail_quiet;
        }
        res = PQexec(s->wsess.conn, SCHEMA_SQL);
        bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (!ok || schema_upgraded(s, version) != STORE_OK)
            goto fail;
        log_line("level=info event=pg-schema-created version=%d", PG_SCHEMA_VERSION);
    } else {
        /* A newer schema says down to which version its nodes can run beside it (a rolling upgrade:
         * old and new nodes share the database until the last old one is replaced). */
        res = pg_exec(s, s->wsess.conn, "schema",
                      "SELECT (SELECT value FROM tally_meta WHERE name = 'schema_version'),"
                      " coalesce((SELECT value FROM tally_meta WHERE name = 'schema_compatible_from'), '0')",
                      0, NULL, &rc);
        long stored = res && PQntuples(res) == 1 ? strtol(PQgetvalue(res, 0, 0), NULL, 10) : 0;
        long compatible_from = res && PQntuples(res) == 1 ? strtol(PQgetvalue(res, 0, 1), NULL, 10) : 0;
        PQclear(res);
        if (stored > PG_SCHEMA_VERSION && (compatible_from == 0 || compatible_from > PG_SCHEMA_VERSION)) {
            snprintf(err, errlen,
                     "the database's schema is version %ld, newer than this tallyd's (%d), and its nodes do not run "
                     "beside version %d ones: upgrade tallyd",
                     stored, PG_SCHEMA_VERSION, PG_SCHEMA_VERSION);
            goto fail_quiet;
        }
        if (stored > PG_SCHEMA_VERSION)
            log_line("level=warn event=pg-schema-newer version=%ld this=%d msg=\"running beside newer nodes\"", stored,
                     PG_SCHEMA_VERSION);
        if (stored < 1) {
            snprintf(err, errlen, "the database's tally_meta has no schema version");
            goto fail_quiet;
        }
        if (stored == 1 && schema_upgrade_from_1(s) != STORE_OK)
            goto fail;
        if (stored <= 2 && schema_upgrade_from_2(s, stored) != STORE_OK)
            goto fail;
        if (stored < PG_SCHEMA_VERSION && schema_upgraded(s, version) != STORE_OK)
            goto fail;
    }
    /* where pruning stopped, for a log with gaps (STORE_LOG_PRUNED_KEY): kept by pruning from now on,
     * first taken from the log as it is (a database made before the record) */
    if (pg_run(s, s->wsess.conn, "schema",
               "INSERT INTO tally_aux SELECT '" STORE_LOG_PRUNED_KEY "', convert_to(coalesce((SELECT min(seq) - 1 FROM"
               " tally_log), (SELECT seq FROM tally_log_head WHERE id = 1), 0)::text, 'UTF8') ON CONFLICT (key) DO "
               "NOTHING",
               0, NULL) != STORE_OK)
        goto fail;
    pg_setting_t set[] = {
        {"idempotency_ttl_ms", "--idempotency-ttl", ""},
        {"log_retention_ms", "--log-retention", ""},
        {"reaction_mode", "--reaction-mode", ""},
    };
    if (opt->idem_ttl_ms)
        snprintf(set[0].value, sizeof set[0].value, "%" PRIu64, opt->idem_ttl_ms);
    if (opt->log_retention_ms)
        snprintf(set[1].value, sizeof set[1].value, "%" PRIu64, opt->log_retention_ms);
    if (opt->reaction_mode)
        snprintf(set[2].value, sizeof set[2].value, "%s", opt->reaction_mode);
    if (kinds_check(s, kinds, err, errlen) != STORE_OK || settings_check(s, set, 3, err, errlen) != STORE_OK ||
        mode_setup(s, err, errlen) != STORE_OK)
        goto fail_quiet;
    if (pg_run(s, s->wsess.conn, "schema", "COMMIT", 0, NULL) != STORE_OK) {
        snprintf(err, errlen, "cannot commit the schema: %s", PQerrorMessage(s->wsess.conn));
        return STORE_ERROR;
    }
    return STORE_OK;
fail:
    snprintf(err, errlen, "cannot set up the schema: %s", PQerrorMessage(s->wsess.conn));
fail_quiet:
    PQclear(PQexec(s->wsess.conn, "ROLLBACK"));
    return STORE_ERROR;
}

int pg_open(const char *uri, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err, size_t errlen)
{
    pg_store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->conninfo = strdup(uri))) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return STORE_ERROR;
    }
    pthread_mutex_init(&s->pool_lock, NULL);
    static const double commit_bounds[] = {0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1};
    histogram_init(&s->commit_seconds, commit_bounds, sizeof commit_bounds / sizeof commit_bounds[0]);
    s->base.ops = &pg_store_ops;
    s->wsess.name = "writer";
    s->fsess.name = "fold";
    s->write = (pg_write_t){.base.ops = &pg_store_ops, .store = s, .sess = &s->wsess};
    s->fold = (pg_write_t){.base.ops = &pg_store_ops, .store = s, .sess = &s->fsess};
    s->fsess.async_commit = true; /* pg_fold_begin says why that keeps every guarantee */
    /* at start a failure is the caller's message: no throttling, no marking the node down */
    if (!pg_session_connect(s, &s->wsess, err, errlen)) {
        if (!opt->open_unreachable || !kinds)
            goto fail;
        /* served once its writer connects and the setup owed is done (pg_open_pending) */
        s->open_kinds = *kinds;
        s->open_opt = *opt;
        s->kinds = *kinds;
        atomic_store(&s->pending, true);
        atomic_store(&s->down_since_ms, clock_ms(CLOCK_MONOTONIC));
        log_line("level=warn event=pg-open-deferred error=\"%s\" msg=\"served once it can be reached and checked\"",
                 err);
        *out = &s->base;
        return STORE_OK;
    }
    if (schema_setup(s, kinds, opt, err, errlen) != STORE_OK)
        goto fail;
    pg_mark_up(s);
    *out = &s->base;
    return STORE_OK;
fail:
    PQfinish(s->wsess.conn);
    pthread_mutex_destroy(&s->pool_lock);
    free(s->conninfo);
    free(s);
    return STORE_ERROR;
}

int pg_open_pending(pg_store_t *s)
{
    char err[512];
    int rc = schema_setup(s, &s->open_kinds, &s->open_opt, err, sizeof err);
    if (rc == STORE_OK && s->open_opt.check_aux) {
        const char *p[] = {s->open_opt.check_key};
        PGresult *res =
            pg_exec(s, s->wsess.conn, "open-check", "SELECT value FROM tally_aux WHERE key = $1", 1, p, &rc);
        if (res) {
            size_t len = 0;
            unsigned char *raw =
                PQntuples(res) ? PQunescapeBytea((const unsigned char *)PQgetvalue(res, 0, 0), &len) : NULL;
            span_t value = {(const char *)raw, len};
            if (PQntuples(res) && !raw) {
                snprintf(err, sizeof err, "out of memory");
                rc = STORE_ERROR;
            } else if (s->open_opt.check_aux(s->open_opt.check_arg, raw ? &value : NULL, err, sizeof err) != 0) {
                s->refused = true; /* what the database holds does not change by waiting */
                rc = STORE_ERROR;
            }
            PQfreemem(raw);
            PQclear(res);
        } else {
            snprintf(err, sizeof err, "cannot read it: %s", PQerrorMessage(s->wsess.conn));
        }
    }
    if (rc != STORE_OK) {
        log_line("level=error event=pg-open-%s error=\"%s\"", s->refused ? "refused" : "setup-failed", err);
        return rc;
    }
    atomic_store(&s->pending, false);
    log_line("level=info event=pg-open-checked msg=\"reached and checked: served from now on\"");
    return STORE_OK;
}

static void write_free(pg_write_t *w)
{
    pg_cache_free(&w->rows);
    pg_cache_free(&w->idem);
    pg_cache_free(&w->voided);
    pg_cache_free(&w->claims);
    itemmap_free(&w->counts);
    itemmap_free(&w->ask_items);
    listmap_free(&w->lists);
    free(w->log);
    PQclear(w->fold_log);
}

void pg_close(store_t *s_)
{
    pg_store_t *s = (pg_store_t *)s_;
    assert(!s->write.active && !s->fold.active);
    PQfinish(s->wsess.conn);
    PQfinish(s->fsess.conn);
    for (size_t i = 0; i < s->pool_count; i++)
        PQfinish(s->pool[i]);
    write_free(&s->write);
    write_free(&s->fold);
    pthread_mutex_destroy(&s->pool_lock);
    free(s->conninfo);
    free(s);
}

const kinds_t *pg_kinds(const store_t *s_)
{
    return &((const pg_store_t *)s_)->kinds;
}

bool pg_shared(const store_t *s_)
{
    (void)s_;
    return true;
}

bool pg_ready(store_t *s_)
{
    pg_store_t *s = (pg_store_t *)s_;
    return atomic_load(&s->up) && !atomic_load(&s->pending);
}

bool pg_writes_refused(store_t *s_, char *why, size_t len)
{
    (void)s_;
    (void)why;
    (void)len;
    return false; /* the server refuses what it must itself (STORE_FULL, STORE_UNAVAILABLE) */
}

int pg_backup(store_t *s_, const char *dir)
{
    (void)s_;
    (void)dir;
    log_line("level=error event=backup-unsupported error=\"back a PostgreSQL store up with the server's own "
             "tools (pg_basebackup, pg_dump)\"");
    return STORE_ERROR;
}
