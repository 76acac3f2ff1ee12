/* store_open.c — above both stores: which store a location names (a directory: the embedded LMDB
 * store; a postgresql:// URI: the PostgreSQL store), and opening it. */
#include <string.h>

#include "store/lmdb/lmdb.h"
#include "store/pg/pg.h"
#include "store/store.h"

bool store_location_is_url(const char *location)
{
    return strncmp(location, "postgresql://", 13) == 0 || strncmp(location, "postgres://", 11) == 0;
}

int store_open(const char *location, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
               size_t errlen)
{
    if (store_location_is_url(location))
        return pg_open(location, kinds, opt, out, err, errlen);
    return lmdb_open(location, kinds, opt, out, err, errlen);
}
