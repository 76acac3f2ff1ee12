/* pg_store.c — the PostgreSQL store: connecting (with the timeouts a failover needs), creating and
 * checking the schema and the settings the nodes share, the pool of reader connections, snapshots,
 * and the helpers the other files of the store use. See docs/architecture.md "PostgreSQL". */
#include "store/pg/pg.h"
#include "store/pg/pg_internal.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"

/* --- connections --- */

static bool reader_prepare(PGconn *conn);

PGconn *pg_connect(const pg_store_t *s, char *err, size_t errlen)
{
    /* tally's defaults first: the URI's own settings (expanded from dbname) override them. The
     * keepalives and tcp_user_timeout let the server and libpq notice a vanished peer within
     * seconds, so the fold leader's lock is released and a failover is seen in time. */
    const char *keys[] = {"connect_timeout",  "keepalives",
                          "keepalives_idle",  "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout",
                          "application_name", "options",
                          "dbname",           NULL};
    const char *values[] = {
        "3",
        "1",
        "5",
        "2",
        "2",
        "5000",
        PG_APPLICATION_NAME,
        "-c idle_in_transaction_session_timeout=60000 -c lock_timeout=30000 -c statement_timeout=60000",
        s->conninfo,
        NULL};
    PGconn *conn = PQconnectdbParams(keys, values, 1);
    if (!conn || PQstatus(conn) != CONNECTION_OK) {
        if (err) {
            const char *msg = conn ? PQerrorMessage(conn) : "out of memory";
            snprintf(err, errlen, "%.*s", (int)strcspn(msg, "\n"), msg);
        }
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

void pg_mark_up(pg_store_t *s)
{
    atomic_store(&s->up, true);
    atomic_store(&s->down_since_ms, 0);
}

static void pg_mark_down(pg_store_t *s)
{
    uint_fast64_t zero = 0;
    if (atomic_exchange(&s->up, false))
        atomic_fetch_add(&s->epoch, 1); /* after a failover the idle readers' connections are stale */
    atomic_compare_exchange_strong(&s->down_since_ms, &zero, clock_ms(CLOCK_MONOTONIC));
}

/* A connection found gone or refused: the store is marked down (/readyz 503, the readers' pool
 * dropped), unless it is the fold's session, whose loss alone says nothing of the others. */
static void conn_lost(pg_store_t *s, const PGconn *conn)
{
    if ((uintptr_t)conn != atomic_load_explicit(&s->fsess.id, memory_order_relaxed))
        pg_mark_down(s);
}

int pg_result_rc(pg_store_t *s, PGconn *conn, const PGresult *res, const char *what)
{
    if (PQstatus(conn) == CONNECTION_BAD) {
        conn_lost(s, conn);
        return STORE_UNAVAILABLE;
    }
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (state && (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0 || strcmp(state, "23505") == 0 ||
                  strcmp(state, "55P03") == 0))
        return STORE_RETRY; /* deadlock, serialization failure, a row or key inserted by another batch meanwhile, lock
                               timeout */
    if (state && strncmp(state, "08", 2) == 0) {
        conn_lost(s, conn);
        return STORE_UNAVAILABLE;
    }
    if (state && (strcmp(state, "25006") == 0 || strncmp(state, "57P", 3) == 0)) {
        /* read-only transaction (a standby), or the server shutting down: not this node's fault */
        conn_lost(s, conn);
        return STORE_UNAVAILABLE;
    }
    const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
    log_line("level=error event=pg-error what=%s sqlstate=%s error=\"%.*s\"", what, state ? state : "-",
             (int)strcspn(msg, "\n"), msg);
    return state && strcmp(state, "53100") == 0 ? STORE_FULL : STORE_ERROR;
}

/* One round trip more on conn; the writer's and the fold's connections' counted apart too (compared
 * with the sessions' ids, since other threads count their own connections'). */
void pg_count_round_trip(pg_store_t *s, const PGconn *conn)
{
    atomic_fetch_add_explicit(&s->round_trips, 1, memory_order_relaxed);
    if ((uintptr_t)conn == atomic_load_explicit(&s->wsess.id, memory_order_relaxed))
        atomic_fetch_add_explicit(&s->writer_round_trips, 1, memory_order_relaxed);
    else if ((uintptr_t)conn == atomic_load_explicit(&s->fsess.id, memory_order_relaxed))
        atomic_fetch_add_explicit(&s->fold_round_trips, 1, memory_order_relaxed);
}

/* res when the statement succeeded; else NULL, with *rc what its failure means. */
static PGresult *exec_result(pg_store_t *s, PGconn *conn, PGresult *res, const char *what, int *rc)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        *rc = STORE_OK;
        return res;
    }
    *rc = pg_result_rc(s, conn, res, what);
    PQclear(res);
    return NULL;
}

PGresult *pg_exec(pg_store_t *s, PGconn *conn, const char *what, const char *sql, int n, const char *const *params,
                  int *rc)
{
    pg_count_round_trip(s, conn);
    atomic_fetch_add_explicit(&s->statements, 1, memory_order_relaxed);
    return exec_result(s, conn, PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0), what, rc);
}

/* pg_exec of a statement prepared on conn, by name. */
static PGresult *exec_prepared(pg_store_t *s, PGconn *conn, const char *what, const char *name, int n,
                               const char *const *params, int *rc)
{
    pg_count_round_trip(s, conn);
    atomic_fetch_add_explicit(&s->statements, 1, memory_order_relaxed);
    return exec_result(s, conn, PQexecPrepared(conn, name, n, params, NULL, NULL, 0), what, rc);
}

int pg_run(pg_store_t *s, PGconn *conn, const char *what, const char *sql, int n, const char *const *params)
{
    int rc;
    PQclear(pg_exec(s, conn, what, sql, n, params, &rc));
    return rc;
}

/* --- pipelines: several statements in one round trip (libpq's pipeline mode) --- */

int pg_pipe_enter(pg_store_t *s, PGconn *conn)
{
    /* non-blocking while sending, so that a large batch and the server's answers cannot both wait
     * on full socket buffers (pg_pipe_sync reads while it sends) */
    if (PQenterPipelineMode(conn) != 1 || PQsetnonblocking(conn, 1) != 0)
        return pg_result_rc(s, conn, NULL, "pipeline");
    return STORE_OK;
}

int pg_pipe_send(pg_store_t *s, PGconn *conn, const char *sql, int n, const char *const *params)
{
    atomic_fetch_add_explicit(&s->statements, 1, memory_order_relaxed);
    return PQsendQueryParams(conn, sql, n, NULL, params, NULL, NULL, 0) == 1 ? STORE_OK
                                                                             : pg_result_rc(s, conn, NULL, "send");
}

int pg_pipe_send_prepared(pg_store_t *s, PGconn *conn, const char *name, int n, const char *const *params)
{
    atomic_fetch_add_explicit(&s->statements, 1, memory_order_relaxed);
    return PQsendQueryPrepared(conn, name, n, params, NULL, NULL, 0) == 1 ? STORE_OK
                                                                          : pg_result_rc(s, conn, NULL, "send");
}

int pg_pipe_sync(pg_store_t *s, PGconn *conn)
{
    pg_count_round_trip(s, conn);
    if (PQpipelineSync(conn) != 1)
        return pg_result_rc(s, conn, NULL, "sync");
    int r;
    while ((r = PQflush(conn)) == 1) {
        struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN | POLLOUT};
        if (poll(&pfd, 1, PG_PIPE_WAIT_MS) <= 0) /* keepalives end a dead peer sooner; this bounds the rest */
            break;
        if ((pfd.revents & POLLIN) && PQconsumeInput(conn) != 1)
            break;
    }
    return r == 0 ? STORE_OK : pg_result_rc(s, conn, NULL, "flush");
}

PGresult *pg_pipe_result(pg_store_t *s, PGconn *conn, const char *what, int *rc)
{
    PGresult *res = PQgetResult(conn);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (res)
        PQclear(PQgetResult(conn)); /* the NULL that ends this statement's results */
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        *rc = STORE_OK;
        return res;
    }
    /* an earlier statement's error aborted this one: that error is the one to report */
    *rc = st == PGRES_PIPELINE_ABORTED ? STORE_ERROR : pg_result_rc(s, conn, res, what);
    PQclear(res);
    return NULL;
}

int pg_pipe_leave(pg_store_t *s, PGconn *conn)
{
    for (int i = 0; i < PG_PIPE_DRAIN_MAX && PQstatus(conn) == CONNECTION_OK; i++) {
        PGresult *res = PQgetResult(conn);
        bool synced = res && PQresultStatus(res) == PGRES_PIPELINE_SYNC;
        PQclear(res);
        if (synced)
            break;
    }
    if (PQexitPipelineMode(conn) != 1 || PQsetnonblocking(conn, 0) != 0)
        return pg_result_rc(s, conn, NULL, "pipeline-end");
    return STORE_OK;
}

/* While the server is known to be down, a new connection is tried at most every PG_RECONNECT_MS:
 * a request then fails at once instead of waiting for a connect timeout on an event loop. */
static bool pg_may_try(pg_store_t *s)
{
    uint64_t since = atomic_load(&s->down_since_ms);
    return since == 0 || clock_ms(CLOCK_MONOTONIC) - since >= PG_RECONNECT_MS;
}

void pg_session_drop(pg_session_t *sess)
{
    if (!sess->conn)
        return;
    PQfinish(sess->conn); /* its session, and the fold lock with it, is gone */
    sess->conn = NULL;
    sess->asks_prepared = false;
    atomic_store_explicit(&sess->id, 0, memory_order_relaxed);
    if (sess->leader)
        log_line("level=warn event=fold-leader-lost");
    sess->leader = false;
}

/* A new write session's settings, in one round trip:
 * - its name in pg_stat_activity ("tallyd writer", "tallyd fold"; unless the URI named the application);
 * - no sequential scans: every statement of a write session reads or writes a few rows by key (a batch's
 *   locks and inserts, a fold's log range and upserts), but on tables that grow from empty the planner,
 *   until autovacuum's first analyze, prefers a sequential scan, a cost of the whole table per batch
 *   (measured: 469 scans of tally_rows in 917 batches, the row locks 0.85 ms a batch at 27 000 rows;
 *   bench/RESULTS.md). A statement with no other way still scans (the lists' rebuild);
 * - the fold's commits without a wait for the WAL's flush (pg_fold_begin says why); the writer's stay as
 *   the server, role or URI say (on, remote_apply, …). */
static int session_setup(pg_store_t *s, pg_session_t *sess, char *err, size_t errlen)
{
    const char *app = PQparameterStatus(sess->conn, "application_name");
    char name[64];
    snprintf(name, sizeof name, "%s %s", PG_APPLICATION_NAME, sess->name);
    const char *p[] = {app && strcmp(app, PG_APPLICATION_NAME) == 0 ? name
                       : app                                        ? app
                                                                    : "",
                       sess->async_commit ? "off" : NULL};
    int rc = pg_run(s, sess->conn, "session",
                    "SELECT set_config('application_name', $1, false), set_config('enable_seqscan', 'off', false),"
                    " CASE WHEN $2::text IS NOT NULL THEN set_config('synchronous_commit', $2, false) END",
                    2, p);
    if (rc != STORE_OK)
        snprintf(err, errlen, "setting the session up: %s", PQerrorMessage(sess->conn));
    return rc;
}

/* A new connection for sess, set up (NULL, with err said, when either step failed). */
static PGconn *session_connect(pg_store_t *s, pg_session_t *sess, char *err, size_t errlen)
{
    char cerr[256];
    sess->conn = pg_connect(s, cerr, sizeof cerr);
    if (!sess->conn)
        snprintf(err, errlen, "cannot connect to the database: %s", cerr);
    else if (session_setup(s, sess, err, errlen) != STORE_OK) {
        PQfinish(sess->conn);
        sess->conn = NULL;
    }
    atomic_store_explicit(&sess->id, (uintptr_t)sess->conn, memory_order_relaxed);
    return sess->conn;
}

PGconn *pg_session_conn(pg_store_t *s, pg_session_t *sess)
{
    if (sess->conn && PQstatus(sess->conn) == CONNECTION_OK)
        return sess->conn;
    pg_session_drop(sess);
    bool writer = sess == &s->wsess;
    uint64_t now = clock_ms(CLOCK_MONOTONIC);
    if (!pg_may_try(s) || (sess->failed_ms && now - sess->failed_ms < PG_RECONNECT_MS))
        return NULL;
    char err[320];
    if (!session_connect(s, sess, err, sizeof err)) {
        sess->failed_ms = now; /* wait before this session's next try */
        /* The writer's failure says the server cannot be reached; the fold's alone (a connection
         * refused at max_connections) does not make the node unready, nor drop its readers' pool. */
        if (writer) {
            pg_mark_down(s);
            atomic_store(&s->down_since_ms, now); /* every connection waits before the next try */
        }
        log_line("level=warn event=pg-connect-failed session=%s error=\"%s\"", sess->name, err);
        return NULL;
    }
    sess->failed_ms = 0;
    log_line("level=info event=pg-connected session=%s", sess->name);
    pg_mark_up(s);
    return sess->conn;
}

/* Reads what a connection's last user left unread (a COMMIT's answer); false when it failed. */
static bool pg_drain(PGconn *conn)
{
    bool ok = true;
    for (PGresult *res; (res = PQgetResult(conn));) {
        ok = ok && PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
    }
    return ok && PQtransactionStatus(conn) == PQTRANS_IDLE;
}

PGconn *pg_pool_take(pg_store_t *s, uint64_t *made)
{
    PGconn *conn = NULL;
    uint64_t epoch = atomic_load(&s->epoch);
    *made = epoch;
    pthread_mutex_lock(&s->pool_lock);
    while (s->pool_count && !conn) {
        conn = s->pool[--s->pool_count];
        if (s->pool_epoch[s->pool_count] != epoch) { /* made before the server was last lost */
            PQfinish(conn);
            conn = NULL;
        }
    }
    pthread_mutex_unlock(&s->pool_lock);
    if (conn && PQstatus(conn) == CONNECTION_OK && pg_drain(conn))
        return conn;
    PQfinish(conn);
    if (!pg_may_try(s))
        return NULL;
    conn = pg_connect(s, NULL, 0);
    if (conn && !reader_prepare(conn)) {
        pg_result_rc(s, conn, NULL, "prepare");
        PQfinish(conn);
        conn = NULL;
    }
    if (!conn) {
        pg_mark_down(s);
        atomic_store(&s->down_since_ms, clock_ms(CLOCK_MONOTONIC));
    }
    return conn;
}

void pg_pool_give(pg_store_t *s, PGconn *conn, uint64_t epoch)
{
    if (!conn)
        return;
    PGTransactionStatusType ts = PQtransactionStatus(conn);
    /* ACTIVE: a COMMIT sent; a connection a failure left in pipeline mode is not given again */
    if (PQstatus(conn) == CONNECTION_OK && (ts == PQTRANS_IDLE || ts == PQTRANS_ACTIVE) &&
        PQpipelineStatus(conn) == PQ_PIPELINE_OFF) {
        pthread_mutex_lock(&s->pool_lock);
        if (s->pool_count < PG_POOL_MAX) {
            s->pool_epoch[s->pool_count] = epoch;
            s->pool[s->pool_count++] = conn;
            conn = NULL;
        }
        pthread_mutex_unlock(&s->pool_lock);
    }
    PQfinish(conn);
}

/* --- array literals --- */

void pg_buf_add(pg_buf_t *b, const char *p, size_t n)
{
    textbuf_append(b, p, n);
    textbuf_append(b, "", 1); /* the NUL, not counted: the buffer is a C string at all times */
    if (!b->failed)
        b->len--;
}

void pg_buf_str(pg_buf_t *b, const char *text)
{
    pg_buf_add(b, text, strlen(text));
}

static void pg_buf_comma(pg_buf_t *b)
{
    if (b->len > 1)
        pg_buf_add(b, ",", 1);
}

void pg_buf_open(pg_buf_t *b)
{
    b->len = 0;
    b->failed = false;
    pg_buf_add(b, "{", 1);
}

void pg_buf_close(pg_buf_t *b)
{
    pg_buf_add(b, "}", 1);
}

void pg_buf_text_elem(pg_buf_t *b, const char *p, size_t n)
{
    pg_buf_comma(b);
    pg_buf_add(b, "\"", 1);
    for (size_t i = 0, run = 0; i <= n; i++) { /* copy runs, escaping " and \ */
        if (i == n || p[i] == '"' || p[i] == '\\') {
            pg_buf_add(b, p + run, i - run);
            if (i < n)
                pg_buf_add(b, p[i] == '"' ? "\\\"" : "\\\\", 2);
            run = i + 1;
        }
    }
    pg_buf_add(b, "\"", 1);
}

void pg_buf_int_elem(pg_buf_t *b, long long v)
{
    char num[24];
    pg_buf_comma(b);
    pg_buf_add(b, num, (size_t)snprintf(num, sizeof num, "%lld", v));
}

void pg_buf_free(pg_buf_t *b)
{
    free(b->buf);
    *b = (pg_buf_t){0};
}

/* --- fingerprints are kept as hex text --- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int pg_hex_fingerprint(const char *hex, size_t len, uint8_t out[FINGERPRINT_LEN])
{
    for (size_t k = 0; len == 2 * FINGERPRINT_LEN && k < FINGERPRINT_LEN; k++) {
        int hi = hexval(hex[2 * k]), lo = hexval(hex[2 * k + 1]);
        if (hi < 0 || lo < 0)
            break;
        out[k] = (uint8_t)(hi << 4 | lo);
        if (k + 1 == FINGERPRINT_LEN)
            return 0;
    }
    log_line("level=error event=store-corrupt table=tally_idem error=\"a fingerprint is not %d hex digits\"",
             2 * FINGERPRINT_LEN);
    return -1;
}

/* --- the write transaction's cache --- */

static size_t pg_pair_hash(span_t a, span_t b)
{
    uint64_t h = hash_bytes(HASH_SEED, a.ptr, a.len);
    h = hash_bytes(h ^ a.len, b.ptr, b.len); /* the length apart, so (ab, c) and (a, bc) differ */
    return (size_t)hash_mix(h);
}

static bool pg_entry_is(const pg_entry_t *e, span_t a, span_t b)
{
    return e->alen == a.len && e->blen == b.len && memcmp(e->a, a.ptr, a.len) == 0 && memcmp(e->b, b.ptr, b.len) == 0;
}

pg_entry_t *pg_cache_find(const pg_cache_t *c, span_t a, span_t b)
{
    if (!c->nslots)
        return NULL;
    for (size_t i = pg_pair_hash(a, b) & (c->nslots - 1);; i = (i + 1) & (c->nslots - 1)) {
        uint32_t slot = c->slots[i];
        if (!slot)
            return NULL;
        if (pg_entry_is(&c->entries[slot - 1], a, b))
            return &c->entries[slot - 1];
    }
}

static int pg_cache_grow(pg_cache_t *c)
{
    size_t cap = c->cap ? c->cap * 2 : 64, nslots = cap * 2;
    pg_entry_t *entries = realloc(c->entries, cap * sizeof *entries);
    if (!entries)
        return -1;
    c->entries = entries;
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t n = 0; n < c->count; n++) {
        const pg_entry_t *e = &c->entries[n];
        size_t i = pg_pair_hash((span_t){e->a, e->alen}, (span_t){e->b, e->blen}) & (nslots - 1);
        while (slots[i])
            i = (i + 1) & (nslots - 1);
        slots[i] = (uint32_t)n + 1;
    }
    free(c->slots);
    c->slots = slots;
    c->nslots = nslots;
    c->cap = cap;
    return 0;
}

pg_entry_t *pg_cache_put(pg_cache_t *c, span_t a, span_t b)
{
    pg_entry_t *e = pg_cache_find(c, a, b);
    if (e)
        return e;
    if (a.len > 255 || b.len > 255 || (c->count == c->cap && pg_cache_grow(c) != 0))
        return NULL;
    e = &c->entries[c->count];
    memset(e, 0, sizeof *e);
    memcpy(e->a, a.ptr, a.len);
    memcpy(e->b, b.ptr, b.len);
    e->alen = (uint8_t)a.len;
    e->blen = (uint8_t)b.len;
    size_t i = pg_pair_hash(a, b) & (c->nslots - 1);
    while (c->slots[i])
        i = (i + 1) & (c->nslots - 1);
    c->slots[i] = (uint32_t)++c->count;
    return e;
}

void pg_cache_clear(pg_cache_t *c)
{
    for (size_t n = 0; n < c->count; n++)
        free(c->entries[n].body);
    c->count = 0;
    if (c->slots)
        memset(c->slots, 0, c->nslots * sizeof *c->slots);
}

void pg_cache_free(pg_cache_t *c)
{
    pg_cache_clear(c);
    free(c->entries);
    free(c->slots);
    *c = (pg_cache_t){0};
}

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
    "CREATE TABLE tally_aux (key text COLLATE \"C\" PRIMARY KEY, value bytea NOT NULL);" PG_LISTS_SCHEMA_SQL;

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
                     "agree; see docs/operations.md \"Changing a shared setting\")",
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
 * would fold without keeping them, can no longer run beside this one. */
static int schema_upgrade_from_1(pg_store_t *s, const char *version)
{
    uint64_t t0 = clock_ms(CLOCK_MONOTONIC);
    const char *p[] = {version};
    PGresult *res = PQexec(s->wsess.conn, PG_LISTS_SCHEMA_SQL);
    bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    for (int i = 0; ok && i < PG_LISTS_BUILD_STEPS; i++)
        ok = pg_run(s, s->wsess.conn, "lists-build", PG_LISTS_BUILD_SQL[i], 0, NULL) == STORE_OK;
    if (!ok || pg_run(s, s->wsess.conn, "schema",
                      "UPDATE tally_meta SET value = $1 WHERE name IN ('schema_version', 'schema_compatible_from')", 1,
                      p) != STORE_OK)
        return STORE_ERROR;
    log_line("level=info event=pg-schema-upgraded from=1 to=%d lists_built_ms=%llu", PG_SCHEMA_VERSION,
             (unsigned long long)(clock_ms(CLOCK_MONOTONIC) - t0));
    return STORE_OK;
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
        const char *p[] = {version};
        res = PQexec(s->wsess.conn, SCHEMA_SQL);
        bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (!ok || pg_run(s, s->wsess.conn, "schema",
                          "INSERT INTO tally_meta VALUES ('schema_version', $1), ('schema_compatible_from', $1)", 1,
                          p) != STORE_OK)
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
        if (stored == 1 && schema_upgrade_from_1(s, version) != STORE_OK)
            goto fail;
    }
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
    if (!session_connect(s, &s->wsess, err, errlen) || schema_setup(s, kinds, opt, err, errlen) != STORE_OK)
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

static void write_free(pg_write_t *w)
{
    pg_cache_free(&w->rows);
    pg_cache_free(&w->idem);
    itemmap_free(&w->counts);
    listmap_free(&w->lists);
    free(w->log);
    PQclear(w->fold_log);
}

void pg_close(store_t *s_)
{
    pg_store_t *s = (pg_store_t *)s_;
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
    return atomic_load(&((pg_store_t *)s_)->up);
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

/* --- snapshots: a repeatable-read transaction on a pooled connection, begun at the first read --- */

int pg_read_begin(store_t *s_, store_read_t **out)
{
    pg_store_t *s = (pg_store_t *)s_;
    pg_read_t *r = calloc(1, sizeof *r);
    if (!r)
        return STORE_ERROR;
    r->base.ops = &pg_store_ops;
    r->store = s;
    if (!(r->conn = pg_pool_take(s, &r->epoch))) {
        free(r);
        return STORE_UNAVAILABLE;
    }
    *out = &r->base;
    return STORE_OK;
}

int pg_read_begin_single(store_t *s_, store_read_t **out)
{
    int rc = pg_read_begin(s_, out);
    if (rc == STORE_OK)
        ((pg_read_t *)*out)->single = true;
    return rc;
}

/* A single read's one statement: false (and STORE_ERROR) for a second one, which would be another
 * snapshot. */
static bool single_may_ask(pg_read_t *r, int *rc)
{
    if (r->single && r->asked) {
        log_line("level=error event=read-refused reason=\"a second question on a single read\"");
        *rc = STORE_ERROR;
        return false;
    }
    r->asked = true;
    return true;
}

void pg_read_end(store_read_t *r_)
{
    pg_read_t *r = (pg_read_t *)r_;
    /* The COMMIT's answer is read by the connection's next user (pg_pool_take): a read-only
     * snapshot has nothing to wait for, and a reader answers its client sooner. */
    if (r->began && !PQsendQuery(r->conn, "COMMIT")) {
        PQfinish(r->conn);
        r->conn = NULL;
    }
    pg_pool_give(r->store, r->conn, r->epoch);
    free(r);
}

PGresult *pg_rexec(pg_read_t *r, const char *what, const char *sql, int n, const char *const *params, int *rc)
{
    if (!single_may_ask(r, rc))
        return NULL;
    if (!r->began && !r->single) {
        if ((*rc = pg_run(r->store, r->conn, what, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL)) !=
            STORE_OK)
            return NULL;
        r->began = true;
    }
    return pg_exec(r->store, r->conn, what, sql, n, params, rc);
}

/* One counts row into counts: a kind's, or (disk code 0) the reactors', kept in many mode only. */
static void counts_row(const pg_store_t *s, long db, int64_t n, int64_t counts[KINDS_MAX + 1])
{
    if (db == 0 && s->kinds.mode == REACTION_MODE_MANY)
        counts[KIND_NONE] = n;
    else if (db > 0 && db <= s->db_kinds) {
        counts[s->db_to_cfg[db]] = n;
        if (s->kinds.mode == REACTION_MODE_ONE) /* one kind per user: the reactors are the sum */
            counts[KIND_NONE] += n;
    }
}

static void counts_fill(const pg_store_t *s, const PGresult *res, int kind_col, int n_col,
                        int64_t counts[KINDS_MAX + 1])
{
    for (int i = 0; i < PQntuples(res); i++)
        counts_row(s, strtol(PQgetvalue(res, i, kind_col), NULL, 10), strtoll(PQgetvalue(res, i, n_col), NULL, 10),
                   counts);
}

int pg_read_counts(store_read_t *r_, span_t item, int64_t counts[KINDS_MAX + 1])
{
    pg_read_t *r = (pg_read_t *)r_;
    char ibuf[ID_MAX_LEN + 1];
    snprintf(ibuf, sizeof ibuf, "%.*s", (int)item.len, item.ptr);
    const char *p[] = {ibuf};
    int rc;
    memset(counts, 0, sizeof(int64_t) * (KINDS_MAX + 1));
    PGresult *res = pg_rexec(r, "read-counts", "SELECT kind, n FROM tally_counts WHERE item = $1", 1, p, &rc);
    if (!res)
        return rc;
    counts_fill(r->store, res, 0, 1, counts);
    PQclear(res);
    return STORE_OK;
}

int pg_read_row(store_read_t *r_, span_t item, span_t user, reaction_row_t *row)
{
    pg_read_t *r = (pg_read_t *)r_;
    char ibuf[ID_MAX_LEN + 1], ubuf[ID_MAX_LEN + 1];
    snprintf(ibuf, sizeof ibuf, "%.*s", (int)item.len, item.ptr);
    snprintf(ubuf, sizeof ubuf, "%.*s", (int)user.len, user.ptr);
    const char *p[] = {ibuf, ubuf};
    int rc;
    *row = (reaction_row_t){KINDSET_EMPTY, 0};
    PGresult *res =
        pg_rexec(r, "read-row", "SELECT kind, version FROM tally_rows WHERE item = $1 AND \"user\" = $2", 2, p, &rc);
    if (!res)
        return rc;
    if (PQntuples(res) == 1) {
        row->set = pg_cfg_set(r->store, strtol(PQgetvalue(res, 0, 0), NULL, 10));
        row->version = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
    }
    PQclear(res);
    return STORE_OK;
}

/* The feed page's statement: the items' counts and, with a user, the user's rows among them. */
#define PAGE_COUNTS_SQL "SELECT 0, item, kind, n FROM tally_counts WHERE item = ANY($1::text[])"
static const char PAGE_SQL[] = PAGE_COUNTS_SQL;
static const char PAGE_USER_SQL[] = PAGE_COUNTS_SQL " UNION ALL SELECT 1, item, kind, version FROM tally_rows"
                                                    " WHERE \"user\" = $2 AND item = ANY($1::text[])";

static const struct {
    const char *name, *sql;
} READ_STMTS[PG_READ_STMTS] = {
    [PG_READ_PAGE] = {"tally_page", PAGE_SQL},
    [PG_READ_PAGE_USER] = {"tally_page_user", PAGE_USER_SQL},
    [PG_READ_LIST_BY_ITEM] = {"tally_list_item", PG_LIST_BY_ITEM_SQL},
    [PG_READ_LIST_BY_USER] = {"tally_list_user", PG_LIST_BY_USER_SQL},
    [PG_READ_LIST_ANY_BY_ITEM] = {"tally_list_any_item", PG_LIST_ANY_BY_ITEM_SQL},
    [PG_READ_LIST_ANY_BY_USER] = {"tally_list_any_user", PG_LIST_ANY_BY_USER_SQL},
};

static bool reader_prepare(PGconn *conn)
{
    /* A single read runs in the session's defaults: read committed and read-only here, whatever the
     * server's or the role's (a serializable default fails every statement on a hot standby). */
    PGresult *set = PQexec(conn, "SELECT set_config('default_transaction_isolation', 'read committed', false),"
                                 " set_config('default_transaction_read_only', 'on', false)");
    bool ok = set && PQresultStatus(set) == PGRES_TUPLES_OK;
    PQclear(set);
    for (int i = 0; i < PG_READ_STMTS && ok; i++) {
        PGresult *res = PQprepare(conn, READ_STMTS[i].name, READ_STMTS[i].sql, 0, NULL);
        ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
    }
    return ok;
}

PGresult *pg_rexec_prepared(pg_read_t *r, const char *what, pg_read_stmt_t stmt, int n, const char *const *params,
                            int *rc)
{
    pg_store_t *s = r->store;
    if (!single_may_ask(r, rc))
        return NULL;
    if (r->single) /* one statement, its own snapshot: no BEGIN, no COMMIT */
        return exec_prepared(s, r->conn, what, READ_STMTS[stmt].name, n, params, rc);
    bool send_begin = !r->began;
    *rc = pg_pipe_enter(s, r->conn);
    bool entered = *rc == STORE_OK;
    if (*rc == STORE_OK && send_begin)
        *rc = pg_pipe_send(s, r->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL);
    if (*rc == STORE_OK) {
        atomic_fetch_add_explicit(&s->statements, 1, memory_order_relaxed);
        if (PQsendQueryPrepared(r->conn, READ_STMTS[stmt].name, n, params, NULL, NULL, 0) != 1)
            *rc = pg_result_rc(s, r->conn, NULL, what);
    }
    if (*rc == STORE_OK)
        *rc = pg_pipe_sync(s, r->conn);
    if (*rc == STORE_OK && send_begin) {
        PQclear(pg_pipe_result(s, r->conn, "begin", rc));
        r->began = *rc == STORE_OK;
    }
    PGresult *res = *rc == STORE_OK ? pg_pipe_result(s, r->conn, what, rc) : NULL;
    if (entered) {
        int left = pg_pipe_leave(s, r->conn);
        if (*rc == STORE_OK && left != STORE_OK) {
            *rc = left;
            PQclear(res);
            res = NULL;
        }
    }
    r->began = r->began || (send_begin && PQtransactionStatus(r->conn) != PQTRANS_IDLE);
    return res;
}

/* A feed page in one round trip: the snapshot's BEGIN (when this is its first read) and the
 * prepared statement, pipelined. */
int pg_read_many(store_read_t *r_, const span_t *items, size_t n, span_t user, int64_t (*counts)[KINDS_MAX + 1],
                 reaction_row_t *rows)
{
    pg_read_t *r = (pg_read_t *)r_;
    pg_store_t *s = r->store;
    pg_buf_t list = {0};
    char who[ID_MAX_LEN + 1];
    snprintf(who, sizeof who, "%.*s", (int)(user.len < ID_MAX_LEN ? user.len : ID_MAX_LEN), user.ptr);
    pg_buf_open(&list);
    for (size_t i = 0; i < n; i++) {
        memset(counts[i], 0, sizeof counts[i]);
        if (user.len)
            rows[i] = (reaction_row_t){KINDSET_EMPTY, 0};
        pg_buf_text_elem(&list, items[i].ptr, items[i].len);
    }
    pg_buf_close(&list);
    if (list.failed) {
        pg_buf_free(&list);
        return STORE_ERROR;
    }
    const char *p[] = {list.buf, who};
    int rc;
    PGresult *res =
        pg_rexec_prepared(r, "read-many", user.len ? PG_READ_PAGE_USER : PG_READ_PAGE, user.len ? 2 : 1, p, &rc);
    pg_buf_free(&list);
    for (int t = 0; res && t < PQntuples(res); t++) {
        span_t item = {PQgetvalue(res, t, 1), (size_t)PQgetlength(res, t, 1)};
        long db = strtol(PQgetvalue(res, t, 2), NULL, 10);
        long long v = strtoll(PQgetvalue(res, t, 3), NULL, 10);
        for (size_t i = 0; i < n; i++) { /* an id may be asked twice */
            if (!span_eq(items[i], item))
                continue;
            if (PQgetvalue(res, t, 0)[0] == '0')
                counts_row(s, db, v, counts[i]);
            else if (PQgetvalue(res, t, 0)[0] == '1')
                rows[i] = (reaction_row_t){pg_cfg_set(s, db), (uint64_t)v};
        }
    }
    PQclear(res);
    return rc;
}

int pg_log_rows(const pg_store_t *s, const PGresult *res, store_log_fn fn, void *arg)
{
    for (int i = 0; i < PQntuples(res); i++) {
        transition_t t = {
            .item = {PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)},
            .user = {PQgetvalue(res, i, 2), (size_t)PQgetlength(res, i, 2)},
            .from = pg_cfg_set(s, strtol(PQgetvalue(res, i, 3), NULL, 10)),
            .to = pg_cfg_set(s, strtol(PQgetvalue(res, i, 4), NULL, 10)),
            .version = strtoull(PQgetvalue(res, i, 5), NULL, 10),
            .at_ms = strtoull(PQgetvalue(res, i, 6), NULL, 10),
        };
        if (fn(arg, strtoull(PQgetvalue(res, i, 0), NULL, 10), &t) != 0)
            break;
    }
    return STORE_OK;
}
