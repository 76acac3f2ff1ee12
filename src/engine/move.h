/* move.h — copying a whole store into an empty one, for moving from the embedded store to
 * PostgreSQL without losing history. No process may write to either store meanwhile. */
#ifndef TALLY_ENGINE_MOVE_H
#define TALLY_ENGINE_MOVE_H

#include <stdint.h>

#include "store/store.h"

typedef struct {
    uint64_t rows, keys, log_entries, items, checkpoint;
} move_result_t;

/* Copies from into to, which must be empty (else STORE_ERROR, err says so): the rows with their
 * versions, the idempotency records not yet expired, the retained log at its own positions (so
 * change-feed cursors stay valid), the counts with the checkpoint they were folded to, and the
 * auxiliary records. From one snapshot of from; in transactions of a few thousand records, so a
 * failure part-way leaves to partly filled: empty it (or make a new one) before trying again. */
int move_store(store_t *from, store_t *to, move_result_t *res, char *err, size_t errlen);

#endif
