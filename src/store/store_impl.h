/* store_impl.h — what an implementation of the storage seam provides: one table of operations. Only
 * the store implementations (src/store/<engine>/) and the dispatcher (store.c) include it. Every
 * handle an implementation gives out (store, snapshot, write transaction) starts with a pointer to
 * its table, so store.c can route each call of store.h to it. */
#ifndef TALLY_STORE_STORE_IMPL_H
#define TALLY_STORE_STORE_IMPL_H

#include "store/store.h"

/* One entry per operation of store.h, with its contract there. An optional entry (NULL) falls back
 * to the behaviour store.c describes for it. */
typedef struct store_ops {
    void (*close)(store_t *store);
    const kinds_t *(*kinds)(const store_t *store);
    /* optional: NULL means not shared, always ready */
    bool (*shared)(const store_t *store);
    bool (*ready)(store_t *store);
    /* optional: NULL means writes are never refused while the store serves reads */
    bool (*writes_refused)(store_t *store, char *why, size_t len);
    int (*read_begin)(store_t *store, store_read_t **out);
    /* optional: NULL means store_read_begin_single is read_begin */
    int (*read_begin_single)(store_t *store, store_read_t **out);
    void (*read_end)(store_read_t *r);
    int (*read_counts)(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1]);
    /* optional: NULL means one read_counts and read_row per item */
    int (*read_many)(store_read_t *r, const span_t *items, size_t n, span_t user, int64_t (*counts)[KINDS_MAX + 1],
                     reaction_row_t *rows);
    int (*read_row)(store_read_t *r, span_t item, span_t user, reaction_row_t *row);
    int (*write_begin)(store_t *store, store_write_t **out);
    /* optional: NULL means the fold runs in the writer's transactions (store_folds_apart false); a
     * shared store must provide it (only its fold thread looks for other processes' entries) */
    int (*fold_begin)(store_t *store, store_write_t **out);
    int (*write_commit)(store_write_t *w);
    /* optional: NULL means write_commit, every position given at append */
    int (*write_commit_at)(store_write_t *w, uint64_t *log_base);
    void (*write_abort)(store_write_t *w);
    /* optional: NULL means every commit is seen by readers at once (pending false, flush a no-op) */
    void (*write_defer)(store_write_t *w, bool (*more)(void *arg), void *arg);
    bool (*pending)(const store_t *store);
    int (*flush)(store_t *store);
    /* optional: NULL means nothing to prepare */
    int (*write_prepare)(store_write_t *w, const store_pair_t *rows, size_t nrows, const store_pair_t *keys,
                         size_t nkeys, size_t fold_scan);
    /* optional: NULL means always */
    bool (*write_may_fold)(store_write_t *w);
    int (*row_get)(store_write_t *w, span_t item, span_t user, reaction_row_t *row);
    int (*row_put)(store_write_t *w, span_t item, span_t user, const reaction_row_t *row);
    int (*log_append)(store_write_t *w, const transition_t *t, uint64_t *seq);
    int (*log_put)(store_write_t *w, uint64_t seq, const transition_t *t);
    int (*log_scan)(store_write_t *w, uint64_t after, size_t limit, store_log_fn fn, void *arg);
    int (*counts_add)(store_write_t *w, span_t item, const int64_t deltas[KINDS_MAX + 1]);
    int (*checkpoint_get)(store_write_t *w, uint64_t *seq);
    int (*checkpoint_put)(store_write_t *w, uint64_t seq);
    int (*idem_get)(store_write_t *w, span_t user, span_t key, store_idem_t *rec);
    int (*idem_put)(store_write_t *w, span_t user, span_t key, const store_idem_t *rec);
    int (*idem_sweep)(store_write_t *w, uint64_t now_ms, size_t limit, size_t *deleted);
    int (*read_checkpoint)(store_read_t *r, uint64_t *seq);
    int (*read_log)(store_read_t *r, uint64_t after, size_t limit, store_log_fn fn, void *arg);
    int (*read_log_bounds)(store_read_t *r, uint64_t *first, uint64_t *last);
    /* optional: NULL means 0 (every answered write is in the snapshots) */
    uint64_t (*read_acknowledged)(store_read_t *r);
    int (*read_tally_item)(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1]);
    int (*read_items)(store_read_t *r, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited);
    int (*stats)(store_t *store, store_stats_t *st);
    int (*backup)(store_t *store, const char *dir);
    int (*item_users)(store_write_t *w, span_t item, span_t after, size_t limit, store_name_fn fn, void *arg,
                      size_t *visited);
    int (*user_items)(store_write_t *w, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg,
                      size_t *visited, char last[ID_MAX_LEN], size_t *last_len);
    int (*read_idem)(store_read_t *r, store_idem_fn fn, void *arg);
    int (*idem_delete_user)(store_write_t *w, span_t user, size_t limit, size_t *deleted);
    int (*read_rows)(store_read_t *r, store_row_fn fn, void *arg);
    int (*read_log_seek)(store_read_t *r, uint64_t at_ms, uint64_t *seq);
    int (*aux_put)(store_write_t *w, span_t key, span_t value);
    int (*aux_delete_range)(store_write_t *w, span_t from, span_t to);
    int (*read_aux)(store_read_t *r, span_t prefix, store_aux_fn fn, void *arg);
    int (*aux_read_locked)(store_write_t *w, span_t prefix, store_aux_fn fn, void *arg);
    int (*log_prune)(store_write_t *w, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted);
    int (*list_apply)(store_write_t *w, span_t item, span_t user, const list_change_t *c);
    int (*lists_rebuild)(store_write_t *w);
    int (*read_list)(store_read_t *r, const store_list_query_t *q, store_list_fn fn, void *arg);
    int (*read_lists_check)(store_read_t *r, span_t item, store_list_expect_fn expect, void *arg, uint64_t *mismatches);
    int (*export_page)(store_read_t *r, span_t after_item, span_t after_user, size_t limit, store_row_fn fn, void *arg,
                       size_t *visited);
} store_ops_t;

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
