/* pg_export.c — the PostgreSQL store's page of rows for an export: one keyset statement in the
 * snapshot the export holds (its repeatable-read, read-only transaction, begun at the first page). */
#include "store/pg/pg_internal.h"

#include <stdio.h>
#include <stdlib.h>

int pg_export_page(store_read_t *r_, span_t after_item, span_t after_user, size_t limit, store_row_fn fn, void *arg,
                   size_t *visited)
{
    pg_read_t *r = (pg_read_t *)r_;
    char item[ID_MAX_LEN + 1], user[ID_MAX_LEN + 1], lim[24];
    snprintf(item, sizeof item, "%.*s", (int)after_item.len, after_item.ptr);
    snprintf(user, sizeof user, "%.*s", (int)after_user.len, after_user.ptr);
    snprintf(lim, sizeof lim, "%zu", limit);
    const char *p[] = {item, user, lim};
    int rc = STORE_OK;
    *visited = 0;
    /* ("", "") sorts below every row: ids are never empty */
    PGresult *res = pg_rexec(r, "export-page",
                             "SELECT item, \"user\", kind, version FROM tally_rows WHERE (item, \"user\") > ($1, $2)"
                             " AND version > 0 ORDER BY item, \"user\" LIMIT $3::bigint",
                             3, p, &rc);
    if (!res)
        return rc;
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        reaction_row_t row = {pg_cfg_set(r->store, strtol(PQgetvalue(res, i, 2), NULL, 10)),
                              strtoull(PQgetvalue(res, i, 3), NULL, 10)};
        ++*visited;
        if (fn(arg, (span_t){PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0)},
               (span_t){PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1)}, &row) != 0)
            break;
    }
    PQclear(res);
    return STORE_OK;
}
