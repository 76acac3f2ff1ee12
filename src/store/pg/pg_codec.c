/* pg_codec.c — the floor of the PostgreSQL store: what its other files call and nothing of theirs it
 * calls. Connecting (with the timeouts a failover needs), the write sessions and the pool of reader
 * connections, running statements (one at a time, in a pipeline, in a write transaction or a
 * snapshot, the reads prepared on every reader connection), array literals, hex, the write
 * transaction's cache, and the decoding of log rows. See docs/architecture.md "PostgreSQL". */
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

/* A write session's statements are planned once per connection, not once per batch: with a batch
 * of 16 writes (two nodes on one database, each with half the load) the planning of a batch's ten
 * statements was a sixth of PostgreSQL's CPU (bench/RESULTS.md). A statement is sent as text the first
 * time (inside a pipeline a prepare would add a result the caller does not expect), prepared at the
 * start of the session's next transaction, and sent by name from then on. Its plan: the session runs
 * with enable_seqscan off (session_setup), so a generic plan made while a table is small is still an
 * index plan as it grows. The key is the text's address (the callers pass static strings), checked
 * against the text itself. */
int pg_pipe_send_session(pg_store_t *s, pg_session_t *sess, const char *sql, int n, const char *const *params)
{
    for (size_t i = 0; i < sess->nstmts; i++) {
        if (sess->stmts[i].sql != sql)
            continue;
        if (!sess->stmts[i].prepared)
            break;
        char name[32];
        snprintf(name, sizeof name, "tally_w%zu", i);
        return pg_pipe_send_prepared(s, sess->conn, name, n, params);
    }
    bool known = false;
    for (size_t i = 0; !known && i < sess->nstmts; i++)
        known = sess->stmts[i].sql == sql;
    if (!known && sess->nstmts < PG_SESSION_STMTS)
        sess->stmts[sess->nstmts++].sql = sql, sess->stmts[sess->nstmts - 1].prepared = false;
    return pg_pipe_send(s, sess->conn, sql, n, params);
}

int pg_session_prepare(pg_store_t *s, pg_session_t *sess)
{
    for (size_t i = 0; i < sess->nstmts; i++) {
        if (sess->stmts[i].prepared)
            continue;
        char name[32];
        snprintf(name, sizeof name, "tally_w%zu", i);
        PGresult *res = PQprepare(sess->conn, name, sess->stmts[i].sql, 0, NULL);
        int rc =
            res && PQresultStatus(res) == PGRES_COMMAND_OK ? STORE_OK : pg_result_rc(s, sess->conn, res, "prepare");
        PQclear(res);
        if (rc != STORE_OK)
            return rc;
        sess->stmts[i].prepared = true;
    }
    return STORE_OK;
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
    sess->nstmts = 0; /* prepared statements live and die with their connection */
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
 * - its prepared statements (pg_pipe_send_session) planned once: PostgreSQL's default would plan each
 *   execution again (its cost guess for a generic plan over unnest() of an array parameter is above the
 *   custom plans', so it never switches), which is most of what preparing saves;
 * - the fold's commits without a wait for the WAL's flush (pg_fold_begin says why); the writer's stay as
 *   the server, role or URI say (on, remote_apply, …);
 * - read committed for every transaction, whatever the server's, database's or role's default: a write
 *   decides after its locks from what the statement after them sees (under repeatable read, a plain
 *   BEGIN, such as the schema step's, would take its snapshot before its advisory lock was granted). */
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
                    " set_config('plan_cache_mode', 'force_generic_plan', false),"
                    " set_config('default_transaction_isolation', 'read committed', false),"
                    " CASE WHEN $2::text IS NOT NULL THEN set_config('synchronous_commit', $2, false) END",
                    2, p);
    if (rc != STORE_OK)
        snprintf(err, errlen, "setting the session up: %s", PQerrorMessage(sess->conn));
    return rc;
}

/* A new connection for sess, set up (NULL, with err said, when either step failed). */
PGconn *pg_session_connect(pg_store_t *s, pg_session_t *sess, char *err, size_t errlen)
{
    char cerr[256];
    sess->nstmts = 0;
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
    if (atomic_load(&s->pending) && (!writer || s->refused))
        return NULL; /* only the writer's first connection sets a store opened unreachable up */
    if (!pg_session_connect(s, sess, err, sizeof err)) {
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
    if (atomic_load(&s->pending) && pg_open_pending(s) != STORE_OK) {
        pg_session_drop(sess);
        sess->failed_ms = now;
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
    if (!pg_may_try(s) || atomic_load(&s->pending))
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

int pg_buf_items(pg_buf_t *b, const span_t *items, size_t n)
{
    pg_buf_open(b);
    for (size_t i = 0; i < n; i++)
        pg_buf_text_elem(b, items[i].ptr, items[i].len);
    pg_buf_close(b);
    if (!b->failed)
        return STORE_OK;
    pg_buf_free(b);
    return STORE_ERROR;
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

/* --- statements of a write transaction and of a snapshot --- */

PGresult *pg_wexec(pg_write_t *w, const char *what, const char *sql, int n, const char *const *params, int *rc)
{
    pg_store_t *s = w->store;
    if (!w->began) {
        if ((*rc = pg_run(s, w->sess->conn, what, "BEGIN ISOLATION LEVEL READ COMMITTED", 0, NULL)) != STORE_OK)
            return NULL;
        w->began = true;
    }
    return pg_exec(s, w->sess->conn, what, sql, n, params, rc);
}

int pg_wrun(pg_write_t *w, const char *what, const char *sql, int n, const char *const *params)
{
    int rc;
    if (w->piped) { /* results are read after the pipeline's sync (pg_write_commit) */
        pg_store_t *s = w->store;
        if (!w->began) {
            if ((rc = pg_pipe_send(s, w->sess->conn, "BEGIN ISOLATION LEVEL READ COMMITTED", 0, NULL)) != STORE_OK)
                return rc;
            w->began = true;
            w->piped_count++;
        }
        rc = pg_pipe_send_session(s, w->sess, sql, n, params);
        w->piped_count += rc == STORE_OK;
        return rc;
    }
    PQclear(pg_wexec(w, what, sql, n, params, &rc));
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

/* The feed page's statement: the items' counts and, with a user, the user's rows among them. */
#define PAGE_COUNTS_SQL "SELECT 0, item, kind, n FROM tally_counts WHERE item = ANY($1::text[])"

static const char PAGE_SQL[] = PAGE_COUNTS_SQL;

static const char PAGE_USER_SQL[] = PAGE_COUNTS_SQL " UNION ALL SELECT 1, item, kind, version FROM tally_rows"
                                                    " WHERE \"user\" = $2 AND item = ANY($1::text[])";

/* A page of a list: (seq, name) below the cursor (with no cursor, below the largest position and "",
 * i.e. all); the page first (one backwards range scan of one index, with its LIMIT), then, for a page
 * of one kind, each entry's pair's kind-0 row (a primary-key lookup) for the set; a page of any kind
 * reads kind-0 rows, which hold it. Prepared on every reader connection. */
/* The page's range of one index: key = $1, kind = $2, (seq, other) below ($3, $4), newest first,
 * $5 of them. */
#define LIST_RANGE(key, other)                                                                                         \
    " FROM tally_lists WHERE " key " = $1 AND kind = $2 AND (seq, " other ") < ($3::bigint, $4::text COLLATE \"C\")"   \
    " ORDER BY seq DESC, " other " DESC LIMIT $5"
#define LIST_ANY(key, other) "SELECT " other ", seq, at_ms, kinds" LIST_RANGE(key, other)
#define LIST_KIND(key, other)                                                                                          \
    "SELECT l." other ", l.seq, l.at_ms, a.kinds FROM (SELECT item, \"user\", seq, at_ms" LIST_RANGE(                  \
        key, other) ") l JOIN tally_lists a ON a.item = l.item AND a.\"user\" = l.\"user\" AND a.kind = 0"             \
                    " ORDER BY l.seq DESC, l." other " DESC"
static const char PG_LIST_ANY_BY_ITEM_SQL[] = LIST_ANY("item", "\"user\"");
static const char PG_LIST_ANY_BY_USER_SQL[] = LIST_ANY("\"user\"", "item");
static const char PG_LIST_BY_ITEM_SQL[] = LIST_KIND("item", "\"user\"");
static const char PG_LIST_BY_USER_SQL[] = LIST_KIND("\"user\"", "item");

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

int pg_log_rows(const pg_store_t *s, const PGresult *res, store_log_fn fn, void *arg)
{
    for (int i = 0; i < PQntuples(res); i++) {
        transition_t t = {
            .item = {PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)},
            .user = {PQgetvalue(res, i, 2), (size_t)PQgetlength(res, i, 2)},
            .from = pg_cfg_set(s, strtol(PQgetvalue(res, i, 3), NULL, 10)),
            .to = pg_cfg_set(s, strtol(PQgetvalue(res, i, 4), NULL, 10)),
            .at_ms = strtoull(PQgetvalue(res, i, 6), NULL, 10),
        };
        if (!transition_version_unpack(&t, strtoull(PQgetvalue(res, i, 5), NULL, 10)))
            return STORE_ERROR;
        if (fn(arg, strtoull(PQgetvalue(res, i, 0), NULL, 10), &t) != 0)
            break;
    }
    return STORE_OK;
}

/* The auxiliary records whose key starts with p[0], in key order, to fn (binary results: the values
 * are bytes); on conn, in whatever transaction it is in. */
int pg_aux_rows(pg_store_t *s, PGconn *conn, const char *what, const char *const p[1], store_aux_fn fn, void *arg)
{
    pg_count_round_trip(s, conn);
    PGresult *res = PQexecParams(conn, "SELECT key, value FROM tally_aux WHERE starts_with(key, $1) ORDER BY key", 1,
                                 NULL, p, NULL, NULL, 1);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = pg_result_rc(s, conn, res, what);
        PQclear(res);
        return rc;
    }
    for (int i = 0; i < PQntuples(res); i++)
        if (fn(arg, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)},
               (span_t){PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)}) != 0)
            break;
    PQclear(res);
    return STORE_OK;
}

int pg_count_deleted(pg_write_t *w, const char *what, const char *sql, int n, const char *const *p, size_t *deleted)
{
    int rc;
    *deleted = 0;
    PGresult *res = pg_wexec(w, what, sql, n, p, &rc);
    if (!res)
        return rc;
    *deleted = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return STORE_OK;
}

/* --- parameters --- */

void pg_num(char out[PG_NUM_LEN], uint64_t v)
{
    snprintf(out, PG_NUM_LEN, "%" PRIu64, v > INT64_MAX ? (uint64_t)INT64_MAX : v); /* "no limit" fits a bigint */
}

void pg_cstr(char out[ID_MAX_LEN + 1], span_t s)
{
    snprintf(out, ID_MAX_LEN + 1, "%.*s", (int)(s.len > ID_MAX_LEN ? ID_MAX_LEN : s.len), s.ptr);
}
