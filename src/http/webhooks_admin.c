/* webhooks_admin.c — the webhook admin routes: create, list, delete, resume, rotate the secret.
 * A listing reads the records from a snapshot (on a reader thread when the store's reads wait on a
 * server, else on its HTTP thread). A change queues one WRITE_AUX command whose decision (the limit
 * of 64, the webhook still existing, the secret and resume epoch in force) is made by the writer in
 * its transaction against the store's current records (webhook_store.h), so concurrent changes (of
 * any node) never decide from the same stale view; it is answered once that commit is durable, with
 * the answer the decision gave. Nothing here waits. */
#include "http/webhooks_admin.h"
#include "http/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/parse.h"
#include "core/shardmap.h"
#include "engine/webhook_store.h"
#include "engine/webhooks.h"

#define MEDIA_JSON "application/json"

typedef enum { OP_CREATE, OP_LIST, OP_DELETE, OP_RESUME, OP_SECRET } op_t;

typedef struct {
    read_job_t job; /* first: run on a reader thread (app->readers) */
    app_t *app;
    op_t op;
    http_pending_t *pending;
    answer_t answer;
    whstore_write_t write;
    bool has_write;
    char id[WHSTORE_ID_MAX + 1];
    whstore_def_t def; /* create: the new definition; secret: a given new secret (def.secret) */
    bool has_after;
    uint32_t shard; /* resume: the shard after names */
    uint64_t after;
    whstore_hook_t *all; /* list */
} wh_req_t;

static void req_free(void *arg)
{
    wh_req_t *r = arg;
    answer_free(&r->answer);
    if (r->has_write)
        whstore_write_free(&r->write);
    free(r->all);
    free(r);
}

/* Writer thread: the records are durable, or the decision refused (its 4xx), or the commit failed
 * (the writer's 503): the command's answer is the request's. */
static void write_done(write_cmd_t *cmd)
{
    wh_req_t *r = cmd->done_arg;
    answer_free(&r->answer);
    r->answer = cmd->answer; /* taken over */
    cmd->answer = (answer_t){0};
    http_pending_respond(r->pending, &r->answer, req_free, r);
}

/* Queues r->write (prepared by the op) and answers when it is durable; answers 503 at once when the
 * writer will not take it. */
static void submit_write(wh_req_t *r)
{
    r->write.cmd.done = write_done;
    r->write.cmd.done_arg = r;
    if (!atomic_load(&r->app->draining) && writer_submit(r->app->writer, &r->write.cmd) == 0)
        return;
    answer_free(&r->answer);
    answer_problem(&r->answer, 503, "unavailable", "shutting down or too many writes queued; retry");
    r->answer.retry_after_s = 1;
    http_pending_respond(r->pending, &r->answer, req_free, r);
}

/* Each shard's log window: shard 0's from snap (where the records are read), the others' each from
 * a snapshot of its own. STORE_OK, or the first error (a shard that cannot be read). */
static int shard_windows(app_t *app, store_read_t *snap, uint64_t *oldest, uint64_t *newest)
{
    int rc = store_read_log_window(snap, &oldest[0], &newest[0]);
    for (size_t k = 1; rc == STORE_OK && k < app->nshards; k++) {
        store_read_t *r;
        if ((rc = store_read_begin(app->shard[k].store, &r)) != STORE_OK)
            break;
        rc = store_read_log_window(r, &oldest[k], &newest[k]);
        store_read_end(r);
    }
    return rc;
}

/* The age of h's oldest undelivered transition over every shard's log (shard 0's from snap). */
static int lag_over_shards(app_t *app, store_read_t *snap, const whstore_hook_t *h, uint64_t now, uint64_t *lag_ms)
{
    *lag_ms = 0;
    for (size_t k = 0; k < app->nshards; k++) {
        uint64_t lag = 0, delivered = k < h->state.count ? h->state.delivered[k] : 0;
        store_read_t *other;
        int rc = k == 0 ? webhooks_lag_ms(snap, delivered, now, &lag) : store_read_begin(app->shard[k].store, &other);
        if (k != 0 && rc == STORE_OK) {
            rc = webhooks_lag_ms(other, delivered, now, &lag);
            store_read_end(other);
        }
        if (rc != STORE_OK)
            return rc;
        if (lag > *lag_ms)
            *lag_ms = lag;
    }
    return STORE_OK;
}

static const char *state_name(const whstore_state_t *s)
{
    return s->expired ? "expired" : s->failing_since_ms ? "failing" : "active";
}

/* --- the ops, after the request was checked; each fills r->answer or prepares r->write --- */

static int op_create(wh_req_t *r, store_read_t *snap)
{
    whstore_write_decided(&r->write, WHSTORE_CREATE, r->def.id);
    r->has_write = true;
    whstore_write_t *w = &r->write;
    int rc = shard_windows(r->app, snap, w->oldest, w->newest);
    if (rc != STORE_OK)
        return rc;
    w->def = r->def;
    w->count = (uint32_t)r->app->nshards;
    w->state = (whstore_state_t){.count = w->count};
    for (uint32_t k = 0; k < w->count; k++)
        w->state.delivered[k] = w->newest[k]; /* delivery starts from the next transition of each shard */
    return STORE_OK;
}

/* The listing's delivered: with one shard the position (the cursor it has always been); with more,
 * the page token of every shard's position (usable as /v1/changes?after=) and each shard's entry
 * cursor (what a resume takes) as delivered_shards. */
static json_t *delivered_json(const whstore_state_t *s, uint32_t count, json_t **shards)
{
    char text[SHARD_TOKEN_MAX];
    int n = shard_token_format(s->delivered, count, text, sizeof text);
    *shards = NULL;
    if (count > 1) {
        *shards = json_array();
        for (uint32_t k = 0; *shards && k < count; k++) {
            char cursor[SHARD_CURSOR_MAX];
            int m = shard_cursor_format(count, k, s->delivered[k], cursor, sizeof cursor);
            json_array_append_new(*shards, m > 0 ? json_stringn(cursor, (size_t)m) : json_null());
        }
    }
    return n > 0 ? json_stringn(text, (size_t)n) : NULL;
}

static int op_list(wh_req_t *r, store_read_t *snap)
{
    size_t n = 0;
    int rc = whstore_read_all(snap, r->all, 2 * WHSTORE_MAX, &n);
    json_t *list = json_array();
    uint64_t now = wall_ms();
    uint32_t count = (uint32_t)r->app->nshards;
    for (size_t i = 0; rc == STORE_OK && list && i < n; i++) {
        const whstore_hook_t *h = &r->all[i];
        if (!h->has_def)
            continue;
        uint64_t lag_ms = 0;
        rc = lag_over_shards(r->app, snap, h, now, &lag_ms);
        json_t *shards, *delivered = delivered_json(&h->state, count, &shards);
        json_t *one = json_pack(
            "{s:s,s:s,s:o,s:o,s:f,s:o,s:o,s:s}", "id", h->def.id, "url", h->def.url, "created",
            changejson_time_json(h->def.created_ms), "delivered", delivered, "lag_s", (double)lag_ms / 1000.0,
            "failing_since", changejson_time_json(h->state.failing_since_ms), "last_error",
            h->state.last_error[0] ? json_string(h->state.last_error) : json_null(), "state", state_name(&h->state));
        if (one && shards)
            json_object_set_new(one, "delivered_shards", shards);
        else
            json_decref(shards);
        json_array_append_new(list, one);
    }
    if (rc != STORE_OK) {
        json_decref(list);
        return rc;
    }
    answer_json(&r->answer, 200, json_pack("{s:o}", "webhooks", list));
    return STORE_OK;
}

static int op_delete(wh_req_t *r, store_read_t *snap)
{
    (void)snap;
    whstore_write_decided(&r->write, WHSTORE_DELETE, r->id);
    r->has_write = true;
    return STORE_OK;
}

/* The log windows come from snapshots; the state and the epoch are the transaction's. */
static int op_resume(wh_req_t *r, store_read_t *snap)
{
    whstore_write_decided(&r->write, WHSTORE_RESUME, r->id); /* 404 first, then the cursor's checks */
    r->has_write = true;
    whstore_write_t *w = &r->write;
    int rc = shard_windows(r->app, snap, w->oldest, w->newest);
    if (rc != STORE_OK)
        return rc;
    w->count = (uint32_t)r->app->nshards;
    w->has_after = r->has_after;
    w->shard = r->shard;
    w->after = r->after;
    return STORE_OK;
}

static int op_secret(wh_req_t *r, store_read_t *snap)
{
    (void)snap;
    whstore_write_decided(&r->write, WHSTORE_ROTATE, r->id);
    r->has_write = true;
    r->write.def = r->def; /* the new secret */
    r->write.now_ms = wall_ms();
    r->write.until_ms =
        r->write.now_ms + __atomic_load_n(&webhooks_options(r->app->webhooks)->secret_overlap_ms, __ATOMIC_RELAXED);
    return STORE_OK;
}

/* Reads what the op needs, then answers or queues its write. Reader thread or HTTP thread. */
static void run(read_job_t *job)
{
    wh_req_t *r = (wh_req_t *)job;
    store_read_t *snap;
    if (store_read_begin(r->app->store, &snap) != STORE_OK) {
        answer_problem(&r->answer, 503, "unavailable", "the store cannot be read");
        r->answer.retry_after_s = 1;
        http_pending_respond(r->pending, &r->answer, req_free, r);
        return;
    }
    static int (*const ops[])(wh_req_t *, store_read_t *) = {
        [OP_CREATE] = op_create, [OP_LIST] = op_list,     [OP_DELETE] = op_delete,
        [OP_RESUME] = op_resume, [OP_SECRET] = op_secret,
    };
    int rc = ops[r->op](r, snap);
    store_read_end(snap);
    if (rc != STORE_OK) {
        answer_free(&r->answer);
        answer_problem(&r->answer, 503, "unavailable", "the webhooks could not be read");
        r->answer.retry_after_s = 1;
    }
    if (rc == STORE_OK && r->has_write && !r->answer.status)
        submit_write(r);
    else
        http_pending_respond(r->pending, &r->answer, req_free, r);
}

/* Defers req and runs r where reads may block (a reader thread) or here. */
static void dispatch(app_t *app, http_request_t *req, wh_req_t *r)
{
    r->app = app;
    r->job.run = run;
    if (!(r->pending = http_defer(req))) {
        req_free(r);
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    if (!app->readers) {
        run(&r->job);
        return;
    }
    if (readers_submit(app->readers, &r->job) == 0)
        return;
    http_pending_cancel(r->pending);
    req_free(r);
    reply_problem(req, 503, "overloaded", "too many reads are waiting; retry shortly");
}

/* The request's JSON object body ({} when empty); NULL having replied. */
static json_t *body_or_reply(http_request_t *req)
{
    span_t body = http_req_body(req), type;
    if (body.len > BODY_MAX_BYTES) {
        reply_problem(req, 413, "body-too-large", "request bodies are at most 4096 bytes");
        return NULL;
    }
    if (body.len && http_req_header(req, "content-type", &type) > 0) {
        size_t n = 0;
        while (n < type.len && type.ptr[n] != ';' && type.ptr[n] != ' ' && type.ptr[n] != '\t')
            n++;
        if (n != strlen(MEDIA_JSON) || strncasecmp(type.ptr, MEDIA_JSON, n) != 0) {
            reply_problem(req, 415, "unsupported-media-type", "request bodies are application/json");
            return NULL;
        }
    }
    json_error_t err;
    json_t *doc = body.len ? json_loadb(body.ptr, body.len, JSON_REJECT_DUPLICATES, &err) : json_object();
    if (!json_is_object(doc)) {
        reply_problem(req, 400, "invalid-json", doc ? "the body must be a JSON object" : err.text);
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* The secret member: given (at least 32 bytes) or generated. false having replied. */
static bool secret_or_reply(http_request_t *req, json_t *doc, whstore_def_t *def)
{
    json_t *s = json_object_get(doc, "secret");
    if (!s || json_is_null(s)) {
        if (whstore_random_hex(def->secret, WHSTORE_SECRET_GENERATED_BYTES) != 0) {
            reply_problem(req, 500, "internal", "no random bytes for a secret");
            return false;
        }
        def->secret_len = 2 * WHSTORE_SECRET_GENERATED_BYTES;
        return true;
    }
    size_t n = json_is_string(s) ? json_string_length(s) : 0;
    if (n < WHSTORE_SECRET_MIN || n > WHSTORE_SECRET_MAX || memchr(json_string_value(s), '\0', n)) {
        reply_problem(req, 400, "invalid-parameter", "secret must be a string of 32 to 512 bytes");
        return false;
    }
    memcpy(def->secret, json_string_value(s), n);
    def->secret[n] = '\0';
    def->secret_len = n;
    return true;
}

static wh_req_t *req_new(http_request_t *req, op_t op)
{
    wh_req_t *r = calloc(1, sizeof *r);
    if (r && (op == OP_CREATE || op == OP_LIST) && !(r->all = calloc(2 * WHSTORE_MAX, sizeof *r->all))) {
        free(r);
        r = NULL;
    }
    if (!r)
        reply_problem(req, 503, "overloaded", "out of memory");
    else
        r->op = op;
    return r;
}

void webhooks_admin_collection(app_t *app, http_request_t *req)
{
    if (!auth_admin_or_reply(app, req))
        return;
    bool create = span_eq_str(http_req_method(req), "POST");
    json_t *doc = NULL;
    if (create && !(doc = body_or_reply(req)))
        return;
    wh_req_t *r = req_new(req, create ? OP_CREATE : OP_LIST);
    if (!r) {
        json_decref(doc);
        return;
    }
    if (create) {
        json_t *url = json_object_get(doc, "url");
        char why[256];
        if (!json_is_string(url)) {
            reply_problem(req, 400, "invalid-parameter", "the body needs a url member (http:// or https://)");
            goto refused;
        }
        if (webhooks_check_url(app->webhooks, json_string_value(url), json_string_length(url), why, sizeof why) != 0) {
            reply_problem(req, 400, "invalid-parameter", why);
            goto refused;
        }
        if (!secret_or_reply(req, doc, &r->def))
            goto refused;
        memcpy(r->def.url, json_string_value(url), json_string_length(url) + 1);
        memcpy(r->def.id, "wh_", 3);
        if (whstore_random_hex(r->def.id + 3, WHSTORE_ID_HEX / 2) != 0) {
            reply_problem(req, 500, "internal", "no random bytes for an id");
            goto refused;
        }
        r->def.created_ms = wall_ms();
        json_decref(doc);
    }
    dispatch(app, req, r);
    return;
refused:
    json_decref(doc);
    req_free(r);
}

void webhooks_admin_one(app_t *app, http_request_t *req, span_t id, webhooks_admin_action_t action)
{
    if (!auth_admin_or_reply(app, req))
        return;
    json_t *doc = NULL;
    if (action != WEBHOOKS_ADMIN_DELETE && !(doc = body_or_reply(req)))
        return;
    op_t op = action == WEBHOOKS_ADMIN_DELETE ? OP_DELETE : action == WEBHOOKS_ADMIN_RESUME ? OP_RESUME : OP_SECRET;
    wh_req_t *r = req_new(req, op);
    if (!r) {
        json_decref(doc);
        return;
    }
    if (id.len == 0 || id.len > WHSTORE_ID_MAX) {
        reply_problem(req, 404, "not-found", "no such webhook");
        goto refused;
    }
    memcpy(r->id, id.ptr, id.len);
    if (op == OP_RESUME) {
        json_t *after = json_object_get(doc, "after");
        r->has_after = after && !json_is_null(after);
        /* an entry's cursor: with one shard its digits, as ever; with more "S.P", moving that shard only */
        if (r->has_after &&
            (!json_is_string(after) || shard_cursor_parse((span_t){json_string_value(after), json_string_length(after)},
                                                          (uint32_t)app->nshards, &r->shard, &r->after) != 0)) {
            reply_problem(req, 400, "invalid-parameter",
                          app->nshards == 1 ? "after must be a cursor (a string of digits)"
                                            : "after must be an entry's cursor (\"S.P\": a shard and its position)");
            goto refused;
        }
    }
    if (op == OP_SECRET && !secret_or_reply(req, doc, &r->def))
        goto refused;
    json_decref(doc);
    dispatch(app, req, r);
    return;
refused:
    json_decref(doc);
    req_free(r);
}
