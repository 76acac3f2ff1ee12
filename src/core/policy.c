/* policy.c — item policies: parsing, rendering, the check of a write, and resolution. */
#include "core/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kindsjson.h"

static bool target_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '~' || c == '-';
}

int policy_target_parse(span_t target, policy_target_t *type)
{
    if (span_eq_str(target, "*")) {
        *type = POLICY_TARGET_ALL;
        return 0;
    }
    if (target.len >= 2 && target.ptr[target.len - 1] == '*') {
        if (target.len - 1 > ID_MAX_LEN)
            return -1;
        for (size_t i = 0; i + 1 < target.len; i++)
            if (!target_char_ok((unsigned char)target.ptr[i]))
                return -1;
        *type = POLICY_TARGET_PREFIX;
        return 0;
    }
    if (!id_valid(target))
        return -1;
    *type = POLICY_TARGET_ITEM;
    return 0;
}

int policy_from_json(const kinds_t *kinds, const json_t *body, policy_t *out, char *err, size_t errlen)
{
    *out = (policy_t){.kinds = KINDSET_ALL(kinds->count)};
    if (!json_is_object(body)) {
        snprintf(err, errlen, "the body must be a JSON object");
        return -1;
    }
    const char *name;
    json_t *value;
    json_object_foreach((json_t *)body, name, value)
    {
        if (strcmp(name, "kinds") == 0) {
            kindset_t set;
            if (!json_is_array(value) || json_array_size(value) == 0) {
                snprintf(err, errlen, "kinds must be a non-empty array of configured kinds");
                return -1;
            }
            if (kindset_from_json(kinds, value, &set, err, errlen) != 0)
                return -1;
            out->kinds = set;
            out->kinds_given = true;
        } else if (strcmp(name, "closed") == 0) {
            if (!json_is_boolean(value)) {
                snprintf(err, errlen, "closed must be true or false");
                return -1;
            }
            out->closed = json_is_true(value);
        } else if (strcmp(name, "counts") == 0) {
            const char *s = json_string_value(value);
            if (!s || (strcmp(s, "public") != 0 && strcmp(s, "hidden") != 0)) {
                snprintf(err, errlen, "counts must be \"public\" or \"hidden\"");
                return -1;
            }
            out->hidden = strcmp(s, "hidden") == 0;
        } else if (strcmp(name, "max_kinds") == 0) {
            json_int_t n = json_is_integer(value) ? json_integer_value(value) : 0;
            if (n < 1 || n > POLICY_MAX_KINDS_MAX) {
                snprintf(err, errlen, "max_kinds must be an integer from 1 to %d", POLICY_MAX_KINDS_MAX);
                return -1;
            }
            out->max_kinds = (uint8_t)n;
        } else {
            snprintf(err, errlen, "unknown member %.64s: a policy has kinds, closed, counts and max_kinds", name);
            return -1;
        }
    }
    return 0;
}

json_t *policy_json(const kinds_t *kinds, const policy_t *p, bool stored)
{
    json_t *obj = json_object();
    if (!obj)
        return NULL;
    int rc = 0;
    kinds_t as_set = *kinds; /* the kinds as an array, whatever the mode */
    as_set.mode = REACTION_MODE_MANY;
    if (!stored || p->kinds_given)
        rc |= json_object_set_new(obj, "kinds", kindset_json(&as_set, policy_allowed(kinds, p)));
    rc |= json_object_set_new(obj, "closed", json_boolean(p->closed));
    rc |= json_object_set_new(obj, "counts", json_string(p->hidden ? "hidden" : "public"));
    if (p->max_kinds)
        rc |= json_object_set_new(obj, "max_kinds", json_integer(p->max_kinds));
    if (rc != 0) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

void policy_append(textbuf_t *b, const kinds_t *kinds, const policy_t *p)
{
    textbuf_lit(b, "{\"kinds\":[");
    kindset_t allowed = policy_allowed(kinds, p);
    bool first = true;
    for (int k = 1; k <= kinds->count; k++) {
        if (!kindset_has(allowed, k))
            continue;
        if (!first)
            textbuf_lit(b, ",");
        first = false;
        textbuf_safe(b, span_of(kinds_name(kinds, k)));
    }
    textbuf_lit(b, "],\"closed\":");
    if (p->closed)
        textbuf_lit(b, "true");
    else
        textbuf_lit(b, "false");
    if (p->hidden)
        textbuf_lit(b, ",\"counts\":\"hidden\"");
    else
        textbuf_lit(b, ",\"counts\":\"public\"");
    if (p->max_kinds) {
        textbuf_lit(b, ",\"max_kinds\":");
        textbuf_int(b, p->max_kinds);
    }
    textbuf_lit(b, "}");
}

policy_verdict_t policy_check(const kinds_t *kinds, const policy_t *p, kindset_t from, kindset_t to)
{
    if (!p)
        return POLICY_OK;
    if (p->closed)
        return POLICY_CLOSED;
    kindset_t added = to & ~from;
    if (added & ~policy_allowed(kinds, p))
        return POLICY_NOT_ALLOWED;
    if (added && p->max_kinds && kindset_size(to) > p->max_kinds)
        return POLICY_TOO_MANY;
    return POLICY_OK;
}

const char *policy_verdict_code(policy_verdict_t v)
{
    switch (v) {
    case POLICY_OK:
        return "ok";
    case POLICY_CLOSED:
        return "item-closed";
    case POLICY_NOT_ALLOWED:
        return "reaction-not-allowed";
    case POLICY_TOO_MANY:
        return "too-many-reactions";
    }
    return "ok";
}

/* --- the table --- */

static int span_cmp(span_t a, span_t b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = memcmp(a.ptr, b.ptr, n);
    return c ? c : (a.len > b.len) - (a.len < b.len);
}

static int entry_cmp(const void *a, const void *b)
{
    const policy_entry_t *x = a, *y = b;
    return span_cmp((span_t){x->target, x->target_len}, (span_t){y->target, y->target_len});
}

/* A prefix entry's prefix: its target without the `*`. */
static span_t prefix_of(const policy_entry_t *e)
{
    return (span_t){e->target, e->target_len - 1};
}

static int prefix_ptr_cmp(const void *a, const void *b)
{
    return span_cmp(prefix_of(*(const policy_entry_t *const *)a), prefix_of(*(const policy_entry_t *const *)b));
}

/* Whether n elements of size bytes are already in cmp's order: a table rebuilt after one change
 * comes in order, and sorting it again would cost more than the change. */
static bool in_order(const void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    const char *p = base;
    for (size_t i = 1; i < n; i++)
        if (cmp(p + (i - 1) * size, p + i * size) > 0)
            return false;
    return true;
}

int policy_table_build(policy_table_t *t, policy_entry_t *entries, size_t n)
{
    *t = (policy_table_t){0};
    t->entries = entries;
    t->n = n;
    if (n == 0)
        return 0;
    if (!in_order(entries, n, sizeof *entries, entry_cmp))
        qsort(entries, n, sizeof *entries, entry_cmp);
    t->items = malloc(n * sizeof *t->items);
    t->prefixes = malloc(n * sizeof *t->prefixes);
    if (!t->items || !t->prefixes) {
        policy_table_free(t);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const policy_entry_t *e = &entries[i];
        policy_target_t type;
        if (policy_target_parse((span_t){e->target, e->target_len}, &type) != 0)
            continue; /* the caller checked; never trusted blindly */
        if (type == POLICY_TARGET_ALL) {
            t->all = e;
        } else if (type == POLICY_TARGET_ITEM) {
            t->items[t->nitems++] = e; /* in target order already */
        } else {
            size_t len = e->target_len - 1;
            t->prefix_lens[len / 64] |= 1ull << (len % 64);
            t->prefixes[t->nprefixes++] = e;
        }
    }
    if (!in_order(t->prefixes, t->nprefixes, sizeof *t->prefixes, prefix_ptr_cmp))
        qsort(t->prefixes, t->nprefixes, sizeof *t->prefixes, prefix_ptr_cmp);
    return 0;
}

void policy_table_free(policy_table_t *t)
{
    free(t->entries);
    free(t->items);
    free(t->prefixes);
    *t = (policy_table_t){0};
}

/* The entry of arr[0..n) whose key (by item target or by prefix) equals key, or NULL. */
static const policy_entry_t *search(const policy_entry_t *const *arr, size_t n, span_t key, bool prefix)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const policy_entry_t *e = arr[mid];
        int c = span_cmp(prefix ? prefix_of(e) : (span_t){e->target, e->target_len}, key);
        if (c == 0)
            return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const policy_t *policy_resolve(const policy_table_t *t, span_t item)
{
    if (t->n == 0)
        return NULL;
    const policy_entry_t *e = search(t->items, t->nitems, item, false);
    if (e)
        return &e->policy;
    for (size_t len = item.len < ID_MAX_LEN ? item.len : ID_MAX_LEN; t->nprefixes && len >= 1; len--) {
        if (!(t->prefix_lens[len / 64] >> (len % 64) & 1))
            continue;
        if ((e = search(t->prefixes, t->nprefixes, (span_t){item.ptr, len}, true)))
            return &e->policy;
    }
    return t->all ? &t->all->policy : NULL;
}

const policy_entry_t *policy_table_find(const policy_table_t *t, span_t target)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = span_cmp((span_t){t->entries[mid].target, t->entries[mid].target_len}, target);
        if (c == 0)
            return &t->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
