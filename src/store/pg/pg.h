/* pg.h — the PostgreSQL store (several tallyd nodes sharing one database): how to open it.
 * Everything else it does is reached through store.h. */
#ifndef TALLY_STORE_PG_PG_H
#define TALLY_STORE_PG_PG_H

#include "store/store.h"

/* store_open for a postgresql:// URI (libpq's syntax; PG* variables and the password file apply):
 * connects, creates or checks the schema and the settings the nodes share. */
int pg_open(const char *uri, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err, size_t errlen);

#endif
