/* corrupt_count.c — test-only: adds DELTA to one stored count with the store's own API, so that
 * tests can check that recount and `tally verify` find (and fix) drift.
 * usage: corrupt_count DIR ITEM KIND DELTA   (the server must not be running on DIR) */
#include <stdio.h>
#include <stdlib.h>

#include "store/store.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: corrupt_count DIR ITEM KIND DELTA\n");
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
