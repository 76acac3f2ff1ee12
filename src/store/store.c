/* store.c — the seam's dispatcher: routes every call of store.h to the table of operations of the
 * handle it is given (one function per entry of STORE_OPS). No decision is made here; opening is
 * store_open.c's. */
#include "store/store_impl.h"

#include "core/parse.h"

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

/* The record STORE_LOG_PRUNED_KEY, when the snapshot holds it. */
typedef struct {
    uint64_t seq;
    bool found;
} pruned_t;

static int pruned_one(void *arg, span_t key, span_t value)
{
    pruned_t *p = arg;
    uint64_t seq;
    if (span_eq_str(key, STORE_LOG_PRUNED_KEY) && parse_uint(value, UINT64_MAX, &seq) == 0) {
        p->seq = seq;
        p->found = true;
    }
    return 0;
}

int store_read_log_window(store_read_t *r, uint64_t *oldest, uint64_t *newest)
{
    uint64_t first, last, checkpoint;
    pruned_t pruned = {0, false};
    int rc = store_read_log_bounds(r, &first, &last);
    if (rc == STORE_OK)
        rc = store_read_checkpoint(r, &checkpoint);
    if (rc == STORE_OK)
        rc = store_read_aux(r, span_of(STORE_LOG_PRUNED_KEY), pruned_one, &pruned);
    if (rc != STORE_OK)
        return rc;
    *newest = last > checkpoint ? last : checkpoint;
    if (pruned.found) /* a log with gaps: its first entry may lie past positions never pruned */
        *oldest = pruned.seq + 1;
    else
        *oldest = first ? first : *newest + 1;
    uint64_t acked = store_read_acknowledged(r);
    if (acked > *newest)
        *newest = acked;
    return STORE_OK;
}
