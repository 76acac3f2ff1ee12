/* export.c — exports, page after page from one held snapshot (export.h). The admin export walks the
 * rows in key order (store_export_page, keyset: each page starts after the last row of the one
 * before); a user's export walks the user's list, newest first (store_read_list with its cursor).
 * With several shards, every shard's at once, merged. */
#include "engine/export.h"

#include <stdlib.h>
#include <string.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/kindsjson.h"

/* The admin export's parts, in order: the rows, the voided users (shard 0's, from its snapshot,
 * counted in the closing line's N like the rows), then the closing line. */
typedef enum { PART_ROWS, PART_CLOSING, PART_DONE } part_t;

/* With several shards an export merges the shards' parts, every shard's snapshot held from the start,
 * a bounded buffer of each: the admin export's rows into the one key order a single store gives (an
 * item is on one shard: the item decides, then the user), so that it does not depend on how many
 * shards wrote it; a user's reactions newest first by their time (each shard's own order kept). */
typedef struct {
    char item[ID_MAX_LEN], user[ID_MAX_LEN];
    size_t item_len, user_len;
    kindset_t set;
    uint64_t at_ms; /* a user's export's entry */
} buffered_row_t;

typedef struct {
    struct export *x;
    uint32_t k;
    store_read_t *snap;
    buffered_row_t *rows;
    size_t n, at, cap, visited;
    bool end; /* the shard's rows are all read */
    /* where its next page starts: after this row (item, user), or this list entry (seq, item) */
    char after_item[ID_MAX_LEN], after_user[ID_MAX_LEN];
    size_t after_item_len, after_user_len;
    uint64_t after_seq;
    bool has_cursor;
} merge_shard_t;

struct export
{
    store_t *stores[SHARD_MAX];
    size_t n; /* the shards */
    uint32_t (*shard_of)(void *arg, span_t item);
    void *shard_arg;
    const kinds_t *kinds;
    store_read_t *snap; /* the one store's (NULL with several: merge); NULL once released */
    bool released;      /* export_release: no snapshot is taken again */
    export_kind_t kind;
    part_t part;
    uint64_t deadline_ms, lines;
    char user[ID_MAX_LEN];
    size_t user_len;
    /* where the next page starts: after this row (item, user), or this list entry (seq, item) */
    char after_item[ID_MAX_LEN], after_user[ID_MAX_LEN];
    size_t after_item_len, after_user_len;
    uint64_t after_seq;
    bool has_cursor;
    merge_shard_t *merge; /* the admin export of several shards: one each; else NULL */
};

static void merge_free(export_t *x)
{
    for (size_t k = 0; x->merge && k < x->n; k++) {
        if (x->merge[k].snap)
            store_read_end(x->merge[k].snap);
        free(x->merge[k].rows);
    }
    free(x->merge);
    x->merge = NULL;
}

/* Every shard's snapshot, taken now. */
static int merge_open(export_t *x)
{
    size_t cap = EXPORT_PAGE_ROWS / x->n > 16 ? EXPORT_PAGE_ROWS / x->n : 16;
    if (!(x->merge = calloc(x->n, sizeof *x->merge)))
        return STORE_ERROR;
    for (size_t k = 0; k < x->n; k++) {
        merge_shard_t *m = &x->merge[k];
        m->x = x;
        m->k = (uint32_t)k;
        m->cap = cap;
        if (!(m->rows = malloc(cap * sizeof *m->rows)))
            return STORE_ERROR;
        int rc = store_read_begin(x->stores[k], &m->snap);
        if (rc != STORE_OK) {
            m->snap = NULL;
            return rc;
        }
    }
    return STORE_OK;
}

int export_open(const export_stores_t *from, export_kind_t kind, span_t user, uint64_t deadline_ms, export_t **out)
{
    if (from->n == 0 || from->n > SHARD_MAX || (from->n > 1 && !from->shard_of))
        return STORE_ERROR;
    export_t *x = calloc(1, sizeof *x);
    if (!x)
        return STORE_ERROR;
    memcpy(x->stores, from->stores, from->n * sizeof *x->stores);
    x->n = from->n;
    x->shard_of = from->shard_of;
    x->shard_arg = from->arg;
    x->kinds = store_kinds(x->stores[0]);
    x->kind = kind;
    x->deadline_ms = deadline_ms;
    if (kind == EXPORT_USER) {
        if (user.len == 0 || user.len > ID_MAX_LEN) {
            free(x);
            return STORE_ERROR;
        }
        memcpy(x->user, user.ptr, user.len);
        x->user_len = user.len;
    }
    int rc = x->n > 1 ? merge_open(x) : store_read_begin(x->stores[0], &x->snap);
    if (rc != STORE_OK) {
        merge_free(x);
        free(x);
        return rc;
    }
    *out = x;
    return STORE_OK;
}

typedef struct {
    export_t *x;
    textbuf_t *out;
    size_t visited;
} page_t;

/* {"item":"…","user":"…","reaction":"like"} — the import's own line (reactions in many mode). */
static int row_line(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    page_t *p = arg;
    export_t *x = p->x;
    memcpy(x->after_item, item.ptr, item.len);
    x->after_item_len = item.len;
    memcpy(x->after_user, user.ptr, user.len);
    x->after_user_len = user.len;
    if (row->set == KINDSET_EMPTY)
        return 0;
    textbuf_lit(p->out, "{\"item\":");
    textbuf_safe(p->out, item);
    textbuf_lit(p->out, ",\"user\":");
    textbuf_safe(p->out, user);
    textbuf_append(p->out, ",\"", 2);
    const char *member = kindset_member(x->kinds);
    textbuf_append(p->out, member, strlen(member));
    textbuf_append(p->out, "\":", 2);
    kindset_append(p->out, x->kinds, row->set);
    textbuf_lit(p->out, "}\n");
    x->lines++;
    return p->out->failed ? 1 : 0;
}

static int list_text(page_t *p, span_t item, uint64_t at_ms, kindset_t set);

/* {"item":"…","reaction":"like","at":"…"} (reactions in many mode). */
static int list_line(void *arg, span_t item, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    page_t *p = arg;
    export_t *x = p->x;
    memcpy(x->after_item, item.ptr, item.len);
    x->after_item_len = item.len;
    x->after_seq = seq;
    p->visited++;
    if (set == KINDSET_EMPTY) /* the lists hold only pairs whose set is not empty */
        return 0;
    return list_text(p, item, at_ms, set);
}

static int list_text(page_t *p, span_t item, uint64_t at_ms, kindset_t set)
{
    export_t *x = p->x;
    x->lines++;
    char at[32];
    changejson_iso_time(at_ms, at);
    textbuf_lit(p->out, "{\"item\":");
    textbuf_safe(p->out, item);
    textbuf_append(p->out, ",\"", 2);
    const char *member = kindset_member(x->kinds);
    textbuf_append(p->out, member, strlen(member));
    textbuf_append(p->out, "\":", 2);
    kindset_append(p->out, x->kinds, set);
    textbuf_lit(p->out, ",\"at\":\"");
    textbuf_append(p->out, at, strlen(at));
    textbuf_lit(p->out, "\"}\n");
    return p->out->failed ? 1 : 0;
}

/* {"user":"…","voided":true}: one line per voided user, after the rows, from the same snapshot. */
static int voided_line(void *arg, span_t key, span_t value)
{
    (void)value;
    page_t *p = arg;
    size_t plen = sizeof STORE_VOID_PREFIX - 1;
    if (key.len <= plen)
        return 0;
    textbuf_lit(p->out, "{\"user\":");
    textbuf_safe(p->out, (span_t){key.ptr + plen, key.len - plen});
    textbuf_lit(p->out, ",\"voided\":true}\n");
    p->x->lines++;
    return p->out->failed ? 1 : 0;
}

static int rows_page(export_t *x, textbuf_t *out)
{
    page_t p = {.x = x, .out = out};
    size_t visited = 0;
    int rc = store_export_page(x->snap, (span_t){x->after_item, x->after_item_len},
                               (span_t){x->after_user, x->after_user_len}, EXPORT_PAGE_ROWS, row_line, &p, &visited);
    if (rc == STORE_OK && visited < EXPORT_PAGE_ROWS) {
        rc = store_read_aux(x->snap, SPAN_LIT(STORE_VOID_PREFIX), voided_line, &p);
        x->part = PART_CLOSING;
    }
    if (rc == STORE_OK && out->failed)
        rc = STORE_ERROR;
    return rc;
}

static int user_page(export_t *x, textbuf_t *out)
{
    page_t p = {.x = x, .out = out};
    store_list_query_t q = {.by_user = true,
                            .key = {x->user, x->user_len},
                            .kind = KIND_NONE,
                            .seq = x->after_seq,
                            .name = {x->after_item, x->after_item_len},
                            .has_cursor = x->has_cursor,
                            .limit = EXPORT_PAGE_ROWS};
    int rc = store_read_list(x->snap, &q, list_line, &p);
    x->has_cursor = true;
    if (rc == STORE_OK && out->failed)
        rc = STORE_ERROR;
    if (rc == STORE_OK && p.visited < EXPORT_PAGE_ROWS)
        x->part = PART_DONE;
    return rc;
}

static int buffer_row(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    merge_shard_t *m = arg;
    memcpy(m->after_item, item.ptr, item.len);
    m->after_item_len = item.len;
    memcpy(m->after_user, user.ptr, user.len);
    m->after_user_len = user.len;
    if (row->set == KINDSET_EMPTY)
        return 0;
    buffered_row_t *b = &m->rows[m->n++];
    memcpy(b->item, item.ptr, item.len);
    b->item_len = item.len;
    memcpy(b->user, user.ptr, user.len);
    b->user_len = user.len;
    b->set = row->set;
    return 0;
}

static int buffer_entry(void *arg, span_t item, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    merge_shard_t *m = arg;
    memcpy(m->after_item, item.ptr, item.len);
    m->after_item_len = item.len;
    m->after_seq = seq;
    m->visited++;
    /* the lists hold only pairs whose set is not empty; another shard's item (a user's list on the
     * user's shard gathers them) is that shard's to say */
    if (set == KINDSET_EMPTY || m->x->shard_of(m->x->shard_arg, item) != m->k)
        return 0;
    buffered_row_t *b = &m->rows[m->n++];
    memcpy(b->item, item.ptr, item.len);
    b->item_len = item.len;
    b->set = set;
    b->at_ms = at_ms;
    return 0;
}

/* The next rows (or list entries) of a shard whose buffer is used up (none when all are read). */
static int merge_fill(merge_shard_t *m)
{
    export_t *x = m->x;
    m->n = m->at = 0;
    while (m->n == 0 && !m->end) {
        size_t visited = 0;
        int rc;
        if (x->kind == EXPORT_USER) {
            store_list_query_t q = {.by_user = true,
                                    .key = {x->user, x->user_len},
                                    .kind = KIND_NONE,
                                    .seq = m->after_seq,
                                    .name = {m->after_item, m->after_item_len},
                                    .has_cursor = m->has_cursor,
                                    .limit = m->cap};
            m->visited = 0;
            rc = store_read_list(m->snap, &q, buffer_entry, m);
            m->has_cursor = true;
            visited = m->visited;
        } else {
            rc = store_export_page(m->snap, (span_t){m->after_item, m->after_item_len},
                                   (span_t){m->after_user, m->after_user_len}, m->cap, buffer_row, m, &visited);
        }
        if (rc != STORE_OK)
            return rc;
        m->end = visited < m->cap;
    }
    return STORE_OK;
}

static int span_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static bool row_before(export_kind_t kind, const buffered_row_t *a, const buffered_row_t *b)
{
    if (kind == EXPORT_USER)
        return a->at_ms > b->at_ms; /* newest first; each shard's own order kept */
    int c = span_cmp(a->item, a->item_len, b->item, b->item_len);
    return c ? c < 0 : span_cmp(a->user, a->user_len, b->user, b->user_len) < 0;
}

/* Up to a page of lines, the first of every shard's next first; then, the admin's, the voided users. */
static int merged_page(export_t *x, textbuf_t *out)
{
    page_t p = {.x = x, .out = out};
    for (size_t lines = 0; lines < EXPORT_PAGE_ROWS && !out->failed; lines++) {
        merge_shard_t *least = NULL;
        for (size_t k = 0; k < x->n; k++) {
            merge_shard_t *m = &x->merge[k];
            int rc = m->at == m->n ? merge_fill(m) : STORE_OK;
            if (rc != STORE_OK)
                return rc;
            if (m->at < m->n && (!least || row_before(x->kind, &m->rows[m->at], &least->rows[least->at])))
                least = m;
        }
        if (!least && x->kind == EXPORT_USER) {
            x->part = PART_DONE;
            return STORE_OK;
        }
        if (!least) {
            x->part = PART_CLOSING;
            return store_read_aux(x->merge[0].snap, SPAN_LIT(STORE_VOID_PREFIX), voided_line, &p);
        }
        const buffered_row_t *b = &least->rows[least->at++];
        if (x->kind == EXPORT_USER) {
            list_text(&p, (span_t){b->item, b->item_len}, b->at_ms, b->set);
            continue;
        }
        reaction_row_t row = {.set = b->set};
        row_line(&p, (span_t){b->item, b->item_len}, (span_t){b->user, b->user_len}, &row);
    }
    return out->failed ? STORE_ERROR : STORE_OK;
}

int export_next(export_t *x, textbuf_t *out)
{
    if (x->part == PART_DONE)
        return EXPORT_DONE;
    if (x->released || mono_ms() >= x->deadline_ms) {
        export_release(x);
        return EXPORT_CUT;
    }
    int rc = x->merge ? merged_page(x, out) : x->kind == EXPORT_USER ? user_page(x, out) : rows_page(x, out);
    if (rc != STORE_OK) {
        export_release(x);
        return rc < 0 ? rc : STORE_ERROR;
    }
    if (x->part == PART_CLOSING) {
        textbuf_printf(out, "{\"export\":\"complete\",\"lines\":%llu}\n", (unsigned long long)x->lines);
        x->part = PART_DONE;
    }
    if (x->part == PART_DONE) {
        export_release(x); /* nothing more to read: the snapshot goes at once */
        return out->failed ? STORE_ERROR : EXPORT_DONE;
    }
    return EXPORT_MORE;
}

void export_release(export_t *x)
{
    x->released = true;
    merge_free(x);
    if (x->snap) {
        store_read_end(x->snap);
        x->snap = NULL;
    }
}

uint64_t export_lines(const export_t *x)
{
    return x->lines;
}

void export_close(export_t *x)
{
    if (!x)
        return;
    export_release(x);
    free(x);
}
