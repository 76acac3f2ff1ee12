/* lmdb_internal.h — what the files of the LMDB store share: its structs, key and value layouts,
 * and helpers. Only the files of src/store/lmdb/ include it; nothing above the seam does. */
#ifndef TALLY_STORE_LMDB_INTERNAL_H
#define TALLY_STORE_LMDB_INTERNAL_H

#include <assert.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/pairfilter.h"
#include "store/store_impl.h"

/* 1 had a user index, user_items (opening a 1 drops it); 2 had no lists (opening a 2 builds them); 3
 * kept the user index in a database of its own, luser (opening a 3 moves it into idem) */
#define SCHEMA_VERSION "4"
#define MAX_DBS 12
#define MAX_READERS 512
#define ROW_VALUE_LEN 9      /* [disk code of the one kind, 0 = none][u64 version] */
#define ROW_VALUE_SET_LEN 11 /* [SET_MARK][u16 disk codes, bit d-1 for d][u64 version]: several kinds */
/* Either may be followed by the lists' record of the pair (lmdb_lists.c): where its entries are. It
 * lives in the row so that the fold's update of it lands on the page the write already made dirty. */
#define LMDB_LIST_RECORD_MAX (4 + 8 + 8 * KINDS_MAX) /* [set u32][any seq u64][seq u64 per kind] */
#define LOG_HEADER_LEN 19 /* from and to as disk codes, or both SET_MARK and two u16 sets after it */
#define LOG_SETS_LEN 4
#define SET_MARK 0xFF
#define COUNTS_REACTORS_TAG 'R' /* a counts value of many mode: [tag][i64 reactors][i64 × kinds] */
#define IDEM_HEADER_LEN 52
#define KEY_BUF_LEN (1 + 255 + 255)
/* In idem, the byte after [len][user] that marks the user's list entries (lmdb_lists.c); an
 * idempotency key begins with a printable byte, so the two never meet and a user's entries sort
 * before the user's records. */
#define LMDB_LIST_TAG 0x00
#define LMDB_MAX_KEY 511 /* LMDB's default key size limit */

/* The journal (lmdb_journal.c): a base is recorded at most this often, and sooner once a file holds
 * this much. Between two, a snapshot keeps the base's pages from reuse, so the data file grows by
 * about the pages the commits of that interval write (see docs/operations.md). */
#define JOURNAL_CHECKPOINT_MS 250
#define JOURNAL_SWITCH_BYTES (64u << 20)

typedef struct {
    int fd[2];          /* journal-0, journal-1: appended to in turn, one per checkpoint */
    int cur;            /* the one appended to */
    uint64_t off;       /* where its next record goes */
    size_t pending_len; /* the record appended for the transaction being committed */
    uint8_t *ops;       /* the open write transaction's changes, encoded */
    size_t ops_len, ops_cap, nops;
    bool recording;       /* off while the store opens: that work is synced as a whole */
    bool broken;          /* a failed record could not be cut off: commits refused */
    MDB_dbi dbs[MAX_DBS]; /* a change names its database by its index here */
    int ndbs;
    char dir[PATH_MAX];
    char base_path[PATH_MAX + 16];
    uint32_t psize;       /* LMDB's page size: the meta pages are pages 0 and 1 */
    uint8_t *ck_metas;    /* the meta pages of the checkpoint under way */
    pthread_mutex_t lock; /* ck_pending, ck_txnid, pin, old_pin, stop */
    pthread_cond_t cond;
    bool locks_made, thread_started, stop, ck_pending;
    pthread_t thread;
    uint64_t ck_txnid;
    MDB_txn *pin, *old_pin; /* snapshots of the base being recorded and of the one before */
    uint64_t last_start_ms; /* writer thread only */
    uint64_t interval_ms;   /* between checkpoints (store_options_t.checkpoint_interval_ms) */
    _Atomic uint64_t records, bytes, checkpoints, checkpoint_failures, last_checkpoint_ms;
    /* Why the journal has not started (an errno; 0 once started): set while a full disk defers
     * its start, and every write transaction is refused until a retry succeeds (lmdb_journal_start). */
    _Atomic int start_error;
} lmdb_journal_t;

/* Epochs (lmdb_write.c): while more batches wait, the writer's batches are committed into one LMDB
 * transaction, each as a child of it, each durable by its own journal record and answered at once;
 * LMDB commits the epoch when nothing more waits, or after this long or this many record bytes, so
 * that a page the batches share is copied and written once for all of them. Only with this much of
 * the map left (a store about to fill commits every batch, so a full map fails one batch, never an
 * epoch's acknowledged ones). */
#define EPOCH_MAX_MS 100
#define EPOCH_MAX_BYTES (2u << 20)
#define EPOCH_MAX_OPS 16384u              /* changes: bounds the pages the epoch holds dirty (LMDB allows 131071) */
#define EPOCH_MAP_HEADROOM (256ull << 20) /* of the map, and of the disk's free space */

/* The overlay (lmdb_overlay.c): the rows an open epoch's batches wrote, for readers. */
typedef struct {
    uint64_t hash;
    uint16_t klen;
    uint8_t vlen; /* the row value's reaction part */
    bool gone;    /* the row was deleted */
    uint8_t key[KEY_BUF_LEN];
    uint8_t val[ROW_VALUE_SET_LEN];
} lmdb_overlay_entry_t;

typedef struct {
    lmdb_overlay_entry_t *entries;
    size_t n, cap;
    uint32_t *slots; /* entry index + 1, or 0: open addressing */
    size_t nslots;
    uint64_t txnid; /* the epoch (LMDB transaction) its rows belong to */
} lmdb_overlay_gen_t;

typedef struct {
    pthread_rwlock_t lock;
    lmdb_overlay_gen_t gen[2]; /* [cur]: the open epoch's; the other: the epoch committed before it */
    int cur;
    uint64_t dropped; /* the newest epoch whose rows were dropped: an older snapshot must begin again */
    bool made;
} lmdb_overlay_t;

typedef struct lmdb_store lmdb_store_t;
typedef struct lmdb_read lmdb_read_t;
typedef struct lmdb_write lmdb_write_t;

struct lmdb_read {
    store_read_t base; /* first: a store_read_t * is a lmdb_read_t * */
    MDB_txn *txn;
    lmdb_store_t *store;
};

struct lmdb_write {
    store_write_t base;
    MDB_txn *txn;
    lmdb_store_t *store;
    uint64_t next_seq;
    bool active;
    pthread_t thread; /* the one that began it: only it may use the transaction (LMDB's rule too) */
};

/* A write transaction's calls: it is open, and used on the thread that began it. Cheap, so kept in
 * release builds (asserts are not compiled out here). */
#define LMDB_WRITE_CHECK(w) assert((w)->active &&pthread_equal((w)->thread, pthread_self()))

struct lmdb_store {
    store_t base;
    MDB_env *env;
    MDB_dbi rows, log, counts, meta, idem, idem_exp, aux;
    MDB_dbi litem; /* the item index (lmdb_lists.c); the user index is in idem */
    /* the idempotency claims (lmdb_claims.c) and their expiry index; claims_open false only for a
     * visitor on a store made before them (it never writes them) */
    MDB_dbi claims, claims_exp;
    bool claims_open;
    bool lists_stale;             /* opening found lists of the other mode: built anew */
    kinds_t kinds;                /* the configured kinds (codes used above the seam) */
    int db_kinds;                 /* kinds known on disk */
    reaction_mode_t mode;         /* as opened: many mode keeps each item's reactors in its counts */
    int cfg_to_db[KINDS_MAX + 1]; /* configured code → disk code */
    int db_to_cfg[KINDS_MAX + 1]; /* disk code → configured code */
    uint64_t next_seq;            /* next log sequence number (committed state) */
    struct lmdb_write write;
    /* which (item, user) pairs have a row: filled by filter_thread, then kept by store_row_put */
    pairfilter_t filter;
    atomic_bool filter_ready, filter_stop;
    pthread_t filter_thread;
    bool filter_thread_started;
    lmdb_journal_t journal;
    /* the open epoch (writer thread): NULL, or the transaction the batches are committed into */
    MDB_txn *epoch;
    uint64_t epoch_started_ms, epoch_bytes, epoch_ops;
    uint32_t epoch_parts;     /* journal records written for it */
    bool (*defer)(void *arg); /* the open batch may leave the epoch open if this says so (store_write_defer) */
    void *defer_arg;
    lmdb_overlay_t overlay;
    _Atomic uint64_t commits;   /* LMDB's own commits (an epoch's batches share one) */
    _Atomic uint64_t acked_seq; /* the newest log position a durable batch took (store_read_acknowledged) */
    bool visitor;               /* another process owns the directory (lmdb_dir_owner): read-only here */
    int dir_lock_fd;            /* the directory lock this store took for itself, or -1 */
};

static inline void lmdb_put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}
static inline uint64_t lmdb_get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* Big-endian, for key parts that must sort: list positions, expiry times. */
static inline void lmdb_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}
static inline uint64_t lmdb_get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}
static inline void lmdb_put_u16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, sizeof v);
}
static inline uint16_t lmdb_get_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Checks, before anything is written into it, that dir (which exists) is empty or tally's own: a
 * TALLY_STORE marker, or, without one, only the files of a store of an earlier version with tally's
 * schema record (read with MDB_RDONLY | MDB_NOLOCK). Writes the marker where it is missing.
 * Returns 0, or -1 with err filled (another program's directory or store: nothing was written). */
int lmdb_dir_claim(const char *dir, char *err, size_t errlen);

/* Whether this process is the directory's owner, the one that recovers and journals the store: 1
 * when it holds the lock already (lmdb_lock_dir) or has just taken it (*taken: its fd, to close at
 * the store's close; else -1), 0 when another process holds it (a tool beside a running tallyd:
 * the store is then read-only here), -1 with err filled. */
int lmdb_dir_owner(const char *dir, int *taken, char *err, size_t errlen);

/* A STORE_ code for an LMDB (or errno) result. */
int lmdb_rc(int rc);
/* [len u8][a][b] — the key of a row (item, user), an idempotency record (user, key), a counts
 * record (item, ""). */
size_t lmdb_pair_key(char buf[KEY_BUF_LEN], span_t a, span_t b);
int lmdb_meta_get(MDB_txn *txn, MDB_dbi meta, const char *name, MDB_val *val);
void lmdb_row_decode(const lmdb_store_t *s, const MDB_val *val, reaction_row_t *row);
/* The length of a row value's reaction part (what follows is the lists' record); 0 when malformed. */
size_t lmdb_row_base_len(const MDB_val *val);
int lmdb_counts_get(const lmdb_store_t *s, MDB_txn *txn, span_t item, int64_t counts[KINDS_MAX + 1]);
int lmdb_txn_log_scan(const lmdb_store_t *s, MDB_txn *txn, uint64_t after, size_t limit, store_log_fn fn, void *arg);
int lmdb_txn_checkpoint_get(const lmdb_store_t *s, MDB_txn *txn, uint64_t *seq);
/* A set of configured codes as a set of disk codes (bit d for code d), and back. */
uint32_t lmdb_set_to_db(const lmdb_store_t *s, kindset_t set);
kindset_t lmdb_set_from_db(const lmdb_store_t *s, uint32_t db);
/* Builds the lists anew from the rows and the retained log, in txn (lmdb_lists.c). */
int lmdb_txn_lists_rebuild(const lmdb_store_t *s, MDB_txn *txn);
/* The item of a rows or counts key ([len][item]…), or false when the key is malformed. */
bool lmdb_key_item(const MDB_val *key, span_t *item);
/* The floor below the other files (lmdb_codec.c): a meta record written; the row as txn sees it
 * (without the overlay); bad bytes on the disk reported (STORE_ERROR); a set as the row's first
 * byte; a counts value decoded and encoded as the mode keeps it; the auxiliary records under prefix
 * in key order. */
int lmdb_meta_put(MDB_txn *txn, MDB_dbi meta, const char *name, const void *data, size_t len);
int lmdb_txn_row_get(const lmdb_store_t *s, MDB_txn *txn, span_t item, span_t user, reaction_row_t *row);
int lmdb_corrupt(span_t item, const char *what);
uint8_t lmdb_set_encode(const lmdb_store_t *s, kindset_t set, uint16_t *several);
int lmdb_counts_decode(const lmdb_store_t *s, span_t item, const MDB_val *val, int64_t counts[KINDS_MAX + 1]);
size_t lmdb_counts_encode(const lmdb_store_t *s, reaction_mode_t mode, const int64_t counts[KINDS_MAX + 1],
                          uint8_t buf[1 + (KINDS_MAX + 1) * sizeof(int64_t)]);
int lmdb_aux_walk(MDB_txn *txn, MDB_dbi dbi, span_t prefix, store_aux_fn fn, void *arg);
/* Whether the record STORE_VOID_PREFIX<user> exists in txn's aux database (store_user_voided). */
int lmdb_user_voided_txn(MDB_txn *txn, MDB_dbi aux, span_t user, bool *voided);
/* LMDB's commit of the open epoch (lmdb_write.c; writer thread, no batch open): readers see its
 * batches. */
int lmdb_epoch_commit(lmdb_store_t *s);

/* The operations of store.h, lmdb_<name> for each entry of STORE_OPS, gathered in lmdb_store_ops
 * (lmdb_ops.c). */
#define LMDB_DECLARE_OP(ret, name, handle, params, args) ret lmdb_##name params;
#define LMDB_DECLARE_PROC(name, handle, params, args) void lmdb_##name params;
STORE_OPS(LMDB_DECLARE_OP, LMDB_DECLARE_PROC)
#undef LMDB_DECLARE_OP
#undef LMDB_DECLARE_PROC
/* Whether a key of idem is a list entry rather than an idempotency record. */
static inline bool lmdb_idem_is_list(const MDB_val *key)
{
    const uint8_t *k = key->mv_data;
    return key->mv_size > 1 && key->mv_size > 1u + k[0] && k[1 + k[0]] == LMDB_LIST_TAG;
}
/* The idempotency records kept (each has one expiry entry: idem_exp counts them), and the user
 * index's entries (the rest of idem). */
int lmdb_idem_records(const lmdb_store_t *s, MDB_txn *txn, uint64_t *n);
int lmdb_idem_list_entries(const lmdb_store_t *s, MDB_txn *txn, uint64_t *n);
/* Deletes every record of db for which match says so (*del; its return: an LMDB code, MDB_SUCCESS to
 * go on). One walk from the first record; returns a STORE_ code. */
typedef int (*lmdb_match_fn)(void *arg, const MDB_val *key, const MDB_val *val, bool *del);
int lmdb_delete_matching(MDB_txn *txn, MDB_dbi db, lmdb_match_fn match, void *arg);
/* Deletes up to limit of user's idempotency claims (lmdb_claims.c; erasing a user). */
int lmdb_claims_delete_user(lmdb_write_t *w, span_t user, size_t limit, size_t *deleted);
/* Removes every list entry from idem (the lists are rebuilt). */
int lmdb_idem_drop_lists(const lmdb_store_t *s, MDB_txn *txn);
/* Drops expiry entries without their record (stores before schema 4 left an erased user's). */
int lmdb_idem_exp_tidy(const lmdb_store_t *s, MDB_txn *txn);
/* Every change inside a write transaction goes through these (lmdb_journal.c), which keep it for
 * the journal's record of the transaction: mdb_put (not MDB_RESERVE: the value must be whole when
 * given), mdb_del of a key, mdb_cursor_put, mdb_cursor_del, and emptying a database. */
int lmdb_put(MDB_txn *txn, MDB_dbi db, MDB_val *key, MDB_val *val, unsigned flags);
/* A value written in place: lmdb_reserve (mdb_put with MDB_RESERVE), then, once it is filled in,
 * lmdb_reserved with the same key and the val it returned. */
int lmdb_reserve(MDB_txn *txn, MDB_dbi db, MDB_val *key, MDB_val *val);
int lmdb_reserved(MDB_txn *txn, MDB_dbi db, const MDB_val *key, const MDB_val *val);
int lmdb_del(MDB_txn *txn, MDB_dbi db, MDB_val *key);
int lmdb_cursor_put(MDB_cursor *cur, MDB_val *key, MDB_val *val, unsigned flags);
int lmdb_cursor_del(MDB_cursor *cur);
int lmdb_empty(MDB_txn *txn, MDB_dbi db);
/* Whether a file of the data directory is one of the journal's (journal-0, journal-1, journal-base). */
bool lmdb_journal_owns(const char *name);
/* The journal's life (lmdb_journal.c; lmdb_open and lmdb_close call them in this order). */
int lmdb_journal_init(lmdb_store_t *s, const char *dir, uint64_t interval_ms, char *err, size_t errlen);
int lmdb_journal_restore(lmdb_store_t *s, uint64_t *base, char *err, size_t errlen);
int lmdb_journal_replay(lmdb_store_t *s, uint64_t base, char *err, size_t errlen);
int lmdb_journal_start(lmdb_store_t *s, char *err, size_t errlen);
void lmdb_journal_close(lmdb_store_t *s);
/* The write path: changes forgotten (a new or aborted transaction), the record appended and synced
 * before LMDB's commit, then told how that commit went; a checkpoint started when one is due. */
void lmdb_journal_txn_reset(lmdb_store_t *s);
/* How a change names database db in a record (its index in journal.dbs), or -1. */
int lmdb_journal_db(const lmdb_store_t *s, MDB_dbi db);
int lmdb_journal_append(lmdb_store_t *s, uint64_t txnid, uint32_t part);
void lmdb_journal_committed(lmdb_store_t *s, bool ok);
void lmdb_journal_maybe_checkpoint(lmdb_store_t *s);
int lmdb_journal_checkpoint_wait(lmdb_store_t *s);
/* The overlay's life and use (lmdb_overlay.c). add: the rows among a batch's changes (the journal's
 * encoding), into the open epoch txnid's generation (writer thread); an error means the epoch must
 * commit now. committed: epoch txnid is LMDB's now. get: 1 (a row of an epoch newer than the
 * snapshot snap: *gone, or its value's reaction part), 0 (none: the snapshot's is current), -1
 * (the snapshot is older than rows already dropped: begin it again). */
int lmdb_overlay_init(lmdb_overlay_t *o);
void lmdb_overlay_free(lmdb_overlay_t *o);
int lmdb_overlay_add(lmdb_store_t *s, uint64_t txnid, const uint8_t *ops, size_t len);
void lmdb_overlay_committed(lmdb_overlay_t *o, uint64_t txnid);
int lmdb_overlay_get(lmdb_overlay_t *o, uint64_t snap, const MDB_val *key, uint8_t val[ROW_VALUE_SET_LEN], size_t *vlen,
                     bool *gone);
extern const store_ops_t lmdb_store_ops;

#endif
