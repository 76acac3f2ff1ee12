/* lmdb_ops.c — the embedded store's table of operations: lmdb_<name> for each entry of STORE_OPS. */
#include "store/lmdb/lmdb_internal.h"

#define LMDB_ENTRY(ret, name, handle, params, args) .name = lmdb_##name,
#define LMDB_PROC_ENTRY(name, handle, params, args) .name = lmdb_##name,
const store_ops_t lmdb_store_ops = {STORE_OPS(LMDB_ENTRY, LMDB_PROC_ENTRY)};
