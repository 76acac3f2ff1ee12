/* userfold.c — a user's list across shards (userfold.h says how and why). */
#include "engine/userfold.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/listchange.h"
#include "core/log.h"
#include "core/parse.h"

#define FLOOR_READ_MS 1000 /* how often the leader of a shard's fold reads the others' checkpoints of it */

typedef struct {
    userfold_t *f;
    size_t k;
    atomic_uint_fast64_t floor; /* userfold_prune_floor */
    uint64_t floor_read_ms;     /* monotonic; the fold thread of k only */
    bool failing[SHARD_MAX];    /* a source's last read failed (said once); the fold thread of k only */
} slot_t;

struct userfold {
    shards_t *shards;
    size_t n;
    slot_t slot[];
};

size_t userfold_key(char buf[USERFOLD_KEY_MAX], size_t source)
{
    int n = snprintf(buf, USERFOLD_KEY_MAX, USERFOLD_KEY_PREFIX "%zu", source);
    return n > 0 ? (size_t)n : 0;
}

int userfold_record_parse(span_t key, span_t value, size_t *source, uint64_t *seq)
{
    span_t prefix = SPAN_LIT(USERFOLD_KEY_PREFIX);
    uint64_t j;
    if (key.len <= prefix.len || memcmp(key.ptr, prefix.ptr, prefix.len) != 0)
        return -1;
    span_t digits = {key.ptr + prefix.len, key.len - prefix.len};
    if ((digits.len > 1 && digits.ptr[0] == '0') || parse_uint(digits, SHARD_MAX - 1, &j) != 0 ||
        (value.len > 1 && value.ptr[0] == '0') || parse_uint(value, UINT64_MAX, seq) != 0)
        return -1;
    *source = (size_t)j;
    return 0;
}

int userfold_new(shards_t *shards, userfold_t **out)
{
    *out = NULL;
    size_t n = shards_count(shards);
    if (n < 2)
        return 0; /* one shard: its fold is the counts' (userfold.h) */
    userfold_t *f = calloc(1, sizeof *f + n * sizeof f->slot[0]);
    if (!f)
        return -1;
    f->shards = shards;
    f->n = n;
    for (size_t k = 0; k < n; k++) {
        f->slot[k].f = f;
        f->slot[k].k = k;
        atomic_init(&f->slot[k].floor, 0);
    }
    *out = f;
    return 0;
}

void userfold_free(userfold_t *f)
{
    free(f);
}

void *userfold_arg(userfold_t *f, size_t k)
{
    return &f->slot[k];
}

uint64_t userfold_prune_floor(void *arg)
{
    const slot_t *slot = arg;
    return atomic_load_explicit(&slot->floor, memory_order_relaxed);
}

/* --- the checkpoints --- */

typedef struct {
    uint64_t seq[SHARD_MAX];
} checkpoints_t;

static int checkpoint_one(void *arg, span_t key, span_t value)
{
    checkpoints_t *c = arg;
    size_t j;
    uint64_t seq;
    if (userfold_record_parse(key, value, &j, &seq) == 0)
        c->seq[j] = seq;
    return 0;
}

typedef struct {
    span_t key;
    uint64_t seq;
    bool bad;
} one_t;

static int exact_one(void *arg, span_t key, span_t value)
{
    one_t *o = arg;
    size_t j;
    if (span_eq(key, o->key))
        o->bad = userfold_record_parse(key, value, &j, &o->seq) != 0;
    return 0;
}

int userfold_checkpoint_read(store_read_t *target, size_t k, uint64_t *seq)
{
    char key[USERFOLD_KEY_MAX];
    one_t o = {.key = {key, userfold_key(key, k)}};
    int rc = store_read_aux(target, o.key, exact_one, &o);
    if (rc == STORE_OK && o.bad) {
        log_line("level=error event=store-corrupt record=%s error=\"not a checkpoint\"", key);
        rc = STORE_ERROR;
    }
    *seq = o.seq;
    return rc;
}

/* Every other shard's checkpoint of k's log, into k's floor (the least; it stays where it was while
 * one cannot be read). */
static void floor_read(slot_t *slot)
{
    const userfold_t *f = slot->f;
    uint64_t least = UINT64_MAX;
    for (size_t j = 0; j < f->n; j++) {
        if (j == slot->k)
            continue;
        store_t *store = shards_store(f->shards, j);
        store_read_t *snap;
        uint64_t seq = 0;
        if (!store_ready(store) || store_read_begin_single(store, &snap) != STORE_OK)
            return;
        int rc = userfold_checkpoint_read(snap, slot->k, &seq);
        store_read_end(snap);
        if (rc != STORE_OK)
            return;
        least = seq < least ? seq : least;
    }
    atomic_store_explicit(&slot->floor, least, memory_order_relaxed);
}

/* --- the fold of one source --- */

typedef struct {
    const userfold_t *f;
    size_t k;
    listmap_t pairs;
    uint64_t last;
    size_t seen;
    bool more;
    int rc;
} source_t;

static int entry_one(void *arg, uint64_t seq, const transition_t *t)
{
    source_t *s = arg;
    if (s->seen == USERFOLD_BATCH) {
        s->more = true;
        return 1;
    }
    s->seen++;
    s->last = seq;
    /* a void or a restore leaves the lists as they are (pipeline.c); other shards' users are theirs */
    if (t->from == t->to || shards_of_user(s->f->shards, t->user) != s->k)
        return 0;
    listmap_entry_t *p = listmap_get(&s->pairs, t->item, t->user);
    if (!p) {
        s->rc = STORE_ERROR;
        return 1;
    }
    list_change_add(&p->change, t->from, t->to, 0, t->at_ms); /* position 0: k's, at commit */
    return 0;
}

/* Source j's entries after *checkpoint into tx's lists, and the checkpoint moved past them. A source
 * that cannot be read is left for the next fold (STORE_OK); an error of tx is returned. */
static int source_fold(slot_t *slot, store_write_t *tx, size_t j, uint64_t checkpoint, bool *more)
{
    source_t s = {.f = slot->f, .k = slot->k, .rc = STORE_OK};
    store_t *store = shards_store(slot->f->shards, j);
    store_read_t *snap;
    int rc = store_ready(store) ? store_read_begin_single(store, &snap) : STORE_UNAVAILABLE;
    if (rc == STORE_OK) {
        rc = store_read_log(snap, checkpoint, USERFOLD_BATCH + 1, entry_one, &s);
        store_read_end(snap);
    }
    if (rc == STORE_OK)
        rc = s.rc;
    if (rc != STORE_OK) {
        if (!slot->failing[j])
            log_line("level=warn event=user-lists-source-unread shard=%zu source=%zu error=\"%s\"", slot->k, j,
                     rc == STORE_UNAVAILABLE ? "unavailable" : "read failed");
        slot->failing[j] = true;
        listmap_free(&s.pairs);
        return STORE_OK;
    }
    slot->failing[j] = false;
    for (size_t i = 0; rc == STORE_OK && i < s.pairs.count; i++) {
        const listmap_entry_t *p = &s.pairs.entries[i];
        rc = store_list_apply(tx, (span_t){p->item, p->item_len}, (span_t){p->user, p->user_len}, &p->change);
    }
    if (rc == STORE_OK && s.seen) {
        char key[USERFOLD_KEY_MAX], value[24];
        int n = snprintf(value, sizeof value, "%llu", (unsigned long long)s.last);
        rc = store_aux_put(tx, (span_t){key, userfold_key(key, j)}, (span_t){value, (size_t)n});
    }
    *more |= s.more;
    listmap_free(&s.pairs);
    return rc;
}

int userfold_fold(void *arg, store_write_t *tx, bool *more)
{
    slot_t *slot = arg;
    const userfold_t *f = slot->f;
    checkpoints_t cp = {0};
    /* under the record's lock: even two nodes that both believed they lead fold one after the other */
    int rc = store_aux_read_locked(tx, SPAN_LIT(USERFOLD_KEY_PREFIX), checkpoint_one, &cp);
    for (size_t j = 0; rc == STORE_OK && j < f->n; j++)
        if (j != slot->k)
            rc = source_fold(slot, tx, j, cp.seq[j], more);
    uint64_t now = clock_ms(CLOCK_MONOTONIC);
    if (rc == STORE_OK && now - slot->floor_read_ms >= FLOOR_READ_MS) {
        slot->floor_read_ms = now;
        floor_read(slot);
    }
    return rc;
}

/* --- the recount's check of the copies --- */

enum { HAVE = 1, ROW = 2, UNFOLDED = 4 };

typedef struct {
    kindset_t have_set, have_entries, row_set, from_set;
    unsigned flags;
} pairinfo_t;

typedef struct {
    shards_t *shards;
    size_t k;
    const itemmap_t *items;
    listmap_t pairs;
    pairinfo_t *info; /* by entry of pairs */
    size_t info_cap;
    span_t item; /* copy_one's, row_one's */
    size_t rows_seen;
    char last_user[ID_MAX_LEN];
    size_t last_user_len;
    bool item_done;
    int rc;
} check_t;

static pairinfo_t *pair_info(check_t *c, span_t item, span_t user)
{
    listmap_entry_t *e = listmap_get(&c->pairs, item, user);
    if (!e)
        return NULL;
    size_t i = (size_t)(e - c->pairs.entries);
    if (i >= c->info_cap) {
        size_t cap = c->info_cap ? c->info_cap * 2 : 64;
        while (cap <= i)
            cap *= 2;
        pairinfo_t *info = realloc(c->info, cap * sizeof *info);
        if (!info)
            return NULL;
        memset(info + c->info_cap, 0, (cap - c->info_cap) * sizeof *info);
        c->info = info;
        c->info_cap = cap;
    }
    return &c->info[i];
}

static int copy_one(void *arg, span_t user, kindset_t set, kindset_t entries)
{
    check_t *c = arg;
    pairinfo_t *p = pair_info(c, c->item, user);
    if (!p) {
        c->rc = STORE_ERROR;
        return 1;
    }
    p->have_set = set;
    p->have_entries = entries;
    p->flags |= HAVE;
    return 0;
}

static int unfolded_one(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    check_t *c = arg;
    if (t->from == t->to || !itemmap_find(c->items, t->item) || shards_of_user(c->shards, t->user) != c->k)
        return 0;
    pairinfo_t *p = pair_info(c, t->item, t->user);
    if (!p) {
        c->rc = STORE_ERROR;
        return 1;
    }
    if (!(p->flags & UNFOLDED)) { /* the first change after the checkpoint: its from is the folded set */
        p->flags |= UNFOLDED;
        p->from_set = t->from;
    }
    return 0;
}

static int row_one(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    check_t *c = arg;
    if (!span_eq(item, c->item)) {
        c->item_done = true;
        return 1;
    }
    c->rows_seen++;
    memcpy(c->last_user, user.ptr, user.len);
    c->last_user_len = user.len;
    if (row->set == KINDSET_EMPTY || shards_of_user(c->shards, user) != c->k)
        return 0;
    pairinfo_t *p = pair_info(c, item, user);
    if (!p) {
        c->rc = STORE_ERROR;
        return 1;
    }
    p->row_set = row->set;
    p->flags |= ROW;
    return 0;
}

/* The copies on k of j's items' pairs against j's rows. */
static int check_target(check_t *c, store_t *source, store_t *target, size_t j)
{
    store_read_t *snap;
    uint64_t checkpoint = 0;
    int rc = store_read_begin(target, &snap);
    if (rc != STORE_OK)
        return rc;
    rc = userfold_checkpoint_read(snap, j, &checkpoint);
    for (size_t i = 0; rc == STORE_OK && i < c->items->count; i++) {
        const itemmap_entry_t *e = &c->items->entries[i];
        c->item = (span_t){e->item, e->item_len};
        if (shards_of_item(c->shards, c->item) == j) /* k's own items' pairs are k's */
            rc = store_read_list_pairs(snap, c->item, copy_one, c);
    }
    store_read_end(snap);
    if (rc != STORE_OK || (rc = store_read_begin(source, &snap)) != STORE_OK)
        return rc;
    rc = store_read_log(snap, checkpoint, SIZE_MAX, unfolded_one, c);
    for (size_t i = 0; rc == STORE_OK && c->rc == STORE_OK && i < c->items->count; i++) {
        const itemmap_entry_t *e = &c->items->entries[i];
        c->item = (span_t){e->item, e->item_len};
        c->last_user_len = 0;
        c->item_done = false;
        for (;;) { /* the item's rows, a page at a time */
            size_t visited = 0;
            c->rows_seen = 0;
            rc = store_export_page(snap, c->item, (span_t){c->last_user, c->last_user_len}, 1024, row_one, c, &visited);
            if (rc != STORE_OK || c->rc != STORE_OK || c->item_done || visited < 1024)
                break;
        }
    }
    store_read_end(snap);
    return rc == STORE_OK ? c->rc : rc;
}

int userfold_check(shards_t *shards, size_t j, const itemmap_t *items, uint64_t *mismatches)
{
    *mismatches = 0;
    int rc = STORE_OK;
    for (size_t k = 0; rc == STORE_OK && k < shards_count(shards); k++) {
        if (k == j)
            continue;
        check_t c = {.shards = shards, .k = k, .items = items, .rc = STORE_OK};
        rc = check_target(&c, shards_store(shards, j), shards_store(shards, k), j);
        for (size_t i = 0; rc == STORE_OK && i < c.pairs.count; i++) {
            const pairinfo_t *p = &c.info[i];
            kindset_t want = p->flags & UNFOLDED ? p->from_set : p->flags & ROW ? p->row_set : KINDSET_EMPTY;
            kindset_t want_entries = want ? want | 1u : 0, have = p->flags & HAVE ? p->have_entries : 0;
            *mismatches += (uint64_t)__builtin_popcount(want_entries ^ have) +
                           (want && want_entries == have && p->have_set != want);
        }
        listmap_free(&c.pairs);
        free(c.info);
    }
    return rc;
}
