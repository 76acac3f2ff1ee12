/* webhook_store.c — webhooks' auxiliary records: keys, JSON values, reading them back. */
#include "engine/webhook_store.h"

#include <jansson.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "webhook/"
#define PREFIX_LEN (sizeof PREFIX - 1)

static void key_of(char out[WHSTORE_KEY_MAX], const char *id, char record)
{
    snprintf(out, WHSTORE_KEY_MAX, PREFIX "%s/%c", id, record);
}

int whstore_random_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char buf[64];
    if (nbytes > sizeof buf || RAND_bytes(buf, (int)nbytes) != 1)
        return -1;
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[buf[i] >> 4];
        out[2 * i + 1] = hex[buf[i] & 0xf];
    }
    out[2 * nbytes] = '\0';
    return 0;
}

/* --- values --- */

static char *dump(json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return text;
}

static char *def_json(const whstore_def_t *d)
{
    return dump(json_pack("{s:s,s:s%,s:s%,s:I,s:I}", "url", d->url, "secret", d->secret, d->secret_len, "old_secret",
                          d->old_secret, d->old_secret_len, "old_until_ms", (json_int_t)d->old_until_ms, "created_ms",
                          (json_int_t)d->created_ms));
}

static char *state_json(const whstore_state_t *s)
{
    return dump(json_pack("{s:I,s:I,s:s,s:I,s:s,s:b,s:I}", "delivered", (json_int_t)s->delivered, "pending_to",
                          (json_int_t)s->pending_to, "delivery_id", s->delivery_id, "failing_since_ms",
                          (json_int_t)s->failing_since_ms, "last_error", s->last_error, "expired", s->expired, "epoch",
                          (json_int_t)s->epoch));
}

static char *resume_json(const whstore_resume_t *r)
{
    return dump(json_pack("{s:I,s:I}", "epoch", (json_int_t)r->epoch, "after", (json_int_t)r->after));
}

/* A string member into buf (cap bytes with the NUL); false when absent or too long. */
static bool get_string(json_t *o, const char *name, char *buf, size_t cap, size_t *len)
{
    json_t *v = json_object_get(o, name);
    size_t n = json_is_string(v) ? json_string_length(v) : cap;
    if (n >= cap)
        return false;
    memcpy(buf, json_string_value(v), n);
    buf[n] = '\0';
    if (len)
        *len = n;
    return true;
}

static uint64_t get_uint(json_t *o, const char *name)
{
    json_int_t v = json_integer_value(json_object_get(o, name));
    return v > 0 ? (uint64_t)v : 0;
}

static bool parse_def(json_t *o, whstore_def_t *d)
{
    d->old_until_ms = get_uint(o, "old_until_ms");
    d->created_ms = get_uint(o, "created_ms");
    return get_string(o, "url", d->url, sizeof d->url, NULL) &&
           get_string(o, "secret", d->secret, sizeof d->secret, &d->secret_len) &&
           get_string(o, "old_secret", d->old_secret, sizeof d->old_secret, &d->old_secret_len);
}

static bool parse_state(json_t *o, whstore_state_t *s)
{
    s->delivered = get_uint(o, "delivered");
    s->pending_to = get_uint(o, "pending_to");
    s->failing_since_ms = get_uint(o, "failing_since_ms");
    s->epoch = get_uint(o, "epoch");
    s->expired = json_is_true(json_object_get(o, "expired"));
    if (!get_string(o, "delivery_id", s->delivery_id, sizeof s->delivery_id, NULL))
        s->delivery_id[0] = '\0';
    if (!get_string(o, "last_error", s->last_error, sizeof s->last_error, NULL))
        s->last_error[0] = '\0';
    return true;
}

/* --- reading --- */

typedef struct {
    whstore_hook_t *hooks;
    size_t max, n;
    span_t only; /* one id, or empty for all */
} collect_t;

static int collect_one(void *arg, span_t key, span_t value)
{
    collect_t *c = arg;
    /* "webhook/<id>/<r>" */
    if (key.len < PREFIX_LEN + 3 || key.ptr[key.len - 2] != '/')
        return 0;
    span_t id = {key.ptr + PREFIX_LEN, key.len - PREFIX_LEN - 2};
    char record = key.ptr[key.len - 1];
    if (id.len == 0 || id.len > WHSTORE_ID_MAX || (c->only.len && !span_eq(id, c->only)))
        return 0;
    whstore_hook_t *h = c->n ? &c->hooks[c->n - 1] : NULL;
    if (!h || !span_eq(id, span_of(h->def.id))) { /* keys come in order: an id's records are adjacent */
        if (c->n == c->max)
            return 1;
        h = &c->hooks[c->n++];
        memset(h, 0, sizeof *h);
        memcpy(h->def.id, id.ptr, id.len);
        h->def.id[id.len] = '\0';
    }
    json_t *o = json_loadb(value.ptr, value.len, 0, NULL);
    if (json_is_object(o)) {
        if (record == 'd')
            h->has_def = parse_def(o, &h->def);
        else if (record == 's')
            h->has_state = parse_state(o, &h->state);
        else if (record == 'r') {
            h->resume.epoch = get_uint(o, "epoch");
            h->resume.after = get_uint(o, "after");
            h->has_resume = true;
        }
    }
    json_decref(o);
    return 0;
}

int whstore_read_all(store_read_t *r, whstore_hook_t *hooks, size_t max, size_t *n)
{
    collect_t c = {hooks, max, 0, {0}};
    int rc = store_read_aux(r, SPAN_LIT(PREFIX), collect_one, &c);
    *n = c.n;
    return rc;
}

int whstore_read_one(store_read_t *r, span_t id, whstore_hook_t *hook)
{
    char prefix[WHSTORE_KEY_MAX];
    if (id.len == 0 || id.len > WHSTORE_ID_MAX)
        return STORE_NOTFOUND;
    snprintf(prefix, sizeof prefix, PREFIX "%.*s/", (int)id.len, id.ptr);
    collect_t c = {hook, 1, 0, id};
    int rc = store_read_aux(r, span_of(prefix), collect_one, &c);
    if (rc == STORE_OK && (c.n == 0 || !hook->has_def))
        rc = STORE_NOTFOUND;
    return rc;
}

int whstore_log_window(store_read_t *r, uint64_t *oldest, uint64_t *newest)
{
    uint64_t first, last, checkpoint;
    int rc = store_read_log_bounds(r, &first, &last);
    if (rc == STORE_OK)
        rc = store_read_checkpoint(r, &checkpoint);
    if (rc != STORE_OK)
        return rc;
    *newest = last > checkpoint ? last : checkpoint; /* pruning never passes the checkpoint */
    *oldest = first ? first : *newest + 1;
    return STORE_OK;
}

/* --- writing --- */

static int add_put(whstore_write_t *w, const char *id, char record, char *value)
{
    if (!value)
        return -1;
    size_t i = w->aux.n++;
    key_of(w->keys[i], id, record);
    w->values[i] = value;
    w->aux.keys[i] = span_of(w->keys[i]);
    w->aux.values[i] = span_of(value);
    return 0;
}

int whstore_write_init(whstore_write_t *w, const char *id, const whstore_def_t *def, const whstore_resume_t *resume,
                       const whstore_state_t *state, bool erase)
{
    memset(w, 0, sizeof *w);
    w->cmd.type = WRITE_AUX;
    w->cmd.aux = &w->aux;
    if (erase) {
        snprintf(w->delete_from, sizeof w->delete_from, PREFIX "%s/", id);
        snprintf(w->delete_to, sizeof w->delete_to, PREFIX "%s0", id); /* '0' follows '/' */
        w->aux.delete_from = span_of(w->delete_from);
        w->aux.delete_to = span_of(w->delete_to);
    }
    int rc = 0;
    if (def)
        rc |= add_put(w, id, 'd', def_json(def));
    if (resume)
        rc |= add_put(w, id, 'r', resume_json(resume));
    if (state)
        rc |= add_put(w, id, 's', state_json(state));
    if (rc != 0)
        whstore_write_free(w);
    return rc;
}

void whstore_write_free(whstore_write_t *w)
{
    for (size_t i = 0; i < w->aux.n; i++)
        free(w->values[i]);
    w->aux.n = 0;
    answer_free(&w->cmd.answer);
}
