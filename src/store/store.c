/* store.c — the seam's dispatcher: routes every call of store.h to the table of operations of the
 * handle it is given (one function per entry of STORE_OPS). No decision is made here; opening is
 * store_open.c's. */
#include "store/store_impl.h"

#define STORE_DISPATCH_OP(ret, name, handle, params, args)                                                             \
    ret store_##name params                                                                                            \
    {                                                                                                                  \
        return handle->ops->name args;                                                                                 \
    }
/* close and read_end take NULL (nothing to free), as free() does. */
#define STORE_DISPATCH_PROC(name, handle, params, args)                                                                \
    void store_##name params                                                                                           \
    {                                                                                                                  \
        if (handle)                                                                                                    \
            handle->ops->name args;                                                                                    \
    }
STORE_OPS(STORE_DISPATCH_OP, STORE_DISPATCH_PROC)

int store_read_log_window(store_read_t *r, uint64_t *oldest, uint64_t *newest)
{
    uint64_t first, last, checkpoint;
    int rc = store_read_log_bounds(r, &first, &last);
    if (rc == STORE_OK)
        rc = store_read_checkpoint(r, &checkpoint);
    if (rc != STORE_OK)
        return rc;
    *newest = last > checkpoint ? last : checkpoint;
    *oldest = first ? first : *newest + 1;
    uint64_t acked = store_read_acknowledged(r);
    if (acked > *newest)
        *newest = acked;
    return STORE_OK;
}
