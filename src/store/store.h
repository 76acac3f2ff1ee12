/* store.h — the storage seam. The only contract between tally and the bytes it keeps.
 *
 * Above this line nothing knows the storage engine. The writer thread opens one write transaction
 * per batch, applies its commands and the pipeline's fold in it, and commits once: the commit is
 * durable (on stable storage) when store_write_commit returns 0. Readers take snapshots that never
 * wait for the writer. Threads: one write transaction at a time (the writer thread; on a store that
 * folds apart also one fold transaction, on the fold thread); any number of snapshots, each used by
 * the thread that began it.
 *
 * Reaction codes crossing this seam are the configured kind codes of kinds.h (0 = none); the store
 * keeps its own stable numbering on disk and translates.
 *
 * Return codes, for every operation below that returns int unless its entry says more:
 *   STORE_OK           done;
 *   STORE_ERROR        I/O, corruption or a broken rule (a snapshot asked twice in single mode):
 *                      a write transaction is then void (abort it);
 *   STORE_FULL         writes of the embedded store: the map or the disk is full (void, as above);
 *   STORE_RETRY        write transactions of the PostgreSQL store only: a deadlock or serialization
 *                      failure with another node; void, and the same batch may run again at once;
 *   STORE_UNAVAILABLE  the PostgreSQL store only, any call that talks to the server: it cannot be
 *                      reached (after a commit the outcome is unknown).
 * The embedded (LMDB) store never returns STORE_RETRY or STORE_UNAVAILABLE.
 *
 * Memory: spans and names given to a callback (store_*_fn) are valid only during that call; spans
 * the caller passes in are only read during the call (nothing keeps a pointer to them); a
 * store_idem_t body read with store_idem_get is valid until the transaction's next write. Handles
 * (store_t, store_read_t, store_write_t) are the store's: freed by store_close, store_read_end,
 * store_write_commit / store_write_abort.
 *
 * The operations are listed once, in STORE_OPS below: from that list come these declarations, the
 * table each store fills (store_impl.h) and the dispatch (store.c). Adding an operation is one
 * entry there and one function in each store (lmdb_<name>, pg_<name>), each store's table being
 * made from the same list (lmdb_ops.c, pg_ops.c). */
#ifndef TALLY_STORE_STORE_H
#define TALLY_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/fingerprint.h"
#include "core/histogram.h"
#include "core/ids.h"
#include "core/kinds.h"
#include "core/listchange.h"
#include "core/reaction.h"
#include "core/span.h"

enum {
    STORE_OK = 0,
    STORE_NOTFOUND = 1,
    STORE_ERROR = -1, /* I/O or corruption: the transaction is void */
    STORE_FULL = -2,  /* no space (map or disk): the transaction is void */
    /* A conflict with another writer of a shared store (a deadlock, a serialization failure): the
     * transaction is void and the same batch may be run again at once. */
    STORE_RETRY = -3,
    /* The store cannot be reached (a database server down or a broken connection). After a commit
     * the outcome is unknown: it may have been applied. */
    STORE_UNAVAILABLE = -4,
};

#define STORE_MAP_SIZE_DEFAULT (256ull << 30)

/* The auxiliary record that marks a user as voided: its key is this prefix and the user's id (its
 * value is the void's time). The stores read it themselves: a recount leaves voided users' rows out,
 * a write asks store_user_voided. */
#define STORE_VOID_PREFIX "void/u/"

/* The auxiliary record of the newest position pruned from the log (decimal), where the log may have
 * gaps: on the PostgreSQL store, a user's list entry folded from another shard takes a position that
 * has no entry (engine/userfold.h), so the oldest entry retained is not where pruning stopped. Kept by
 * the PostgreSQL store's pruning, in the same statement; the embedded store's log has no gaps and
 * keeps none. */
#define STORE_LOG_PRUNED_KEY "log/pruned"

typedef struct store store_t;
typedef struct store_read store_read_t;
typedef struct store_write store_write_t;

typedef struct {
    uint64_t map_size_bytes; /* virtual size of the map; the file stays as small as the data */
    /* Memory for a filter of which (item, user) pairs have a row (0: none). A row that does not
     * exist, the usual case for a viewer, is then answered without searching the B-tree. It is
     * filled from the rows by a thread of its own after opening; until then every row is looked up. */
    uint64_t row_filter_bytes;
    /* The embedded store's journal: how often the data file is synced and recorded as its base
     * (0: every 250 ms, JOURNAL_CHECKPOINT_MS). Tests set it long, to choose the crash point. */
    uint64_t checkpoint_interval_ms;
    /* Settings every process sharing the store must agree on (a shared store keeps them and
     * refuses a process with other values); 0 / NULL: not checked (tools). */
    uint64_t idem_ttl_ms;
    uint64_t log_retention_ms;
    const char *reaction_mode;
    /* A database that cannot be reached when it is opened (PostgreSQL; a shard other than the first):
     * opened anyway when open_unreachable is set. Nothing is read or written through it until a
     * connection of its writer has set its schema up and check_aux accepted its auxiliary record
     * check_key (value NULL: it has none); until then, and for good when check_aux refuses, the store
     * is down (store_ready false, reads and writes STORE_UNAVAILABLE). check_aux returns 0 to accept,
     * or -1 with err said; it runs on the writer's thread. */
    bool open_unreachable;
    const char *check_key;
    int (*check_aux)(void *arg, const span_t *value, char *err, size_t errlen);
    void *check_arg;
} store_options_t;

typedef struct {
    span_t a, b;
} store_pair_t;

/* Idempotency records, keyed (user, key). */
typedef struct {
    uint64_t expires_ms;
    uint8_t fingerprint[FINGERPRINT_LEN];
    uint16_t status;
    uint8_t type; /* answer_type_t */
    uint8_t has_etag;
    uint64_t etag_version;
    span_t body; /* from store_idem_get: valid until the transaction's next write */
    /* Non-zero: the answer is a write result whose cursor is the position of the transaction's
     * cursor_ordinal-th appended log entry, taken at commit; the store stores the body completed
     * with it (answer_set_cursor's splice: ,"cursor":"<position>" before the closing brace), done
     * in the commit itself. Records read back from the store are complete (0). */
    uint32_t cursor_ordinal;
    /* Non-zero: the answer's counts are the transaction's counts_ask-th store_counts_ask_t, spliced into
     * the stored body by the commit (store_counts_at_commit); kept only until then, so that a replay in
     * the same transaction gets them too. Records read back from the store are complete (0). */
    uint32_t counts_ask;
} store_idem_t;

/* An Idempotency-Key's claim (engine/claims.h): on the user's shard, (user, key) bound to one request
 * fingerprint until it expires, so that one key sent for items of two shards is told apart. Given to
 * store_claims_apply, which applies a batch's claims in their order. */
typedef struct {
    bool release;               /* delete the claim if it holds fingerprint; else take it */
    span_t user, key;           /* key: 1..IDEM_KEY_MAX bytes */
    const uint8_t *fingerprint; /* FINGERPRINT_LEN bytes */
    uint64_t expires_ms;        /* a take: the claim's expiry, when it is written */
    /* result: a take: the claim holds fingerprint now (written, or held already); false: another
     * fingerprint's claim holds the key. A release: the claim was deleted. */
    bool held;
} store_claim_t;

/* A write answer's counts, asked of a store that takes log positions at commit (store_counts_at_commit).
 * Filled at commit: out = the counts of item as folding the log up to the position just before the
 * transaction's first appended entry gives (the folded counts plus the item's entries not folded
 * yet, each side as its counted bits say), plus deltas (this transaction's own entries of item up to
 * the answer, as they count; for a voided writer also their own reaction, added back as reads do). */
typedef struct {
    span_t item;
    span_t user, key; /* the idempotency record written in this transaction to complete; key empty: none */
    int64_t deltas[KINDS_MAX + 1];
    int64_t out[KINDS_MAX + 1]; /* [0]: the reactors (many mode) */
    bool filled;                /* out was filled by the commit */
} store_counts_ask_t;

/* Callbacks of the walks below: return 0 to go on, non-zero to stop (the walk then returns
 * STORE_OK). Their spans are valid only during the call. */
typedef int (*store_log_fn)(void *arg, uint64_t seq, const transition_t *t);
typedef int (*store_item_fn)(void *arg, span_t item);
typedef int (*store_name_fn)(void *arg, span_t name);
typedef int (*store_idem_fn)(void *arg, span_t user, span_t key, const store_idem_t *rec);
typedef int (*store_row_fn)(void *arg, span_t item, span_t user, const reaction_row_t *row);
typedef int (*store_aux_fn)(void *arg, span_t key, span_t value);

typedef struct {
    uint64_t rows, items, log_entries, log_bytes, idem_records, used_bytes, checkpoint;
    bool row_filter_ready; /* the row filter is filled and in use */
    /* a database server's store (shared): estimates for the counts above, and the connection */
    bool shared, connected;
    uint64_t round_trips, transactions;
    uint64_t writer_round_trips;       /* of round_trips, the writer's connection's */
    uint64_t fold_round_trips;         /* of round_trips, the fold's connection's */
    const histogram_t *commit_seconds; /* the COMMIT statement's duration (the server's sync) */
    /* the embedded store's journal: records appended (one a write transaction), their bytes,
     * checkpoints done and failed, the last checkpoint's duration */
    bool journal;
    uint64_t journal_records, journal_bytes, checkpoints, checkpoint_failures;
    uint64_t commits; /* the B-tree's commits of batches that changed something (an epoch's share one) */
    double last_checkpoint_seconds;
} store_stats_t;

/* --- the lists: who reacted to an item, what a user reacted to ---
 * Kept by the fold from the log, in the fold's transaction (so they lag no more than the counts):
 * per pair (item, user) whose set is not empty, an entry under "any kind" at the position of the
 * pair's last change and one under each kind of the set at the position where that kind joined,
 * in two indexes: by item (its users) and by user (their items). Positions are log seqs. */

/* One entry of a list page: the other name of the pair, its position and time under the list's
 * kind, and the pair's set as the lists know it. The name is valid only during the call. */
typedef int (*store_list_fn)(void *arg, span_t name, uint64_t seq, uint64_t at_ms, kindset_t set);
typedef struct {
    bool by_user; /* the key is a user (their items); else an item (its users) */
    span_t key;   /* the item or the user */
    int kind;     /* a kind code, or KIND_NONE: any kind */
    uint64_t seq; /* start strictly below (seq, name) in the list's order (newest first); */
    span_t name;  /* with has_cursor false: from the newest */
    bool has_cursor;
    size_t limit;
} store_list_query_t;
typedef kindset_t (*store_list_expect_fn)(void *arg, span_t item, span_t user, kindset_t row_set);
typedef int (*store_pair_fn)(void *arg, span_t user, kindset_t set, kindset_t entries);

/* --- above both stores (store_open.c) --- */

/* True when location is a postgresql:// (or postgres://) URI rather than a directory. Any thread. */
bool store_location_is_url(const char *location);

/* Opens (creating if needed) the store at location: a directory for the embedded store, or a
 * postgresql:// URI. Checks the schema and the kinds. The embedded store: a kind stored before must
 * still be configured; new kinds are added. The PostgreSQL store refuses any set of kinds other than
 * the stored one, new kinds too (the nodes sharing a database must agree), and shared settings
 * (store_options_t) other than the stored ones. With kinds NULL, the stored kinds are used as
 * configured (for tools that read an existing store). Returns STORE_OK with *out set, or STORE_ERROR with err
 * filled (nothing to close). kinds and opt are copied. Any thread; one store_open per location and
 * process. */
int store_open(const char *location, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
               size_t errlen);

/* The cursors this server gave, as the change feed and a webhook's resume judge them: newest is the
 * snapshot's newest entry or checkpoint (pruning never passes the checkpoint), or the newest position
 * a write answer named when that is later (store_read_acknowledged); oldest is the first position
 * not pruned: the one after STORE_LOG_PRUNED_KEY's where the store keeps it, else the oldest entry
 * still retained (newest + 1 when the log is empty). Made of the operations below; the snapshot's
 * thread. */
int store_read_log_window(store_read_t *r, uint64_t *oldest, uint64_t *newest);

/* --- the operations ---
 * X(return type, name, handle, (parameters), (arguments)) for an operation that returns a value,
 * P(name, handle, (parameters), (arguments)) for one that returns nothing; store_<name> is the
 * call, handle the parameter whose table it is routed to. Thread words: "any thread"; "r's thread"
 * (the thread that began the snapshot); "w's thread" (the thread that began the write transaction:
 * the writer's, or the fold thread's for a store_fold_begin transaction; asserted); "writer thread"
 * (the one thread that begins write transactions; asserted where the store can tell). */
#define STORE_OPS(X, P)                                                                                                \
    /* --- the store --- */                                                                                            \
    /* Frees the store (NULL: nothing). Nothing else may use it during or after the call: snapshots                    \
     * ended, no write transaction open (asserted), the fold and writer threads stopped. */                            \
    P(close, store, (store_t * store), (store))                                                                        \
    /* The kinds in force: codes 1..count as used across this seam; valid until store_close. Any thread. */            \
    X(const kinds_t *, kinds, store, (const store_t *store), (store))                                                  \
    /* True when other processes may write to the store too (a database shared by several nodes): what                 \
     * follows the log (the fold, long polls) must then look for entries it was not told about. Any thread. */         \
    X(bool, shared, store, (const store_t *store), (store))                                                            \
    /* True while the store can be used (a shared store: its server answered recently; the embedded                    \
     * store: always). Any thread; does not wait for the server. */                                                    \
    X(bool, ready, store, (store_t * store), (store))                                                                  \
    /* True, with why filled (len bytes at most), while the store serves reads but refuses every write                 \
     * transaction for a reason of its own (the embedded store opened on a full disk: its journal could                \
     * not start; it is tried again with each write transaction, so the store recovers by itself once                  \
     * space frees). The PostgreSQL store: false always. Any thread. */                                                \
    X(bool, writes_refused, store, (store_t * store, char *why, size_t len), (store, why, len))                        \
    /* Counts and sizes for /metrics and `tally stats` (estimates on a shared store). STORE_OK, or an error            \
     * (st then partly filled). Any thread. */                                                                         \
    X(int, stats, store, (store_t * store, store_stats_t * st), (store, st))                                           \
    /* A consistent, compacted copy of the store into dir (which must exist and be empty); safe while the              \
     * store is in use, also by another process. STORE_ERROR when dir is not empty or a write fails; the               \
     * PostgreSQL store: STORE_ERROR always (pg_dump is its backup). Any thread. */                                    \
    X(int, backup, store, (store_t * store, const char *dir), (store, dir))                                            \
                                                                                                                       \
    /* --- snapshots (any thread begins one; then only that thread uses it) --- */                                     \
    /* Begins a snapshot: *out until store_read_end. STORE_OK, STORE_ERROR (too many readers),                         \
     * STORE_UNAVAILABLE. A server store begins its transaction at the first question. */                              \
    X(int, read_begin, store, (store_t * store, store_read_t * *out), (store, out))                                    \
    /* A snapshot for exactly one question (one store_read_* call: a feed page, a list page): a server                 \
     * store answers it with one statement, which is a snapshot of its own, instead of a transaction                   \
     * around it (measured: bench/RESULTS.md, "List pages on PostgreSQL"). Such a store refuses a second               \
     * question on it (STORE_ERROR); the embedded store answers it as from store_read_begin. */                        \
    X(int, read_begin_single, store, (store_t * store, store_read_t * *out), (store, out))                             \
    /* Ends the snapshot and frees it (NULL: nothing). r's thread. */                                                  \
    P(read_end, r, (store_read_t * r), (r))                                                                            \
    /* counts[code] for codes 1..kinds->count (counts[0]: the reactors, many mode); zeros for an item                  \
     * nobody reacted to. r's thread. */                                                                               \
    X(int, read_counts, r, (store_read_t * r, span_t item, int64_t counts[KINDS_MAX + 1]), (r, item, counts))          \
    /* The row, or {KIND_NONE, 0} when there is none (STORE_OK either way): every row a write was answered             \
     * for, even one the snapshot does not have yet (store_write_defer). A snapshot that outlived two of the           \
     * embedded store's epochs is moved forward by it (rare): hold no cursor or value of r across this call.           \
     * r's thread. */                                                                                                  \
    X(int, read_row, r, (store_read_t * r, span_t item, span_t user, reaction_row_t * row), (r, item, user, row))      \
    /* counts and, when user is not empty, the user's row for each of n items (a feed page) from the                   \
     * snapshot: as n calls of the two above, in as few round trips as the store can. r's thread. */                   \
    X(int, read_many, r,                                                                                               \
      (store_read_t * r, const span_t *items, size_t n, span_t user, int64_t(*counts)[KINDS_MAX + 1],                  \
       reaction_row_t *rows),                                                                                          \
      (r, items, n, user, counts, rows))                                                                               \
    /* The checkpoint as of the snapshot. r's thread. */                                                               \
    X(int, read_checkpoint, r, (store_read_t * r, uint64_t * seq), (r, seq))                                           \
    /* Calls fn for each log entry with seq > after, in order, at most limit. r's thread. */                           \
    X(int, read_log, r, (store_read_t * r, uint64_t after, size_t limit, store_log_fn fn, void *arg),                  \
      (r, after, limit, fn, arg))                                                                                      \
    /* The oldest and newest retained log seq (0, 0 when the log is empty). r's thread. */                             \
    X(int, read_log_bounds, r, (store_read_t * r, uint64_t * first, uint64_t * last), (r, first, last))                \
    /* The newest log position a write answer has named: past this snapshot's newest entry while the                   \
     * store shows batches later than it answers them (store_write_defer); a cursor up to it is one this               \
     * server gave. 0 when the store does not keep it (the PostgreSQL store: its snapshots show every                  \
     * answered write). Never fails. r's thread. */                                                                    \
    X(uint64_t, read_acknowledged, r, (store_read_t * r), (r))                                                         \
    /* Counts each of n items' rows per kind into counts[i] (the truth the counts are checked against): the            \
     * rows that count, i.e. not those of a voided user (one whose record STORE_VOID_PREFIX<user> exists in            \
     * the snapshot). As n calls for one item each, in as few round trips as the store can. r's thread. */             \
    X(int, read_tally_items, r, (store_read_t * r, const span_t *items, size_t n, int64_t(*counts)[KINDS_MAX + 1]),    \
      (r, items, n, counts))                                                                                           \
    /* Calls fn for each item that has rows or a counts record, in key order, starting after `after`                   \
     * (from the first when after is empty), at most limit; *visited says how many. r's thread. */                     \
    X(int, read_items, r,                                                                                              \
      (store_read_t * r, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited),                    \
      (r, after, limit, fn, arg, visited))                                                                             \
    /* Every idempotency record, in key order (moving a store). r's thread. */                                         \
    X(int, read_idem, r, (store_read_t * r, store_idem_fn fn, void *arg), (r, fn, arg))                                \
    /* Every row in key order (export). r's thread. */                                                                 \
    X(int, read_rows, r, (store_read_t * r, store_row_fn fn, void *arg), (r, fn, arg))                                 \
    /* A page of an export: rows in key order (item, then user) strictly after (after_item, after_user),               \
     * from the first when after_item is empty; at most limit rows visited, rows of none included (fn                  \
     * skips them), *visited says how many (fewer than limit: the end). fn returns 0 to go on. Its pages               \
     * come from one snapshot held for the whole export (store_read_begin, not _single): one state of the              \
     * store, whatever is written meanwhile. r's thread. */                                                            \
    X(int, export_page, r,                                                                                             \
      (store_read_t * r, span_t after_item, span_t after_user, size_t limit, store_row_fn fn, void *arg,               \
       size_t *visited),                                                                                               \
      (r, after_item, after_user, limit, fn, arg, visited))                                                            \
    /* The first log seq whose commit time is at or after at_ms (binary search; the log is in commit                   \
     * order); *seq is one past the newest entry when there is none. r's thread. */                                    \
    X(int, read_log_seek, r, (store_read_t * r, uint64_t at_ms, uint64_t * seq), (r, at_ms, seq))                      \
    /* The auxiliary records (store_aux_put) whose key starts with prefix, in key order. r's thread. */                \
    X(int, read_aux, r, (store_read_t * r, span_t prefix, store_aux_fn fn, void *arg), (r, prefix, fn, arg))           \
    /* Calls fn for at most q->limit entries of a list, newest first. r's thread. */                                   \
    X(int, read_list, r, (store_read_t * r, const store_list_query_t *q, store_list_fn fn, void *arg),                 \
      (r, q, fn, arg))                                                                                                 \
    /* The check that the lists equal the rows. For each of n items: every row compared with the lists'                \
     * entries for it, in both indexes, and every entry of the item's index with a row; a row's set is the             \
     * one expect gives (the set as folded: a pair changed by the log after the checkpoint has its set                 \
     * before that change). With n 0: the two indexes' sizes against each other (an entry of the user                  \
     * index without its twin in the item index). *mismatches counts what disagrees. In as few round trips             \
     * as the store can. r's thread. */                                                                                \
    X(int, read_lists_check, r,                                                                                        \
      (store_read_t * r, const span_t *items, size_t n, store_list_expect_fn expect, void *arg, uint64_t *mismatches), \
      (r, items, n, expect, arg, mismatches))                                                                          \
    /* Every pair of item's index, in user order: the pair's set and the kinds it has entries under (bit               \
     * 0: "any kind"), for the check of a user's list kept on another shard than its items                             \
     * (engine/userfold.h). The embedded store (always one shard): STORE_ERROR. r's thread. */                         \
    X(int, read_list_pairs, r, (store_read_t * r, span_t item, store_pair_fn fn, void *arg), (r, item, fn, arg))       \
                                                                                                                       \
    /* --- the write transaction --- */                                                                                \
    /* Begins the write transaction (*out until commit or abort). Writer thread; one at a time                         \
     * (asserted). STORE_OK, STORE_ERROR, STORE_FULL, STORE_UNAVAILABLE. */                                            \
    X(int, write_begin, store, (store_t * store, store_write_t * *out), (store, out))                                  \
    /* True when the store's fold runs in transactions of its own (store_fold_begin), on a thread of its               \
     * own beside the writer's batches (the PostgreSQL store: a second session, so the fold's work runs on             \
     * the server in parallel with the batches'); false when the writer's own transactions fold (the                   \
     * embedded store, one writer). A shared store folds apart. Any thread. */                                         \
    X(bool, folds_apart, store, (const store_t *store), (store))                                                       \
    /* A write transaction for the fold alone (fold thread only; store_folds_apart true, else                          \
     * STORE_ERROR): the same calls as a writer's transaction, on a connection of its own. Only it may                 \
     * fold (store_write_may_fold). */                                                                                 \
    X(int, fold_begin, store, (store_t * store, store_write_t * *out), (store, out))                                   \
    /* Commits: durable on STORE_OK; w is gone either way. STORE_UNAVAILABLE: the outcome is unknown                   \
     * (it may have been applied). w's thread. */                                                                      \
    X(int, write_commit, w, (store_write_t * w), (w))                                                                  \
    /* store_write_commit, and where the positions taken at commit begin: the transaction's k-th entry                 \
     * appended with store_log_append (k from 1) that got *seq 0 is at *log_base + k. *log_base is 0                   \
     * when the store gave every position at append (or nothing was appended). w's thread. */                          \
    X(int, write_commit_at, w, (store_write_t * w, uint64_t * log_base), (w, log_base))                                \
    /* Drops everything the transaction did; w is gone. w's thread. */                                                 \
    P(write_abort, w, (store_write_t * w), (w))                                                                        \
    /* Before store_write_commit: if more(arg) says, once the transaction is durable, that more commands               \
     * wait behind it, the store may leave its effects on everything but the rows (store_read_row sees a               \
     * committed row at once) unseen by readers for a moment, to show them with the next transactions'                 \
     * (the embedded store's epochs: one B-tree commit for many batches), or at store_flush. Durable on                \
     * commit all the same. more is asked after the sync, when what came in meanwhile is queued. The                   \
     * PostgreSQL store ignores it. w's thread. */                                                                     \
    P(write_defer, w, (store_write_t * w, bool (*more)(void *arg), void *arg), (w, more, arg))                         \
    /* Whether committed transactions are not yet seen by readers (after store_write_defer). Writer thread. */         \
    X(bool, pending, store, (const store_t *store), (store))                                                           \
    /* Makes them seen: STORE_OK, or an error when the store could not. Writer thread, no transaction open             \
     * (asserted). */                                                                                                  \
    X(int, flush, store, (store_t * store), (store))                                                                   \
    /* Names the rows and idempotency records the batch's commands will read, before any is read: a                    \
     * shared store locks the ones that exist in one order (so two processes' batches cannot deadlock) and             \
     * reads them in one round trip; the embedded store has nothing to do. Rows not named may still be                 \
     * read (slower). keys[i] is (user, key). claims[i] is the (user, key) of a claim store_claims_apply will          \
     * decide in this transaction: a shared store locks and reads it in the same round trip (none of its own           \
     * then). fold_scan > 0 says this transaction will fold                                                            \
     * (store_write_may_fold said yes): it will read the checkpoint and then scan fold_scan log entries                \
     * after it, and the store may read (and lock) both in that same round trip; 0: no fold, or one it                 \
     * need not prepare. w's thread. */                                                                                \
    X(int, write_prepare, w,                                                                                           \
      (store_write_t * w, const store_pair_t *rows, size_t nrows, const store_pair_t *keys, size_t nkeys,              \
       const store_pair_t *claims, size_t nclaims, size_t fold_scan),                                                  \
      (w, rows, nrows, keys, nkeys, claims, nclaims, fold_scan))                                                       \
    /* True when this process may fold the log into the counts now (a shared store lets one process at a               \
     * time, the others leave it to that one; a store that folds apart lets only its fold transactions).               \
     * w's thread. */                                                                                                  \
    X(bool, write_may_fold, w, (store_write_t * w), (w))                                                               \
    /* The row as the transaction sees it, or {KIND_NONE, 0}. w's thread. */                                           \
    X(int, row_get, w, (store_write_t * w, span_t item, span_t user, reaction_row_t * row), (w, item, user, row))      \
    /* Writes the row (KIND_NONE / an empty set: deletes it). w's thread. */                                           \
    X(int, row_put, w, (store_write_t * w, span_t item, span_t user, const reaction_row_t *row), (w, item, user, row)) \
    /* Appends t to the log under the next sequence number (*seq; 0 when the number is only known at                   \
     * commit, as on a shared store, where positions are taken in commit order). w's thread. */                        \
    X(int, log_append, w, (store_write_t * w, const transition_t *t, uint64_t *seq), (w, t, seq))                      \
    /* Writes t at log position seq, above every position in the log: moving a store to another keeps                  \
     * the positions, so change-feed cursors stay valid. log_append goes on after it. w's thread. */                   \
    X(int, log_put, w, (store_write_t * w, uint64_t seq, const transition_t *t), (w, seq, t))                          \
    /* Calls fn for each log entry with seq > after, in order, at most limit of them. w's thread. */                   \
    X(int, log_scan, w, (store_write_t * w, uint64_t after, size_t limit, store_log_fn fn, void *arg),                 \
      (w, after, limit, fn, arg))                                                                                      \
    /* counts[item][code] += deltas[code] for each configured kind ([0]: the reactors). w's thread. */                 \
    X(int, counts_add, w, (store_write_t * w, span_t item, const int64_t deltas[KINDS_MAX + 1]), (w, item, deltas))    \
    /* counts[code] as folded (the counts record as the transaction sees it, zeros when none; [0]: the                 \
     * reactors). w's thread. */                                                                                       \
    X(int, counts_folded, w, (store_write_t * w, span_t item, int64_t counts[KINDS_MAX + 1]), (w, item, counts))       \
    /* For a store that takes log positions at commit (store_log_append gives 0): the answers' counts                  \
     * (store_counts_ask_t), computed in the commit once the transaction holds the log's head, so every                \
     * earlier position is committed and seen; each record named is completed by the same statement with               \
     * answer_set_counts's splice (answer_counts_format, in SQL). asks stays valid, and is filled, until               \
     * the commit returns (out valid on STORE_OK). One call per transaction, after every write of the                  \
     * records it names. The embedded store knows its counts in the transaction: STORE_ERROR. w's thread. */           \
    X(int, counts_at_commit, w, (store_write_t * w, store_counts_ask_t * asks, size_t n), (w, asks, n))                \
    /* The pipeline's checkpoint: the last log seq folded into the counts. w's thread. */                              \
    X(int, checkpoint_get, w, (store_write_t * w, uint64_t * seq), (w, seq))                                           \
    X(int, checkpoint_put, w, (store_write_t * w, uint64_t seq), (w, seq))                                             \
    /* Deletes log entries from the oldest on, while seq <= upto_seq and their commit time is before                   \
     * before_ms, at most limit; *deleted says how many. w's thread. */                                                \
    X(int, log_prune, w, (store_write_t * w, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t * deleted),   \
      (w, upto_seq, before_ms, limit, deleted))                                                                        \
    /* Auxiliary records of other modules (trending's summaries), keyed by text: put, and delete every                 \
     * key with from <= key < to. A fold transaction (store_fold_begin) that puts one commits durably,                 \
     * as a writer's does (another database may act on the record). w's thread. */                                     \
    X(int, aux_put, w, (store_write_t * w, span_t key, span_t value), (w, key, value))                                 \
    X(int, aux_delete_range, w, (store_write_t * w, span_t from, span_t to), (w, from, to))                            \
    /* The records whose key starts with prefix as the write transaction sees them now (its own puts                   \
     * included), in key order: for a decision that must hold against the store's current state. A                     \
     * shared store first takes a lock named by prefix until the transaction ends, so two writers (of                  \
     * any node) deciding from the same records run one after the other. w's thread. */                                \
    X(int, aux_read_locked, w, (store_write_t * w, span_t prefix, store_aux_fn fn, void *arg), (w, prefix, fn, arg))   \
                                                                                                                       \
    /* Whether user is voided (the record STORE_VOID_PREFIX<user> exists) as the transaction sees it now, for          \
     * the write that decides whether the user's row counts. A shared store reads it under a shared lock               \
     * named like store_aux_read_locked's of that record (a void holds it exclusively), so a void and a                \
     * write of its user run one after the other: the store reads it with the batch's rows in                          \
     * store_write_prepare for the users of the rows named there. w's thread. */                                       \
    X(int, user_voided, w, (store_write_t * w, span_t user, bool *voided), (w, user, voided))                          \
                                                                                                                       \
    /* --- idempotency records, keyed (user, key) --- */                                                               \
    /* STORE_OK with *rec (its body valid until the transaction's next write), or STORE_NOTFOUND.                      \
     * An expired record may still be found: the caller judges expires_ms. w's thread. */                              \
    X(int, idem_get, w, (store_write_t * w, span_t user, span_t key, store_idem_t * rec), (w, user, key, rec))         \
    /* Writes the record (rec->body copied). w's thread. */                                                            \
    X(int, idem_put, w, (store_write_t * w, span_t user, span_t key, const store_idem_t *rec), (w, user, key, rec))    \
    /* Deletes up to limit records whose expiry is at or before now_ms; *deleted says how many. w's thread. */         \
    X(int, idem_sweep, w, (store_write_t * w, uint64_t now_ms, size_t limit, size_t * deleted),                        \
      (w, now_ms, limit, deleted))                                                                                     \
    /* Deletes up to limit idempotency records and claims (store_claims_apply) of user, records first;                 \
     * *deleted says how many. w's thread. */                                                                          \
    X(int, idem_delete_user, w, (store_write_t * w, span_t user, size_t limit, size_t * deleted),                      \
      (w, user, limit, deleted))                                                                                       \
                                                                                                                       \
    /* --- idempotency claims, keyed (user, key) (engine/claims.h) --- */                                              \
    /* Applies claims[0..n) in order, each seeing the ones before it: a take writes the claim (its                     \
     * fingerprint, expiring at expires_ms) when there is none or only an expired one (expiry at or                    \
     * before now_ms), leaves a claim of the same fingerprint as it is (held either way), and leaves                   \
     * another fingerprint's (held false); a release deletes the claim only when it holds that                         \
     * fingerprint. A shared store locks the claims named in one round trip (in key order, after the                   \
     * batch's rows and records) and writes them at commit; a claim another node inserted meanwhile                    \
     * fails the commit (STORE_RETRY), and the batch then runs again and finds it. w's thread. */                      \
    X(int, claims_apply, w, (store_write_t * w, store_claim_t * claims, size_t n, uint64_t now_ms),                    \
      (w, claims, n, now_ms))                                                                                          \
    /* Deletes up to limit claims whose expiry is at or before now_ms; *deleted says how many. w's thread. */          \
    X(int, claims_sweep, w, (store_write_t * w, uint64_t now_ms, size_t limit, size_t * deleted),                      \
      (w, now_ms, limit, deleted))                                                                                     \
                                                                                                                       \
    /* --- the lists, and the walks that erase a user or an item --- */                                                \
    /* Applies the net change of one pair (core/listchange.h) to both indexes, in place of what they                   \
     * held for it. Each pair at most once per fold; changes follow the log's order. A change whose                    \
     * positions are 0 (a pair of another shard's item, engine/userfold.h) takes at commit one position                \
     * of this store's log, later than every entry committed before it, that the log itself skips; the                 \
     * embedded store (always one shard) refuses it. w's thread. */                                                    \
    X(int, list_apply, w, (store_write_t * w, span_t item, span_t user, const list_change_t *c), (w, item, user, c))   \
    /* Builds both indexes anew from the rows and the retained log, in this transaction: every pair                    \
     * whose set is not empty, at the positions of its transitions in the retained log; a pair (or a                   \
     * kind) that changed before the oldest retained entry at position 0 with the oldest entry's time                  \
     * (the upgrade of a store made before the lists, a moved store). w's thread. */                                   \
    X(int, lists_rebuild, w, (store_write_t * w), (w))                                                                 \
    /* Walks one item's users (its rows, in key order, strictly after `after`, from the first when                     \
     * empty), visiting at most limit names; *visited says how many. w's thread. */                                    \
    X(int, item_users, w,                                                                                              \
      (store_write_t * w, span_t item, span_t after, size_t limit, store_name_fn fn, void *arg, size_t *visited),      \
      (w, item, after, limit, fn, arg, visited))                                                                       \
    /* Walks the items one user's reaction is set on, at most limit names. The embedded store reads the                \
     * user's list, in position order and from the first every time (`after` is not used: the caller                   \
     * folds the log first, in the same transaction, so the list is exact and the rows a walk cleared                  \
     * have left it); PostgreSQL the rows by user, in item order after `after`. Either way its cost is                 \
     * in proportion to the user's reactions; last is the last name visited, to go on after it (empty                  \
     * when the walk starts over). w's thread. */                                                                      \
    X(int, user_items, w,                                                                                              \
      (store_write_t * w, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg, size_t *visited,       \
       char last[ID_MAX_LEN], size_t *last_len),                                                                       \
      (w, user, after, limit, fn, arg, visited, last, last_len))

#define STORE_DECLARE_OP(ret, name, handle, params, args) ret store_##name params;
#define STORE_DECLARE_PROC(name, handle, params, args) void store_##name params;
STORE_OPS(STORE_DECLARE_OP, STORE_DECLARE_PROC)
#undef STORE_DECLARE_OP
#undef STORE_DECLARE_PROC

#endif
