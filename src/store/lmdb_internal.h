/* lmdb_internal.h — what the files of the LMDB store share: its structs, key and value layouts,
 * and helpers. Only src/store/store_lmdb*.c include it; nothing above the seam does. */
#ifndef TALLY_STORE_LMDB_INTERNAL_H
#define TALLY_STORE_LMDB_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/pairfilter.h"
#include "store/store.h"

#define SCHEMA_VERSION "2" /* 1 had a user index, user_items; opening a 1 drops it */
#define MAX_DBS 12
#define MAX_READERS 512
#define ROW_VALUE_LEN 9
#define LOG_HEADER_LEN 19
#define IDEM_HEADER_LEN 52
#define KEY_BUF_LEN (1 + 255 + 255)

struct store_read {
    MDB_txn *txn;
    store_t *store;
};

struct store_write {
    MDB_txn *txn;
    store_t *store;
    uint64_t next_seq;
    bool active;
};

struct store {
    MDB_env *env;
    MDB_dbi rows, log, counts, meta, idem, idem_exp, aux;
    kinds_t kinds;                /* the configured kinds (codes used above the seam) */
    int db_kinds;                 /* kinds known on disk */
    int cfg_to_db[KINDS_MAX + 1]; /* configured code → disk code */
    int db_to_cfg[KINDS_MAX + 1]; /* disk code → configured code */
    uint64_t next_seq;            /* next log sequence number (committed state) */
    struct store_write write;
    /* which (item, user) pairs have a row: filled by filter_thread, then kept by store_row_put */
    pairfilter_t filter;
    atomic_bool filter_ready, filter_stop;
    pthread_t filter_thread;
    bool filter_thread_started;
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

/* A STORE_ code for an LMDB (or errno) result. */
int lmdb_rc(int rc);
/* [len u8][a][b] — the key of a row (item, user), an idempotency record (user, key), a counts
 * record (item, ""). */
size_t lmdb_pair_key(char buf[KEY_BUF_LEN], span_t a, span_t b);
int lmdb_meta_get(MDB_txn *txn, MDB_dbi meta, const char *name, MDB_val *val);
void lmdb_row_decode(const store_t *s, const MDB_val *val, reaction_row_t *row);
int lmdb_counts_get(const store_t *s, MDB_txn *txn, span_t item, int64_t counts[KINDS_MAX + 1]);
int lmdb_log_scan(const store_t *s, MDB_txn *txn, uint64_t after, size_t limit, store_log_fn fn, void *arg);
int lmdb_checkpoint_get(const store_t *s, MDB_txn *txn, uint64_t *seq);
/* The item of a rows or counts key ([len][item]…), or false when the key is malformed. */
bool lmdb_key_item(const MDB_val *key, span_t *item);

#endif
