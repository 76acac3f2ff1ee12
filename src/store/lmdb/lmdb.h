/* lmdb.h — the embedded store (LMDB in one directory): how to open it. Everything else it does is
 * reached through store.h. */
#ifndef TALLY_STORE_LMDB_LMDB_H
#define TALLY_STORE_LMDB_LMDB_H

#include "store/store.h"

/* store_open for a directory (created if needed); see store.h. */
int lmdb_open(const char *dir, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
              size_t errlen);

#endif
