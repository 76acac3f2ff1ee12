/* store_impl.h — what an implementation of the storage seam provides: one table of operations, made
 * from the list in store.h (STORE_OPS). Only the store implementations (src/store/<engine>/) and the
 * dispatcher (store.c) include it. Every handle an implementation gives out (store, snapshot, write
 * transaction) starts with a pointer to its table, so store.c can route each call of store.h to it.
 * Every entry is required: a store without the feature implements it as store.h says (the
 * embedded store's fold_begin returns STORE_ERROR, PostgreSQL's flush is a no-op). */
#ifndef TALLY_STORE_STORE_IMPL_H
#define TALLY_STORE_STORE_IMPL_H

#include "store/store.h"

#define STORE_OP_FIELD(ret, name, handle, params, args) ret(*name) params;
#define STORE_PROC_FIELD(name, handle, params, args) void(*name) params;
typedef struct store_ops {
    STORE_OPS(STORE_OP_FIELD, STORE_PROC_FIELD)
} store_ops_t;
#undef STORE_OP_FIELD
#undef STORE_PROC_FIELD

/* Each store declares its functions <prefix>_<name> from the same list in its internal header and
 * fills its table from it in <prefix>_ops.c, so a new entry of STORE_OPS that a store lacks is a
 * build error, not a NULL call. */

struct store {
    const store_ops_t *ops;
};
struct store_read {
    const store_ops_t *ops;
};
struct store_write {
    const store_ops_t *ops;
};

#endif
