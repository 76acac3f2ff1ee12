/* corrupt_count.c — test-only: adds DELTA to one stored count with the store's own API, so that
 * tests can check that recount and `tally verify` find (and fix) drift; or, with =VALUE, writes
 * VALUE into the record's bytes with liblmdb directly, past every check of the store (a corrupt
 * record: a negative count). The raw mode assumes the kinds' disk order is the configured order
 * (a store made with one --reactions list).
 * usage: corrupt_count DIR ITEM KIND DELTA|=VALUE   (the server must not be running on DIR) */
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

/* counts[ITEM][kind] = value in the bytes of the record ([len][item] → int64 per kind). */
static int write_raw(const char *dir, span_t item, int kind, int64_t value)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi counts;
    char kbuf[256];
    int64_t disk[KINDS_MAX] = {0};
    kbuf[0] = (char)item.len;
    memcpy(kbuf + 1, item.ptr, item.len);
    MDB_val key = {1 + item.len, kbuf}, val;
    int rc = mdb_env_create(&env);
    if (rc == 0 && (rc = mdb_env_set_maxdbs(env, 16)) == 0 && (rc = mdb_env_open(env, dir, 0, 0640)) == 0 &&
        (rc = mdb_txn_begin(env, NULL, 0, &txn)) == 0) {
        size_t n = kind;
        if ((rc = mdb_dbi_open(txn, "counts", 0, &counts)) == 0 && (rc = mdb_get(txn, counts, &key, &val)) == 0) {
            memcpy(disk, val.mv_data, val.mv_size < sizeof disk ? val.mv_size : sizeof disk);
            n = val.mv_size / sizeof(int64_t) > n ? val.mv_size / sizeof(int64_t) : n;
        }
        if (rc == 0 || rc == MDB_NOTFOUND) {
            disk[kind - 1] = value;
            val = (MDB_val){n * sizeof(int64_t), disk};
            rc = mdb_put(txn, counts, &key, &val, 0);
        }
        rc = rc == 0 ? mdb_txn_commit(txn) : (mdb_txn_abort(txn), rc);
    }
    mdb_env_close(env);
    if (rc != 0)
        fprintf(stderr, "corrupt_count: %s\n", mdb_strerror(rc));
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: corrupt_count DIR ITEM KIND DELTA|=VALUE\n");
        return 2;
    }
    char err[512];
    store_t *store;
    store_options_t opt = {.map_size_bytes = STORE_MAP_SIZE_DEFAULT};
    if (store_open(argv[1], NULL, &opt, &store, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "corrupt_count: %s\n", err);
        return 1;
    }
    int kind = kinds_find(store_kinds(store), span_of(argv[3]), false);
    if (kind < 0) {
        fprintf(stderr, "corrupt_count: no kind %s\n", argv[3]);
        return 1;
    }
    if (argv[4][0] == '=') {
        store_close(store);
        return write_raw(argv[1], span_of(argv[2]), kind, strtoll(argv[4] + 1, NULL, 10));
    }
    int64_t deltas[KINDS_MAX + 1] = {0};
    deltas[kind] = strtoll(argv[4], NULL, 10);
    store_write_t *w = NULL;
    int rc = store_write_begin(store, &w);
    if (rc == STORE_OK) {
        rc = store_counts_add(w, span_of(argv[2]), deltas);
        if (rc == STORE_OK)
            rc = store_write_commit(w);
        else
            store_write_abort(w);
    }
    store_close(store);
    return rc == STORE_OK ? 0 : 1;
}
