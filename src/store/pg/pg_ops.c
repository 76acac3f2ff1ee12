/* pg_ops.c — the PostgreSQL store's table of operations: pg_<name> for each entry of STORE_OPS. */
#include "store/pg/pg_internal.h"

#define PG_ENTRY(ret, name, handle, params, args) .name = pg_##name,
#define PG_PROC_ENTRY(name, handle, params, args) .name = pg_##name,
const store_ops_t pg_store_ops = {STORE_OPS(PG_ENTRY, PG_PROC_ENTRY)};
