/* store.h — the storage seam. The only contract between tally and the bytes it keeps.
 *
 * Above this line nothing knows the storage engine. The writer thread opens one write transaction
 * per batch, applies its commands and the pipeline's fold in it, and commits once: the commit is
 * durable (on stable storage) when store_write_commit returns 0. Readers take snapshots that never
 * wait for the writer. Threads: one write transaction at a time (the writer thread); any number of
 * snapshots, each used by the thread that began it.
 *
 * Reaction codes crossing this seam are the configured kind codes of kinds.h (0 = none); the store
 * keeps its own stable numbering on disk and translates. */
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
} store_options_t;

/* True when location is a postgresql:// (or postgres://) URI rather than a directory. */
bool store_location_is_url(const char *location);

/* Opens (creating if needed) the store at location: a directory for the embedded store, or a
 * postgresql:// URI. Checks the schema and the kinds: a kind stored before
 * must still be configured; new kinds are added. With kinds NULL, the stored kinds are used as
 * configured (for tools that read an existing directory). Returns STORE_OK, or an error with err
 * filled. */
int store_open(const char *location, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
               size_t errlen);
void store_close(store_t *store);

/* The kinds in force: codes 1..count as used across this seam. */
const kinds_t *store_kinds(const store_t *store);

/* True when other processes may write to the store too (a database shared by several nodes): what
 * follows the log (the fold, long polls) must then look for entries it was not told about. */
bool store_shared(const store_t *store);

/* True while the store can be used (a shared store: its server answered recently). */
bool store_ready(store_t *store);
/* True, with why filled, while the store serves reads but refuses every write transaction for a
 * reason of its own (the embedded store opened on a full disk: its journal could not start; it is
 * tried again with each write transaction, so the store recovers by itself once space frees). */
bool store_writes_refused(store_t *store, char *why, size_t len);

/* Takes the directory's exclusive instance lock (creating the directory and its parents), held
 * until the process exits. Returns the lock's fd, or -1 with err filled (another process has it). */
int store_lock_dir(const char *dir, char *err, size_t errlen);

/* --- snapshots (any thread) --- */
int store_read_begin(store_t *store, store_read_t **out);
/* A snapshot for exactly one question (one store_read_* call: a feed page, a list page): a server
 * store answers it with one statement, which is a snapshot of its own, instead of a transaction
 * around it (measured: bench/RESULTS.md, "List pages on PostgreSQL"). Such a store refuses a second
 * question on it; the embedded store, which has no such mode, answers it as from store_read_begin. */
int store_read_begin_single(store_t *store, store_read_t **out);
void store_read_end(store_read_t *r);
/* counts[code] for codes 1..kinds->count; zeros for an item nobody reacted to. */
int store_read_counts(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1]);
/* The row, or {KIND_NONE, 0} when there is none: every row a write was answered for, even one the
 * snapshot does not have yet (store_write_defer). A snapshot that outlived two of the embedded
 * store's epochs is moved forward by it (rare): hold no cursor or value of r across this call. */
int store_read_row(store_read_t *r, span_t item, span_t user, reaction_row_t *row);

/* counts and, when user is not empty, the user's row for each of n items (a feed page) from the
 * snapshot: as n calls of the two above, in as few round trips as the store can. */
int store_read_many(store_read_t *r, const span_t *items, size_t n, span_t user, int64_t (*counts)[KINDS_MAX + 1],
                    reaction_row_t *rows);

/* --- the write transaction (writer thread only) --- */
int store_write_begin(store_t *store, store_write_t **out);
/* True when the store's fold runs in transactions of its own (store_fold_begin), on a thread of its
 * own beside the writer's batches (a database server's store: a second session, so the fold's work
 * runs on the server in parallel with the batches'); false when the writer's own transactions fold
 * (the embedded store, one writer). A shared store folds apart. */
bool store_folds_apart(const store_t *store);
/* A write transaction for the fold alone (fold thread only; store_folds_apart true): the same calls
 * as a writer's transaction, on a connection of its own. Only it may fold (store_write_may_fold). */
int store_fold_begin(store_t *store, store_write_t **out);
int store_write_commit(store_write_t *w); /* durable on STORE_OK; w is gone either way */
/* store_write_commit, and where the positions taken at commit begin: the transaction's k-th entry
 * appended with store_log_append (k from 1) that got *seq 0 is at *log_base + k. *log_base is 0
 * when the store gave every position at append (or nothing was appended). */
int store_write_commit_at(store_write_t *w, uint64_t *log_base);
void store_write_abort(store_write_t *w);
/* Before store_write_commit: if more(arg) says, once the transaction is durable, that more commands
 * wait behind it, the store may leave its effects on everything but the rows (store_read_row sees a
 * committed row at once) unseen by readers for a moment, to show them with the next transactions'
 * (the embedded store's epochs: one B-tree commit for many batches), or at store_flush. Durable on
 * commit all the same. more is asked after the sync, when what came in meanwhile is queued. */
void store_write_defer(store_write_t *w, bool (*more)(void *arg), void *arg);
/* Whether committed transactions are not yet seen by readers (after store_write_defer), and making
 * them seen (writer thread, no transaction open): STORE_OK, or an error when the store could not. */
bool store_pending(const store_t *store);
int store_flush(store_t *store);

/* Names the rows and idempotency records the batch's commands will read, before any is read: a
 * shared store locks the ones that exist in one order (so two processes' batches cannot deadlock) and
 * reads them in one round trip. Rows not named may still be read (slower). keys[i] is (user, key).
 * fold_scan > 0 says this transaction will fold (store_write_may_fold said yes): it will read the
 * checkpoint and then scan fold_scan log entries after it, and the store may read (and lock) both in
 * that same round trip; 0: no fold, or one it need not prepare. */
typedef struct {
    span_t a, b;
} store_pair_t;
int store_write_prepare(store_write_t *w, const store_pair_t *rows, size_t nrows, const store_pair_t *keys,
                        size_t nkeys, size_t fold_scan);

/* True when this process may fold the log into the counts now (a shared store lets one process at a
 * time, the others leave it to that one; a store that folds apart lets only its fold transactions). */
bool store_write_may_fold(store_write_t *w);

int store_row_get(store_write_t *w, span_t item, span_t user, reaction_row_t *row);
int store_row_put(store_write_t *w, span_t item, span_t user, const reaction_row_t *row);

/* Appends t to the log under the next sequence number (*seq; 0 when the number is only known at
 * commit, as on a shared store, where positions are taken in commit order). */
int store_log_append(store_write_t *w, const transition_t *t, uint64_t *seq);

/* Writes t at log position seq, above every position in the log: moving a store to another keeps
 * the positions, so change-feed cursors stay valid. log_append goes on after it. */
int store_log_put(store_write_t *w, uint64_t seq, const transition_t *t);

/* Calls fn for each log entry with seq > after, in order, at most limit of them. fn returns 0 to go
 * on, non-zero to stop. The transition's spans are valid only during the call. */
typedef int (*store_log_fn)(void *arg, uint64_t seq, const transition_t *t);
int store_log_scan(store_write_t *w, uint64_t after, size_t limit, store_log_fn fn, void *arg);

/* counts[item][code] += deltas[code] for each configured kind. */
int store_counts_add(store_write_t *w, span_t item, const int64_t deltas[KINDS_MAX + 1]);

/* The pipeline's checkpoint: the last log seq folded into the counts. */
int store_checkpoint_get(store_write_t *w, uint64_t *seq);
int store_checkpoint_put(store_write_t *w, uint64_t seq);

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
} store_idem_t;
int store_idem_get(store_write_t *w, span_t user, span_t key, store_idem_t *rec);
int store_idem_put(store_write_t *w, span_t user, span_t key, const store_idem_t *rec);
/* Deletes up to limit records whose expiry is at or before now_ms; *deleted says how many. */
int store_idem_sweep(store_write_t *w, uint64_t now_ms, size_t limit, size_t *deleted);

/* --- snapshot views: recount, the change feed, statistics (any thread) --- */

int store_read_checkpoint(store_read_t *r, uint64_t *seq);
int store_read_log(store_read_t *r, uint64_t after, size_t limit, store_log_fn fn, void *arg);
/* The oldest and newest retained log seq (0, 0 when the log is empty). */
int store_read_log_bounds(store_read_t *r, uint64_t *first, uint64_t *last);
/* The newest log position a write answer has named: past this snapshot's newest entry while the
 * store shows batches later than it answers them (store_write_defer); a cursor up to it is one this
 * server gave. 0 when the store does not keep it (its snapshots show every answered write). */
uint64_t store_read_acknowledged(store_read_t *r);
/* The cursors this server gave, as the change feed and a webhook's resume judge them: newest is the
 * snapshot's newest entry or checkpoint (pruning never passes the checkpoint), or the newest position
 * a write answer named when that is later (store_read_acknowledged); oldest is the oldest entry still
 * retained (newest + 1 when the log is empty). */
int store_read_log_window(store_read_t *r, uint64_t *oldest, uint64_t *newest);
/* Counts item's rows per kind (the truth the counts are checked against). */
int store_read_tally_item(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1]);
/* Calls fn for each item that has rows or a counts record, in key order, starting after `after`
 * (from the first when after is empty), at most limit; *visited says how many. fn returns 0 to go
 * on. The item span is valid only during the call. */
typedef int (*store_item_fn)(void *arg, span_t item);
int store_read_items(store_read_t *r, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited);

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
int store_stats(store_t *store, store_stats_t *st);

/* A consistent, compacted copy of the store into dir (which must exist and be empty); safe while
 * the store is in use, also by another process. */
int store_backup(store_t *store, const char *dir);

/* Walks one item's users (its rows, in key order, strictly after `after`, from the first when empty),
 * or the items one user's reaction is set on, visiting at most limit names. The user's walk reads
 * what the store keeps by user: on the embedded store the user's list (below), in position order and
 * from the first every time (`after` is not used: the caller folds the log first, in the same
 * transaction, so the list is exact and the rows a walk cleared have left it); on PostgreSQL the rows
 * by user, in item order after `after`. Either way its cost is in proportion to the user's reactions;
 * last is the last name visited, to go on after it (empty when the walk starts over). The name is
 * valid during the call. Writer thread. */
typedef int (*store_name_fn)(void *arg, span_t name);
int store_item_users(store_write_t *w, span_t item, span_t after, size_t limit, store_name_fn fn, void *arg,
                     size_t *visited);
int store_user_items(store_write_t *w, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg,
                     size_t *visited, char last[ID_MAX_LEN], size_t *last_len);

/* Every idempotency record, in key order (moving a store). fn returns 0 to go on; spans are valid
 * only during the call. */
typedef int (*store_idem_fn)(void *arg, span_t user, span_t key, const store_idem_t *rec);
int store_read_idem(store_read_t *r, store_idem_fn fn, void *arg);

/* Deletes up to limit idempotency records of user. */
int store_idem_delete_user(store_write_t *w, span_t user, size_t limit, size_t *deleted);

/* Every row in key order (export). fn returns 0 to go on. */
typedef int (*store_row_fn)(void *arg, span_t item, span_t user, const reaction_row_t *row);
int store_read_rows(store_read_t *r, store_row_fn fn, void *arg);

/* A page of an export: rows in key order (item, then user) strictly after (after_item, after_user),
 * from the first when after_item is empty; at most limit rows visited, rows of none included (fn
 * skips them), *visited says how many (fewer than limit: the end). fn returns 0 to go on. Its pages
 * come from one snapshot held for the whole export (store_read_begin, not _single): one state of the
 * store, whatever is written meanwhile. */
int store_export_page(store_read_t *r, span_t after_item, span_t after_user, size_t limit, store_row_fn fn, void *arg,
                      size_t *visited);

/* The first log seq whose commit time is at or after at_ms (binary search; the log is in commit
 * order); *seq is one past the newest entry when there is none. */
int store_read_log_seek(store_read_t *r, uint64_t at_ms, uint64_t *seq);

/* Auxiliary records of other modules (trending's summaries), keyed by text. Writer thread for
 * writes; reads from a snapshot, in key order, for the keys that start with prefix. */
int store_aux_put(store_write_t *w, span_t key, span_t value);
int store_aux_delete_range(store_write_t *w, span_t from, span_t to); /* from ≤ key < to */
typedef int (*store_aux_fn)(void *arg, span_t key, span_t value);
int store_read_aux(store_read_t *r, span_t prefix, store_aux_fn fn, void *arg);
/* The records whose key starts with prefix as the write transaction sees them now (its own puts
 * included), in key order: for a decision that must hold against the store's current state. A
 * shared store first takes a lock named by prefix until the transaction ends, so two writers (of
 * any node) deciding from the same records run one after the other. Writer thread. */
int store_aux_read_locked(store_write_t *w, span_t prefix, store_aux_fn fn, void *arg);

/* Deletes log entries from the oldest on, while seq <= upto_seq and their commit time is before
 * before_ms, at most limit. Writer thread. */
int store_log_prune(store_write_t *w, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted);

/* --- the lists: who reacted to an item, what a user reacted to ---
 * Kept by the fold from the log, in the fold's transaction (so they lag no more than the counts):
 * per pair (item, user) whose set is not empty, an entry under "any kind" at the position of the
 * pair's last change and one under each kind of the set at the position where that kind joined,
 * in two indexes: by item (its users) and by user (their items). Positions are log seqs. */

/* Applies the net change of one pair (core/listchange.h) to both indexes, in place of what they
 * held for it. Each pair at most once per fold; changes follow the log's order. Writer thread. */
int store_list_apply(store_write_t *w, span_t item, span_t user, const list_change_t *c);

/* Builds both indexes anew from the rows and the retained log, in this transaction: every pair
 * whose set is not empty, at the positions of its transitions in the retained log; a pair (or a
 * kind) that changed before the oldest retained entry at position 0 with the oldest entry's time
 * (the upgrade of a store made before the lists, a moved store). Writer thread. */
int store_lists_rebuild(store_write_t *w);

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
/* Calls fn for at most q->limit entries, newest first. fn returns 0 to go on. */
int store_read_list(store_read_t *r, const store_list_query_t *q, store_list_fn fn, void *arg);

/* The check that the lists equal the rows. For one item: every row compared with the lists' entries
 * for it, in both indexes, and every entry of the item's index with a row; a row's set is the one
 * expect gives (the set as folded: a pair changed by the log after the checkpoint has its set before
 * that change). With item empty: the two indexes' sizes against each other (an entry of the user
 * index without its twin in the item index). *mismatches counts what disagrees. Any thread. */
typedef kindset_t (*store_list_expect_fn)(void *arg, span_t user, kindset_t row_set);
int store_read_lists_check(store_read_t *r, span_t item, store_list_expect_fn expect, void *arg, uint64_t *mismatches);

#endif
