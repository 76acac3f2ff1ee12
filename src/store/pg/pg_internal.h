/* pg_internal.h — what the files of the PostgreSQL store share: its structs, the connection and
 * statement helpers and the row and idempotency caches of a write transaction (pg_codec.c, the floor
 * below the other files), and the few calls between its files. Only the files of src/store/pg include
 * it; nothing above the seam includes libpq. */
#ifndef TALLY_STORE_PG_INTERNAL_H
#define TALLY_STORE_PG_INTERNAL_H

#include <assert.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/itemmap.h"
#include "core/listchange.h"
#include "core/textbuf.h"
#include "store/store_impl.h"

/* 1: before the lists (tally_lists; a node of 2 builds them when it finds a 1, and 1 nodes cannot run
 * beside it: they would fold without keeping the lists); 2: before the idempotency claims
 * (tally_claims, made by a node of 3 that finds a 1 or a 2; 2 nodes run beside it, never claiming) */
#define PG_SCHEMA_VERSION 3
#define PG_SCHEMA_COMPATIBLE_FROM 2        /* the oldest version whose nodes may run beside this schema */
#define PG_LOCK_SCHEMA_SQL "7374616379001" /* advisory lock keys: creating the schema, */
#define PG_LOCK_FOLD_SQL "7374616379002"   /* and the fold leader */
#define PG_VOID_KEY_FROM "8"               /* substr's start of the user in a STORE_VOID_PREFIX key */
#define PG_LOCK_AUX_SQL "73746163"         /* with hashtext(prefix): a transaction deciding from aux records */
#define PG_FOLD_TRY_MS 1000                /* a node that does not fold tries to become the leader this often */
#define PG_RECONNECT_MS 1000               /* after a failed connection, wait this long before the next try */
#define PG_POOL_MAX 64                     /* idle reader connections kept at most */
#define PG_PIPE_WAIT_MS 30000              /* a pipeline waits this long at most for the socket */
#define PG_PIPE_DRAIN_MAX 64               /* results read at most when leaving a pipeline */
#define PG_APPLICATION_NAME "tallyd"       /* the readers'; the writer's and the fold's add their names */

typedef struct pg_store pg_store_t;
typedef struct pg_read pg_read_t;
typedef struct pg_write pg_write_t;

/* A growable text buffer for statements' array parameters (kept NUL-terminated). */
typedef textbuf_t pg_buf_t;

/* One row or idempotency record a write transaction has read or written. */
typedef struct {
    char a[256], b[256]; /* (item, user) of a row; (user, key) of a record */
    uint8_t alen, blen;
    bool dirty;   /* written in this transaction: flushed at commit */
    bool present; /* a row: version > 0; a record: a stored answer */
    bool stored;  /* it is in the table (read and locked from it): written back by an update, else inserted */
    reaction_row_t row;
    store_idem_t rec; /* rec.body points at body */
    char *body;
} pg_entry_t;

/* Entries keyed by (a, b): an array and an open-addressing index into it. */
typedef struct {
    pg_entry_t *entries;
    size_t count, cap;
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t nslots;
} pg_cache_t;

typedef struct {
    char item[256], user[256];
    uint8_t item_len, user_len;
    long from, to; /* disk codes (pg_db_set) */
    uint64_t version, at_ms;
    uint64_t seq; /* 0: taken at commit (log_append); else given (log_put) */
} pg_logged_t;

/* A connection of the store's own for writing, used by one thread: the writer's batches, or the
 * fold (which holds the fold leader's session lock on it). */
#define PG_SESSION_STMTS 32 /* statements prepared a session at most; the others are sent as text */

typedef struct {
    PGconn *conn;
    atomic_uintptr_t id;      /* conn as a number, for other threads to compare with */
    bool leader;              /* holds the fold lock on conn (the fold's session) */
    uint64_t leader_tried_ms; /* monotonic */
    bool async_commit;        /* its commits do not wait for the WAL's flush (the fold's: see pg_fold_begin) */
    const char *name;         /* "writer", "fold": its application_name is "tallyd NAME" */
    uint64_t failed_ms;       /* monotonic: its last connection failed then (0: it did not) */
    bool asks_prepared;       /* PG_ASKS_STMT and PG_ASKS_ROWS_STMT are prepared on conn (pg_counts_at_commit) */
    /* the statements its transactions pipeline, by their (static) text: each is prepared on conn at the
     * start of the transaction after its first use (pg_session_prepare), then sent by name */
    struct {
        const char *sql;
        bool prepared;
    } stmts[PG_SESSION_STMTS];
    size_t nstmts;
} pg_session_t;

struct pg_write {
    store_write_t base;
    pg_store_t *store;
    pg_session_t *sess; /* the connection it runs on */
    bool active, began;
    pthread_t thread; /* the one that began it: only it may use the transaction (one connection, one user) */
    bool piped;       /* pg_wrun sends into a pipeline (at commit) instead of waiting for each result */
    size_t piped_count;
    size_t log_result; /* the log statement's place among the pipeline's results (from 1); 0: none */
    pg_cache_t rows, idem;
    pg_cache_t claims; /* idempotency claims (pg_claims.c): present = a claim holds the key (rec.fingerprint) */
    pg_cache_t voided; /* users whose voided flag was read (under the lock): (user, ""), present = voided */
    pg_logged_t *log;
    size_t log_count, log_cap;
    itemmap_t counts; /* deltas by configured code, flushed at commit */
    listmap_t lists;  /* the fold's changes of the lists, by pair, flushed at commit (pg_lists.c) */
    bool checkpoint_dirty;
    bool aux_dirty;         /* an auxiliary record was put: a fold's transaction then commits durably */
    bool checkpoint_locked; /* the leader holds the checkpoint's row lock: checkpoint is its value */
    uint64_t checkpoint;
    PGresult *fold_log;       /* the log entries after the checkpoint, read with the batch's rows (prepare) */
    size_t fold_scan;         /* how many fold_log asked for */
    store_counts_ask_t *asks; /* the answers' counts to fill at commit (pg_counts_at_commit); NULL: none */
    size_t nasks;
    size_t asks_result;  /* their statement's place among the pipeline's results (from 1); 0: none */
    bool asks_rows;      /* that statement is PG_ASKS_ROWS_STMT */
    itemmap_t ask_items; /* the asks' items, each once (flush_asks); then their counts before the batch (asks_read) */
};

/* A write transaction's calls: it is open, and used on the thread that began it. Cheap, so kept in
 * release builds (asserts are not compiled out here), as LMDB_WRITE_CHECK is. */
#define PG_WRITE_CHECK(w) assert((w)->active &&pthread_equal((w)->thread, pthread_self()))

struct pg_read {
    store_read_t base;
    pg_store_t *store;
    PGconn *conn;
    uint64_t epoch;
    bool began;
    bool single; /* store_read_begin_single: one statement, no transaction */
    bool asked;  /* a single read's statement has run */
};

struct pg_store {
    store_t base;
    char *conninfo;
    kinds_t kinds;
    int db_kinds;
    int cfg_to_db[KINDS_MAX + 1];
    int db_to_cfg[KINDS_MAX + 1];
    pg_session_t wsess;        /* the writer's batches (writer thread only; also the opening's) */
    pg_session_t fsess;        /* the fold's (fold thread only) */
    struct pg_write write;     /* on wsess */
    struct pg_write fold;      /* on fsess */
    pthread_mutex_t pool_lock; /* idle reader connections */
    PGconn *pool[PG_POOL_MAX];
    uint64_t pool_epoch[PG_POOL_MAX]; /* the epoch each idle connection was made in */
    size_t pool_count;
    atomic_uint_fast64_t epoch; /* rises when the server was found gone: older connections are stale */
    atomic_bool up;             /* the last contact with the server succeeded */
    atomic_uint_fast64_t round_trips, statements, transactions;
    atomic_uint_fast64_t writer_round_trips; /* of round_trips, on wsess's connection */
    atomic_uint_fast64_t fold_round_trips;   /* of round_trips, on fsess's */
    histogram_t commit_seconds;
    atomic_uint_fast64_t down_since_ms; /* monotonic; 0 when up */
    /* Opened while the server could not be reached (store_options_t.open_unreachable): the schema is
     * set up and the check made at the writer session's first connection; until then nothing else
     * connects. refused: the check failed, for good (the store stays down). */
    atomic_bool pending;
    bool refused;
    kinds_t open_kinds;
    store_options_t open_opt;
};

/* The setup a store opened while unreachable still owes, on the writer session's new connection:
 * STORE_OK once done (the store then serves), else the connection is to be dropped. Writer thread. */
int pg_open_pending(pg_store_t *s);

/* Connects with tally's defaults (timeouts, keepalives) under the URI's own settings; sets the
 * session up. NULL with err filled when it fails. */
PGconn *pg_connect(const pg_store_t *s, char *err, size_t errlen);

/* A STORE_ code for a failed result (or a NULL one), logging what the server said; marks the
 * store down when the connection is gone. */
int pg_result_rc(pg_store_t *s, PGconn *conn, const PGresult *res, const char *what);

/* One round trip on conn, for the metrics (the writer's own counted apart). */
void pg_count_round_trip(pg_store_t *s, const PGconn *conn);
/* Runs sql with text parameters; the result (PGRES_COMMAND_OK or _TUPLES_OK) or NULL with *rc set. */
PGresult *pg_exec(pg_store_t *s, PGconn *conn, const char *what, const char *sql, int n, const char *const *params,
                  int *rc);
/* pg_exec for statements without rows: a STORE_ code. */
int pg_run(pg_store_t *s, PGconn *conn, const char *what, const char *sql, int n, const char *const *params);

/* A write session's connection, reconnected (and the leadership dropped) when it was lost; NULL
 * while the server cannot be reached. */
PGconn *pg_session_conn(pg_store_t *s, pg_session_t *sess);
/* A new connection for sess, set up (NULL, with err said, when either step failed). */
PGconn *pg_session_connect(pg_store_t *s, pg_session_t *sess, char *err, size_t errlen);
/* Drops a session's connection (and the fold lock with it): the next use connects again. */
void pg_session_drop(pg_session_t *sess);

/* A reader connection from the pool (or a new one), and its return. */
/* *epoch: when the connection was made, to give back with it. */
PGconn *pg_pool_take(pg_store_t *s, uint64_t *epoch);
void pg_pool_give(pg_store_t *s, PGconn *conn, uint64_t epoch);

void pg_mark_up(pg_store_t *s);

/* Pipelines: statements sent together and their results read in order, in one round trip. */
int pg_pipe_enter(pg_store_t *s, PGconn *conn);
int pg_pipe_send(pg_store_t *s, PGconn *conn, const char *sql, int n, const char *const *params);
/* The same for a statement prepared on conn (by name). */
int pg_pipe_send_prepared(pg_store_t *s, PGconn *conn, const char *name, int n, const char *const *params);
/* pg_pipe_send on a write session, sql a static string: by name once it is prepared on the connection */
int pg_pipe_send_session(pg_store_t *s, pg_session_t *sess, const char *sql, int n, const char *const *params);
/* Prepares the statements sent as text since the last call (outside a pipeline and a transaction). */
int pg_session_prepare(pg_store_t *s, pg_session_t *sess);

/* The write answers' counts at commit (pg_write.c's flush_asks), prepared on every write session. */
#define PG_ASKS_STMT "tally_asks"
extern const char PG_ASKS_SQL[];
/* The same for a batch that writes no record whose answer carries counts: the rows to count, in C. */
#define PG_ASKS_ROWS_STMT "tally_asks_rows"
extern const char PG_ASKS_ROWS_SQL[];
int pg_pipe_sync(pg_store_t *s, PGconn *conn);
PGresult *pg_pipe_result(pg_store_t *s, PGconn *conn, const char *what, int *rc); /* the next statement's */
int pg_pipe_leave(pg_store_t *s, PGconn *conn); /* after the last result: back to one statement at a time */

/* Array literals of text ("{\"a\",\"b\"}") and of integers, for unnest() parameters. */
void pg_buf_add(pg_buf_t *b, const char *p, size_t n);
void pg_buf_str(pg_buf_t *b, const char *text);
void pg_buf_text_elem(pg_buf_t *b, const char *p, size_t n); /* a quoted element, with a comma before if needed */
void pg_buf_int_elem(pg_buf_t *b, long long v);
void pg_buf_open(pg_buf_t *b);  /* "{" */
void pg_buf_close(pg_buf_t *b); /* "}" and a terminating NUL */
void pg_buf_free(pg_buf_t *b);
/* b = the text[] literal of n items (one parameter for "item = ANY($1::text[])"): STORE_OK, or
 * STORE_ERROR with b freed. */
int pg_buf_items(pg_buf_t *b, const span_t *items, size_t n);

/* Statements' text parameters: a number (above INT64_MAX, "no limit", as INT64_MAX, which fits a
 * bigint) and an id (at most ID_MAX_LEN bytes, NUL-terminated). */
#define PG_NUM_LEN 24
void pg_num(char out[PG_NUM_LEN], uint64_t v);
void pg_cstr(char out[ID_MAX_LEN + 1], span_t s);

/* A fingerprint from its hex text; -1 (logged as corrupt) when it is not. */
int pg_hex_fingerprint(const char *hex, size_t len, uint8_t out[FINGERPRINT_LEN]);

/* The cache of a write transaction. */
pg_entry_t *pg_cache_find(const pg_cache_t *c, span_t a, span_t b);
pg_entry_t *pg_cache_put(pg_cache_t *c, span_t a, span_t b); /* found or added (zeroed); NULL: out of memory */
void pg_cache_clear(pg_cache_t *c);
void pg_cache_free(pg_cache_t *c);

/* Kind codes: on disk (the order kinds were first stored in) and configured. A set is stored as one
 * disk code when it holds at most one kind (0: none; the only shape of one mode), or as the negated
 * set of disk codes (bit d for code d) when it holds several. */
static inline kindset_t pg_cfg_set(const pg_store_t *s, long db)
{
    if (db >= 0)
        return db > 0 && db <= s->db_kinds ? kindset_of(s->db_to_cfg[db]) : KINDSET_EMPTY;
    kindset_t set = KINDSET_EMPTY;
    for (unsigned long m = (unsigned long)-db; m; m &= m - 1) {
        int d = __builtin_ctzl(m);
        if (d >= 1 && d <= s->db_kinds)
            set |= kindset_of(s->db_to_cfg[d]);
    }
    return set;
}

static inline long pg_db_set(const pg_store_t *s, kindset_t set)
{
    if (kindset_size(set) <= 1)
        return s->cfg_to_db[kindset_single(set)];
    long db = 0;
    for (; set; set &= set - 1)
        db |= 1l << s->cfg_to_db[__builtin_ctz(set)];
    return -db;
}

/* The operations of store.h, pg_<name> for each entry of STORE_OPS, gathered in pg_store_ops
 * (pg_ops.c). */
#define PG_DECLARE_OP(ret, name, handle, params, args) ret pg_##name params;
#define PG_DECLARE_PROC(name, handle, params, args) void pg_##name params;
STORE_OPS(PG_DECLARE_OP, PG_DECLARE_PROC)
#undef PG_DECLARE_OP
#undef PG_DECLARE_PROC

/* Statements of a write transaction: BEGIN is sent before the first. */
PGresult *pg_wexec(pg_write_t *w, const char *what, const char *sql, int n, const char *const *params, int *rc);
int pg_wrun(pg_write_t *w, const char *what, const char *sql, int n, const char *const *params);

/* Locks the record (user, key), not named by store_write_prepare, into w's cache: absent when it
 * does not exist (pg_write.c). */
int pg_idem_lock(pg_write_t *w, span_t user, span_t key);

/* The auxiliary records whose key starts with p[0], in key order, to fn; on conn, in whatever
 * transaction it is in (a snapshot's, a write transaction's). */
int pg_aux_rows(pg_store_t *s, PGconn *conn, const char *what, const char *const p[1], store_aux_fn fn, void *arg);
/* Runs sql, a DELETE whose one row is the count of what it deleted, in w: *deleted. */
int pg_count_deleted(pg_write_t *w, const char *what, const char *sql, int n, const char *const *p, size_t *deleted);

/* Runs a read in r's snapshot (a repeatable-read transaction begun before its first statement). */
PGresult *pg_rexec(pg_read_t *r, const char *what, const char *sql, int n, const char *const *params, int *rc);

/* The reads prepared on every reader connection when it is made (parsed once, not per request), and
 * pg_rexec_prepared: one of them in r's snapshot in one round trip (its BEGIN pipelined before it when
 * it is the snapshot's first statement). */
typedef enum {
    PG_READ_PAGE,
    PG_READ_PAGE_USER,
    PG_READ_LIST_BY_ITEM,
    PG_READ_LIST_BY_USER,
    PG_READ_LIST_ANY_BY_ITEM,
    PG_READ_LIST_ANY_BY_USER,
    PG_READ_STMTS
} pg_read_stmt_t;
PGresult *pg_rexec_prepared(pg_read_t *r, const char *what, pg_read_stmt_t stmt, int n, const char *const *params,
                            int *rc);

/* Calls fn for each log row of res (seq, item, user, from, to, version, at_ms). */
int pg_log_rows(const pg_store_t *s, const PGresult *res, store_log_fn fn, void *arg);
#define PG_LOG_COLUMNS "seq, item, \"user\", from_kind, to_kind, version, at_ms"

/* Entries after $1, at most $2: positions have no gaps, so they lie in ($1, $3] with $3 = $1 + $2,
 * a range of the primary key that is planned as one whatever the table's statistics say. */
#define PG_LOG_RANGE_SQL "SELECT " PG_LOG_COLUMNS " FROM tally_log WHERE seq > $1 AND seq <= $3 ORDER BY seq LIMIT $2"
static inline uint64_t pg_log_range_end(uint64_t after, uint64_t limit)
{
    return limit > (uint64_t)INT64_MAX - after ? (uint64_t)INT64_MAX : after + limit;
}

/* The claims the transaction changed into the commit's pipeline (pg_claims.c). */
int pg_claims_flush(pg_write_t *w);
/* The locking read of the claims of (user, key) pairs the cache does not hold, sent into the pipeline
 * w's session is in (store_write_prepare's round trip), then its result read into the cache
 * (pg_claims.c). */
int pg_claims_lock_send(pg_write_t *w, const store_pair_t *pairs, size_t n, bool *sent);
int pg_claims_lock_read(pg_write_t *w, const store_pair_t *pairs, size_t n, bool sent);
/* The lists' changes of the transaction into the commit's pipeline. */
int pg_lists_flush(pg_write_t *w);
/* The statements that build the lists from tally_rows and tally_log (a rebuild, the upgrade from 1). */
#define PG_LISTS_BUILD_STEPS 5
extern const char *const PG_LISTS_BUILD_SQL[PG_LISTS_BUILD_STEPS];
#define PG_CLAIMS_SCHEMA_SQL                                                                                           \
    "CREATE TABLE tally_claims (\"user\" text COLLATE \"C\" NOT NULL, key text COLLATE \"C\" NOT NULL,"                \
    "  expires_ms bigint NOT NULL, fingerprint bytea NOT NULL, PRIMARY KEY (\"user\", key));"                          \
    "CREATE INDEX tally_claims_by_expiry ON tally_claims (expires_ms);"
#define PG_LISTS_SCHEMA_SQL                                                                                            \
    "CREATE TABLE tally_lists (item text COLLATE \"C\" NOT NULL, \"user\" text COLLATE \"C\" NOT NULL,"                \
    "  kind integer NOT NULL, seq bigint NOT NULL, at_ms bigint NOT NULL, kinds integer NOT NULL,"                     \
    "  PRIMARY KEY (item, \"user\", kind));"                                                                           \
    "CREATE INDEX tally_lists_by_item ON tally_lists (item, kind, seq, \"user\");"                                     \
    "CREATE INDEX tally_lists_by_user ON tally_lists (\"user\", kind, seq, item);"

extern const store_ops_t pg_store_ops;

#endif
