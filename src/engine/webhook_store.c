/* webhook_store.c — webhooks' auxiliary records: keys, JSON values, reading them back, and the
 * writes decided in the writer's transaction (the admin routes' and the delivery state's). */
#include "engine/webhook_store.h"

#include <jansson.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/changejson.h"
#include "core/jsontext.h"

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
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_REALS) : NULL;
    json_decref(v);
    return text;
}

/* The previous secrets as "previous" (newest first); the newest also as old_secret/old_until_ms,
 * the one previous secret a record of an older build held, so that such a node still reads it. */
static char *def_json(const whstore_def_t *d)
{
    json_t *prev = json_array();
    for (size_t i = 0; prev && i < d->nprev; i++)
        json_array_append_new(prev, json_pack("{s:s%,s:I}", "secret", d->prev[i].secret, d->prev[i].len, "until_ms",
                                              (json_int_t)d->prev[i].until_ms));
    const whstore_prev_t none = {{0}, 0, 0}, *p0 = d->nprev ? &d->prev[0] : &none;
    return prev ? dump(json_pack("{s:s,s:s%,s:s%,s:I,s:o,s:I}", "url", d->url, "secret", d->secret, d->secret_len,
                                 "old_secret", p0->secret, p0->len, "old_until_ms", (json_int_t)p0->until_ms,
                                 "previous", prev, "created_ms", (json_int_t)d->created_ms))
                : NULL;
}

bool whstore_pending(const whstore_state_t *s)
{
    for (uint32_t k = 0; k < s->count && k < SHARD_MAX; k++)
        if (s->pending_to[k] > s->delivered[k])
            return true;
    return false;
}

/* Shard 0's positions as a record of one shard has always held them; with several shards the
 * others' as "shards": [[delivered, pending_to], …] (shard 1 first). */
static char *state_json(const whstore_state_t *s)
{
    json_t *o = json_pack("{s:I,s:I,s:s,s:I,s:s,s:b,s:I}", "delivered", (json_int_t)s->delivered[0], "pending_to",
                          (json_int_t)s->pending_to[0], "delivery_id", s->delivery_id, "failing_since_ms",
                          (json_int_t)s->failing_since_ms, "last_error", s->last_error, "expired", s->expired, "epoch",
                          (json_int_t)s->epoch);
    if (o && s->count > 1) {
        json_t *more = json_array();
        for (uint32_t k = 1; more && k < s->count && k < SHARD_MAX; k++)
            if (json_array_append_new(
                    more, json_pack("[I,I]", (json_int_t)s->delivered[k], (json_int_t)s->pending_to[k])) != 0) {
                json_decref(more);
                more = NULL;
            }
        if (!more || json_object_set_new(o, "shards", more) != 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return dump(o);
}

/* {"epoch","after"} as a record of one shard has always held it (after: where to go on); with
 * several shards "shard" beside after, or no after (every shard where it stands). */
static char *resume_json(const whstore_resume_t *r, uint32_t count)
{
    if (count <= 1)
        return dump(json_pack("{s:I,s:I}", "epoch", (json_int_t)r->epoch, "after", (json_int_t)r->after));
    if (!r->has_after)
        return dump(json_pack("{s:I}", "epoch", (json_int_t)r->epoch));
    return dump(json_pack("{s:I,s:I,s:I}", "epoch", (json_int_t)r->epoch, "shard", (json_int_t)r->shard, "after",
                          (json_int_t)r->after));
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

static uint64_t get_uint_of(json_t *v)
{
    json_int_t n = json_integer_value(v);
    return n > 0 ? (uint64_t)n : 0;
}

static uint64_t get_uint(json_t *o, const char *name)
{
    return get_uint_of(json_object_get(o, name));
}

static bool parse_def(json_t *o, whstore_def_t *d)
{
    d->created_ms = get_uint(o, "created_ms");
    d->nprev = 0;
    json_t *prev = json_object_get(o, "previous"), *p;
    size_t i;
    if (json_is_array(prev)) {
        json_array_foreach(prev, i, p)
        {
            whstore_prev_t *q = &d->prev[d->nprev];
            if (d->nprev < WHSTORE_SECRETS_MAX - 1 && get_string(p, "secret", q->secret, sizeof q->secret, &q->len)) {
                q->until_ms = get_uint(p, "until_ms");
                d->nprev++;
            }
        }
    } else { /* a record of a build with one previous secret */
        whstore_prev_t *q = &d->prev[0];
        if (get_string(o, "old_secret", q->secret, sizeof q->secret, &q->len) && q->len) {
            q->until_ms = get_uint(o, "old_until_ms");
            d->nprev = 1;
        }
    }
    return get_string(o, "url", d->url, sizeof d->url, NULL) &&
           get_string(o, "secret", d->secret, sizeof d->secret, &d->secret_len);
}

static bool parse_state(json_t *o, whstore_state_t *s)
{
    s->count = 1;
    s->delivered[0] = get_uint(o, "delivered");
    s->pending_to[0] = get_uint(o, "pending_to");
    json_t *more = json_object_get(o, "shards"), *p;
    size_t i;
    json_array_foreach(more, i, p)
    {
        if (s->count == SHARD_MAX)
            break;
        s->delivered[s->count] = get_uint_of(json_array_get(p, 0));
        s->pending_to[s->count] = get_uint_of(json_array_get(p, 1));
        s->count++;
    }
    s->failing_since_ms = get_uint(o, "failing_since_ms");
    s->epoch = get_uint(o, "epoch");
    s->expired = json_is_true(json_object_get(o, "expired"));
    if (!get_string(o, "delivery_id", s->delivery_id, sizeof s->delivery_id, NULL))
        s->delivery_id[0] = '\0';
    if (!get_string(o, "last_error", s->last_error, sizeof s->last_error, NULL))
        s->last_error[0] = '\0';
    return true;
}

static void parse_resume(json_t *o, whstore_resume_t *r)
{
    r->epoch = get_uint(o, "epoch");
    r->has_after = json_object_get(o, "after") != NULL;
    r->after = get_uint(o, "after");
    r->shard = (uint32_t)get_uint(o, "shard");
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
            parse_resume(o, &h->resume);
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

static void writes_clear(whstore_write_t *w)
{
    for (size_t i = 0; i < w->aux.n; i++)
        free(w->values[i]);
    w->aux.n = 0;
    w->aux.delete_from = w->aux.delete_to = (span_t){0};
}

static void erase_all(whstore_write_t *w, const char *id)
{
    snprintf(w->delete_from, sizeof w->delete_from, PREFIX "%s/", id);
    snprintf(w->delete_to, sizeof w->delete_to, PREFIX "%s0", id); /* '0' follows '/' */
    w->aux.delete_from = span_of(w->delete_from);
    w->aux.delete_to = span_of(w->delete_to);
}

int whstore_write_init(whstore_write_t *w, const char *id, const whstore_def_t *def, const whstore_resume_t *resume,
                       const whstore_state_t *state, bool erase)
{
    memset(w, 0, sizeof *w);
    w->cmd.type = WRITE_AUX;
    w->cmd.aux = &w->aux;
    w->op = WHSTORE_PLAIN;
    if (erase)
        erase_all(w, id);
    int rc = 0;
    if (def)
        rc |= add_put(w, id, 'd', def_json(def));
    if (resume)
        rc |= add_put(w, id, 'r', resume_json(resume, state ? state->count : 1));
    if (state)
        rc |= add_put(w, id, 's', state_json(state));
    if (rc != 0)
        whstore_write_free(w);
    return rc;
}

/* --- decided writes: in the writer's transaction --- */

static int count_defs(void *arg, span_t key, span_t value)
{
    (void)value;
    if (key.len > PREFIX_LEN + 2 && key.ptr[key.len - 2] == '/' && key.ptr[key.len - 1] == 'd')
        ++*(size_t *)arg;
    return 0;
}

/* A refusal: the answer stands and nothing is written. */
static int refuse(write_cmd_t *cmd, int status, const char *code, const char *detail)
{
    answer_problem(&cmd->answer, status, code, detail);
    return STORE_OK;
}

static int decide_create(whstore_write_t *w, store_write_t *tx)
{
    size_t defs = 0;
    int rc = store_aux_read_locked(tx, SPAN_LIT(PREFIX), count_defs, &defs);
    if (rc != STORE_OK)
        return rc;
    if (defs >= WHSTORE_MAX)
        return refuse(&w->cmd, 400, "invalid-parameter", "at most 64 webhooks; delete one first");
    if (add_put(w, w->id, 'd', def_json(&w->def)) != 0 || add_put(w, w->id, 's', state_json(&w->state)) != 0)
        return refuse(&w->cmd, 503, "unavailable", "out of memory; retry");
    answer_json(&w->cmd.answer, 201,
                json_pack("{s:s,s:s,s:s%,s:o}", "id", w->id, "url", w->def.url, "secret", w->def.secret,
                          w->def.secret_len, "created", changejson_time_json(w->def.created_ms)));
    return STORE_OK;
}

/* From after on its shard (the others where they stand), or every shard where it stands: each
 * cursor judged by its shard's log window. */
static int decide_resume(whstore_write_t *w)
{
    const whstore_hook_t *h = &w->current;
    uint32_t count = w->count ? w->count : 1;
    whstore_resume_t resume = {.has_after = w->has_after, .shard = w->shard, .after = w->after};
    if (w->has_after && (w->shard >= count || w->after > w->newest[w->shard]))
        return refuse(&w->cmd, 400, "invalid-parameter", "after is not a cursor this server gave");
    for (uint32_t k = 0; k < count; k++) {
        if (w->has_after && k != w->shard)
            continue; /* moved only the shard named: the others are judged where they stand by delivery */
        uint64_t from = w->has_after ? w->after : k < h->state.count ? h->state.delivered[k] : 0;
        if (from + 1 < w->oldest[k])
            return refuse(&w->cmd, 410, "cursor-expired", "the log no longer holds the changes after that cursor");
    }
    if (count == 1 && !w->has_after) { /* a record of one shard has always named where it stands */
        resume.has_after = true;
        resume.after = h->state.delivered[0];
    }
    uint64_t epoch = h->resume.epoch > h->state.epoch ? h->resume.epoch : h->state.epoch;
    resume.epoch = epoch + 1;
    if (add_put(w, w->id, 'r', resume_json(&resume, count)) != 0)
        return refuse(&w->cmd, 503, "unavailable", "out of memory; retry");
    /* the answer's after: the entry cursor given (one shard: the position), else where it stands */
    char cursor[SHARD_TOKEN_MAX];
    int n = resume.has_after ? shard_cursor_format(count, resume.shard, resume.after, cursor, sizeof cursor)
                             : shard_token_format(h->state.delivered, count, cursor, sizeof cursor);
    if (n <= 0)
        return refuse(&w->cmd, 503, "unavailable", "out of memory; retry");
    answer_json(&w->cmd.answer, 200, json_pack("{s:s,s:s%}", "id", w->id, "after", cursor, (size_t)n));
    return STORE_OK;
}

/* The secret given in force; the one in force until w->until_ms, beside every earlier one whose
 * time is not over (each keeps the time its own rotation promised). More than WHSTORE_SECRETS_MAX
 * alive: 409, nothing changed. */
static int decide_rotate(whstore_write_t *w)
{
    const whstore_def_t *cur = &w->current.def;
    whstore_def_t def = *cur;
    def.nprev = 0;
    whstore_prev_t *first = &def.prev[def.nprev++];
    memcpy(first->secret, cur->secret, cur->secret_len + 1);
    first->len = cur->secret_len;
    first->until_ms = w->until_ms;
    uint64_t soonest = 0;
    size_t alive = 0;
    for (size_t i = 0; i < cur->nprev; i++) {
        if (cur->prev[i].until_ms <= w->now_ms)
            continue; /* its time is over */
        alive++;
        if (!soonest || cur->prev[i].until_ms < soonest)
            soonest = cur->prev[i].until_ms;
        if (def.nprev < WHSTORE_SECRETS_MAX - 1)
            def.prev[def.nprev++] = cur->prev[i];
    }
    if (alive + 2 > WHSTORE_SECRETS_MAX) {
        char detail[200], when[40];
        json_t *t = changejson_time_json(soonest);
        snprintf(when, sizeof when, "%s", json_is_string(t) ? json_string_value(t) : "later");
        json_decref(t);
        snprintf(detail, sizeof detail,
                 "at most %d secrets are alive at once (the secret in force and %d previous ones, each until its "
                 "previous_valid_until); rotate again after %s",
                 WHSTORE_SECRETS_MAX, WHSTORE_SECRETS_MAX - 1, when);
        return refuse(&w->cmd, 409, "too-many-secrets", detail);
    }
    memcpy(def.secret, w->def.secret, w->def.secret_len + 1);
    def.secret_len = w->def.secret_len;
    if (add_put(w, w->id, 'd', def_json(&def)) != 0)
        return refuse(&w->cmd, 503, "unavailable", "out of memory; retry");
    answer_json(&w->cmd.answer, 200,
                json_pack("{s:s,s:s%,s:o}", "id", w->id, "secret", def.secret, def.secret_len, "previous_valid_until",
                          changejson_time_json(first->until_ms)));
    return STORE_OK;
}

/* The WRITE_AUX decision of every op but WHSTORE_PLAIN (writer thread, in the transaction). */
static int decide(store_write_t *tx, write_cmd_t *cmd, write_aux_t *aux)
{
    (void)aux;
    whstore_write_t *w = (whstore_write_t *)cmd; /* cmd is its first member */
    writes_clear(w);
    if (w->op == WHSTORE_CREATE)
        return decide_create(w, tx);
    memset(&w->current, 0, sizeof w->current);
    collect_t c = {&w->current, 1, 0, span_of(w->id)};
    int rc = store_aux_read_locked(tx, SPAN_LIT(PREFIX), collect_one, &c);
    if (rc != STORE_OK)
        return rc;
    if (c.n == 0 || !w->current.has_def)
        return refuse(cmd, 404, "not-found", "no such webhook");
    switch (w->op) {
    case WHSTORE_DELETE:
        erase_all(w, w->id);
        answer_set_body(&cmd->answer, 204, ANSWER_JSON, NULL, 0);
        return STORE_OK;
    case WHSTORE_RESUME:
        return decide_resume(w);
    case WHSTORE_ROTATE:
        return decide_rotate(w);
    case WHSTORE_STATE:
        if (add_put(w, w->id, 's', state_json(&w->state)) != 0)
            return refuse(cmd, 503, "unavailable", "out of memory; retry");
        return STORE_OK;
    case WHSTORE_PLAIN:
    case WHSTORE_CREATE:
        break;
    }
    return STORE_ERROR;
}

void whstore_write_decided(whstore_write_t *w, whstore_op_t op, const char *id)
{
    memset(w, 0, sizeof *w);
    w->cmd.type = WRITE_AUX;
    w->cmd.aux = &w->aux;
    w->aux.decide = decide;
    w->op = op;
    snprintf(w->id, sizeof w->id, "%s", id);
}

void whstore_write_free(whstore_write_t *w)
{
    writes_clear(w);
    answer_free(&w->cmd.answer);
}
