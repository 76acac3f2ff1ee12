/* lmdb.h — the embedded store (LMDB in one directory): how to open it, and its directory's lock.
 * Everything else it does is reached through store.h. */
#ifndef TALLY_STORE_LMDB_LMDB_H
#define TALLY_STORE_LMDB_LMDB_H

#include "store/store.h"

/* store_open for a directory (created if needed); see store.h. */
int lmdb_open(const char *dir, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
              size_t errlen);

/* Takes the directory's exclusive instance lock (creating the directory and its parents), held
 * until the process exits: the process that holds it owns the store (recovers and journals it);
 * another process opening the directory meanwhile reads it only. Returns the lock's fd, or -1 with
 * err filled (another process has it, or the directory cannot be made). Main thread, before
 * store_open. */
int lmdb_lock_dir(const char *dir, char *err, size_t errlen);

#endif
