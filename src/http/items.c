/* items.c — the item routes: counts and reactions read from a snapshot, writes handed to the
 * writer thread. Every handler has the same shape: identify, validate (replying on the first
 * error), then act. */
#include <stdlib.h>

#include "core/clock.h"
#include "core/etag.h"
#include "core/fingerprint.h"
#include "core/ids.h"
#include "core/itemjson.h"
#include "core/jsontext.h"
#include "core/kindsjson.h"
#include "core/log.h"
#include "core/parse.h"
#include "engine/claims.h"
#include "engine/readers.h"
#include "http/auth.h"
#include "http/items.h"

#define HEADER_IDEMPOTENCY_KEY "idempotency-key"
#define HEADER_IF_MATCH "if-match"
#define HEADER_IF_NONE_MATCH "if-none-match"
/* An If-None-Match longer than this is ignored (answered in full): a client revalidates one tag, a
 * cache a few. */
#define IF_NONE_MATCH_MAX 512
#define HEADER_CONTENT_TYPE "content-type"
#define MEDIA_JSON "application/json"

static const char ID_RULE[] = "ids are 1-128 bytes of A-Z a-z 0-9 . _ : ~ - (and not . or ..)";

static bool item_or_reply(http_request_t *req, span_t item)
{
    if (id_valid(item))
        return true;
    reply_problem(req, 400, "invalid-item-id", ID_RULE);
    return false;
}

/* --- reads --- */

/* A read, copied out of its request so that it can run on a reader thread (app->readers, when
 * the store's reads wait on a server) as well as on the HTTP thread. */
typedef struct {
    read_job_t job; /* first: a read_job_t * is an item_read_t * */
    app_t *app;
    http_pending_t *pending;
    bool many;     /* GET /v1/items?ids=: {"items":[…]} */
    bool reaction; /* GET /v1/items/{item}/reaction */
    bool viewer;   /* GET /v1/viewer?ids=: {"items":[…the user's part of each…]} */
    size_t n;
    char ids[BATCH_IDS_MAX][ID_MAX_LEN];
    size_t id_lens[BATCH_IDS_MAX];
    bool known; /* a user is known: item objects carry viewer */
    bool admin; /* hidden counts are shown */
    char user[ID_MAX_LEN];
    size_t user_len;
    unsigned max_age_s; /* of a public answer, as configured when the request came */
    bool has_inm;       /* If-None-Match, given once and short enough */
    char inm[IF_NONE_MATCH_MAX];
    size_t inm_len;
    answer_t answer;
} item_read_t;

static void read_problem(item_read_t *rd, int status, const char *code, const char *detail)
{
    answer_problem(&rd->answer, status, code, detail);
    if (status == 503)
        rd->answer.retry_after_s = 1;
}

/* {"item":…,"reaction":…,"version":…} with its ETag, from the row read. */
static void reaction_answer(item_read_t *rd, span_t item, const reaction_row_t *row)
{
    json_t *obj = json_pack("{s:s%,s:o?,s:I}", "item", item.ptr, item.len, kindset_member(rd->app->kinds),
                            kindset_json(rd->app->kinds, row->set), "version", (json_int_t)row->version);
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_REALS) : NULL;
    json_decref(obj);
    if (!text) {
        read_problem(rd, 500, "internal", "out of memory");
        return;
    }
    answer_set_body(&rd->answer, 200, ANSWER_JSON, text, strlen(text));
    rd->answer.has_etag = true;
    rd->answer.etag_version = row->version;
    rd->answer.cache = ANSWER_CACHE_PRIVATE; /* the user's own row: never stored by a shared cache */
}

/* Every read answer carries a weak ETag, a function of the body alone: the same on every node,
 * changed by any change of what it shows; If-None-Match with it is answered 304. A public read (no
 * user) may be kept by any cache for max-age; one that shows the viewer's own state is for that
 * user alone: private, never stored. */
static void cache_headers(item_read_t *rd)
{
    answer_t *a = &rd->answer;
    if (rd->known)
        a->cache = ANSWER_CACHE_PRIVATE;
    if (etag_weak(a->body, a->body_len, a->weak_etag) == 0)
        return; /* no digest: answered without a validator, and not marked cacheable */
    if (!rd->known) {
        a->cache = ANSWER_CACHE_PUBLIC;
        a->max_age_s = rd->max_age_s;
    }
    if (rd->has_inm && etag_none_match((span_t){rd->inm, rd->inm_len}, span_of(a->weak_etag))) {
        free(a->body);
        a->body = NULL;
        a->body_len = 0;
        a->status = 304;
    }
}

/* Reads the items (and the user's rows), each shard's from one snapshot of that shard (one snapshot
 * in all with one shard), into counts and rows at the items' own positions. Returns STORE_OK or the
 * first error; with unavailable given, a shard that cannot be reached marks its items there instead
 * (and STORE_UNAVAILABLE is returned only when that is every item). */
static int read_by_shard(app_t *app, const span_t *items, size_t n, span_t user, int64_t (*counts)[KINDS_MAX + 1],
                         reaction_row_t *rows, bool *unavailable)
{
    size_t missing = 0;
    size_t left = n;
    bool done[BATCH_IDS_MAX] = {false};
    while (left) {
        size_t first = 0;
        while (done[first])
            first++;
        app_shard_t *shard = app_item_shard(app, items[first]);
        span_t some[BATCH_IDS_MAX];
        size_t at[BATCH_IDS_MAX], m = 0;
        for (size_t i = first; i < n; i++)
            if (!done[i] && app_item_shard(app, items[i]) == shard) {
                some[m] = items[i];
                at[m++] = i;
                done[i] = true;
            }
        left -= m;
        int64_t some_counts[BATCH_IDS_MAX][KINDS_MAX + 1];
        reaction_row_t some_rows[BATCH_IDS_MAX];
        store_read_t *snap;
        int rc = store_read_begin_single(shard->store, &snap);
        if (rc == STORE_OK) {
            rc = store_read_many(snap, some, m, user, some_counts, some_rows);
            store_read_end(snap);
        }
        if ((rc == STORE_UNAVAILABLE || rc == STORE_RETRY) && unavailable) {
            for (size_t j = 0; j < m; j++)
                unavailable[at[j]] = true;
            missing += m;
            continue;
        }
        if (rc != STORE_OK)
            return rc;
        for (size_t j = 0; j < m; j++) {
            memcpy(counts[at[j]], some_counts[j], sizeof some_counts[j]);
            rows[at[j]] = some_rows[j];
        }
    }
    return missing == n ? STORE_UNAVAILABLE : STORE_OK;
}

/* Reads the items (and the user's rows) and fills rd->answer. */
static void item_read_answer(item_read_t *rd)
{
    span_t items[BATCH_IDS_MAX], user = {rd->user, rd->known ? rd->user_len : 0};
    int64_t counts[BATCH_IDS_MAX][KINDS_MAX + 1];
    reaction_row_t rows[BATCH_IDS_MAX];
    for (size_t i = 0; i < rd->n; i++)
        items[i] = (span_t){rd->ids[i], rd->id_lens[i]};
    /* a batch shows a shard that cannot be reached on its items; one item read is 503 */
    bool unavailable[BATCH_IDS_MAX] = {false};
    int rc = read_by_shard(rd->app, items, rd->n, user, counts, rows, rd->many ? unavailable : NULL);
    if (rc != STORE_OK) {
        if (rc == STORE_UNAVAILABLE || rc == STORE_RETRY)
            read_problem(rd, 503, "unavailable", "the store cannot be read");
        else
            read_problem(rd, 500, "internal", "reading the items failed");
        return;
    }
    if (rd->reaction) {
        reaction_answer(rd, items[0], &rows[0]);
        return;
    }
    /* A voided viewer's reactions no longer count, but the counts they are shown include them: their
     * own view does not change. By the item's shard's flag, which its counts follow (a void reaches
     * the shards one after the other). */
    for (size_t i = 0; rd->known && !rd->viewer && i < rd->n; i++)
        if (voids_has(app_item_shard(rd->app, items[i])->voids, user))
            reaction_deltas_add(KINDSET_EMPTY, rows[i].set, counts[i]);
    textbuf_t out = {0};
    bool partial = false;
    if (rd->many)
        textbuf_lit(&out, "{\"items\":[");
    for (size_t i = 0; i < rd->n; i++) {
        if (i)
            textbuf_lit(&out, ",");
        if (unavailable[i]) {
            itemjson_unavailable_append(&out, items[i]);
            partial = true;
            continue;
        }
        if (rd->viewer) {
            itemjson_viewer_append(&out, rd->app->kinds, items[i], &rows[i]);
            continue;
        }
        policy_t p;
        bool has = policies_lookup(rd->app->policies, items[i], &p);
        itemjson_append_policy(&out, rd->app->kinds, items[i], counts[i], rd->known ? &rows[i] : NULL, has ? &p : NULL,
                               rd->admin);
    }
    if (rd->many)
        textbuf_lit(&out, "]}");
    if (out.failed) {
        free(out.buf);
        read_problem(rd, 500, "internal", "out of memory");
        return;
    }
    answer_set_body(&rd->answer, 200, ANSWER_JSON, out.buf, out.len);
    if (partial)
        rd->answer.cache = ANSWER_CACHE_PRIVATE; /* not kept by any cache, nor revalidated */
    else
        cache_headers(rd);
}

static void read_release(void *arg)
{
    item_read_t *rd = arg;
    answer_free(&rd->answer);
    free(rd);
}

static void read_job_run(read_job_t *job)
{
    item_read_t *rd = (item_read_t *)job;
    item_read_answer(rd);
    http_pending_respond(rd->pending, &rd->answer, read_release, rd);
}

/* Runs the read here, or hands it to a reader thread and answers when it is done. */
static void read_and_reply(app_t *app, http_request_t *req, item_read_t *rd)
{
    if (!app->readers) {
        item_read_answer(rd);
        http_respond(req, &rd->answer);
        read_release(rd);
        return;
    }
    app_read_submit(app, req, &rd->job, read_job_run, &rd->pending, rd);
}

/* A read of ids (a list when many, else one item) for who, or NULL having answered. */
static item_read_t *item_read_new(app_t *app, http_request_t *req, span_t ids, bool many, const auth_t *who)
{
    item_read_t *rd = calloc(1, sizeof *rd);
    if (!rd) {
        reply_problem(req, 500, "internal", "out of memory");
        return NULL;
    }
    rd->app = app;
    rd->many = many;
    span_t id = ids;
    for (size_t pos = 0; rd->n < BATCH_IDS_MAX && (many ? parse_list_next(ids, &pos, &id) : rd->n == 0);) {
        memcpy(rd->ids[rd->n], id.ptr, id.len);
        rd->id_lens[rd->n++] = id.len;
    }
    rd->known = who->known;
    rd->admin = who->admin;
    if (who->known) {
        memcpy(rd->user, who->user.ptr, who->user.len);
        rd->user_len = who->user.len;
    }
    rd->max_age_s = atomic_load_explicit(&app->public_max_age_s, memory_order_relaxed);
    /* If-None-Match on several lines is one list (RFC 9110 §5.3): joined with commas; over the
     * bound it is ignored (a full answer is always right). */
    span_t inm[8];
    size_t nlines = http_req_header_all(req, HEADER_IF_NONE_MATCH, inm, sizeof inm / sizeof inm[0]);
    if (nlines >= 1 && nlines <= sizeof inm / sizeof inm[0]) {
        size_t len = 0;
        bool fits = true;
        for (size_t i = 0; i < nlines && fits; i++) {
            fits = len + (i ? 1 : 0) + inm[i].len <= sizeof rd->inm;
            if (fits) {
                if (i)
                    rd->inm[len++] = ',';
                memcpy(rd->inm + len, inm[i].ptr, inm[i].len);
                len += inm[i].len;
            }
        }
        rd->inm_len = len;
        rd->has_inm = fits;
    }
    return rd;
}

void items_get_one(app_t *app, http_request_t *req, span_t item)
{
    auth_t who;
    if (!auth_user_or_reply(app, req, false, &who) || !read_rate_or_reply(app, req, &who) || !item_or_reply(req, item))
        return;
    item_read_t *rd = item_read_new(app, req, item, false, &who);
    if (rd)
        read_and_reply(app, req, rd);
}

bool items_ids_or_reply(http_request_t *req, span_t query, span_t *ids)
{
    span_t id;
    if (!parse_query_param(query, "ids", ids)) {
        reply_problem(req, 400, "invalid-parameter", "ids is required: ?ids=a,b,c");
        return false;
    }
    size_t count = 0, pos = 0;
    while (parse_list_next(*ids, &pos, &id)) {
        if (++count > BATCH_IDS_MAX) {
            reply_problem(req, 400, "too-many-ids", "at most 100 ids per request");
            return false;
        }
        if (!item_or_reply(req, id))
            return false;
    }
    return true;
}

void items_get_many(app_t *app, http_request_t *req, span_t query)
{
    auth_t who;
    span_t ids;
    if (!auth_user_or_reply(app, req, false, &who) || !read_rate_or_reply(app, req, &who))
        return;
    if (!items_ids_or_reply(req, query, &ids))
        return;
    item_read_t *rd = item_read_new(app, req, ids, true, &who);
    if (rd)
        read_and_reply(app, req, rd);
}

void items_get_viewer(app_t *app, http_request_t *req, span_t query)
{
    auth_t who;
    span_t ids;
    if (!auth_user_or_reply(app, req, true, &who) || !items_ids_or_reply(req, query, &ids))
        return;
    item_read_t *rd = item_read_new(app, req, ids, true, &who);
    if (!rd)
        return;
    rd->viewer = true;
    read_and_reply(app, req, rd);
}

void items_get_reaction(app_t *app, http_request_t *req, span_t item)
{
    auth_t who;
    if (!auth_user_or_reply(app, req, true, &who) || !item_or_reply(req, item))
        return;
    item_read_t *rd = item_read_new(app, req, item, false, &who);
    if (!rd)
        return;
    rd->reaction = true;
    read_and_reply(app, req, rd);
}

/* --- writes --- */

/* The body, within the size limit and of a JSON media type (none given is taken as JSON). */
static bool body_or_reply(http_request_t *req, span_t *body)
{
    *body = http_req_body(req);
    if (body->len > BODY_MAX_BYTES) {
        reply_problem(req, 413, "body-too-large", "request bodies are at most 4096 bytes");
        return false;
    }
    span_t type;
    if (body->len == 0 || http_req_header(req, HEADER_CONTENT_TYPE, &type) == 0)
        return true;
    size_t n = 0;
    while (n < type.len && type.ptr[n] != ';' && type.ptr[n] != ' ' && type.ptr[n] != '\t')
        n++;
    if (n == strlen(MEDIA_JSON) && strncasecmp(type.ptr, MEDIA_JSON, n) == 0)
        return true;
    reply_problem(req, 415, "unsupported-media-type", "request bodies are application/json");
    return false;
}

/* {"reaction":"<kind>"} → that kind as a set (none, the empty set, only when allow_sets); with
 * allow_sets in many mode also {"reactions":[…]}, the whole set. */
static bool body_reaction_or_reply(const app_t *app, http_request_t *req, span_t body, bool allow_sets, kindset_t *set)
{
    json_error_t err;
    json_t *doc = json_loadb(body.ptr, body.len, JSON_REJECT_DUPLICATES, &err);
    if (!doc || !json_is_object(doc)) {
        json_decref(doc);
        reply_problem(req, 400, "invalid-json", doc ? "the body must be a JSON object" : err.text);
        return false;
    }
    bool many = app->kinds->mode == REACTION_MODE_MANY;
    json_t *reaction = json_object_get(doc, "reaction"), *reactions = json_object_get(doc, "reactions");
    char detail[128] = "";
    if (reactions && !(allow_sets && many)) {
        snprintf(detail, sizeof detail,
                 many ? "this write takes one reaction" : "a set of reactions needs --reaction-mode many");
    } else if (reactions && reaction) {
        snprintf(detail, sizeof detail, "give either reaction or reactions, not both");
    } else if (reactions) {
        kindset_from_json(app->kinds, reactions, set, detail, sizeof detail);
    } else {
        int k = json_is_string(reaction)
                    ? kinds_find(app->kinds, (span_t){json_string_value(reaction), json_string_length(reaction)},
                                 allow_sets)
                    : -1;
        *set = k < 0 ? KINDSET_EMPTY : kindset_of(k);
        if (k < 0)
            snprintf(detail, sizeof detail, "%s",
                     reaction ? "reaction must be one of the configured kinds" : "the body needs a reaction member");
    }
    json_decref(doc);
    if (detail[0]) {
        reply_problem(req, 400, "invalid-reaction", detail);
        return false;
    }
    return true;
}

/* The headers every write may carry: Idempotency-Key and If-Match. */
static bool write_headers_or_reply(http_request_t *req, write_cmd_t *cmd, bool key_required)
{
    span_t value;
    size_t n = http_req_header(req, HEADER_IDEMPOTENCY_KEY, &value);
    if (n == 0 && key_required) {
        reply_problem(req, 400, "idempotency-key-required", "this write needs an Idempotency-Key header");
        return false;
    }
    if (n > 0) {
        int len = n == 1 ? parse_idempotency_key(value, cmd->react.key) : -1;
        if (len < 0) {
            reply_problem(req, 400, "invalid-idempotency-key",
                          "an Idempotency-Key is 1-255 printable ASCII characters, given once");
            return false;
        }
        cmd->react.key_len = (size_t)len;
    }
    n = http_req_header(req, HEADER_IF_MATCH, &value);
    if (n > 0) {
        if (n > 1 || parse_if_match(value, &cmd->react.if_match) != 0) {
            reply_problem(req, 400, "invalid-if-match", "If-Match takes a version ETag such as \"3\"");
            return false;
        }
        cmd->react.has_if_match = true;
    }
    return true;
}

/* Decides what the route asks for: op and kind. */
static bool write_op_or_reply(const app_t *app, http_request_t *req, item_action_t action, span_t kind_segment,
                              span_t body, write_cmd_t *cmd)
{
    bool put = span_eq_str(http_req_method(req), "PUT");
    switch (action) {
    case ITEM_ACTION_REACTION:
        cmd->react.op = REACT_SET;
        cmd->react.arg = KINDSET_EMPTY;
        return !put || body_reaction_or_reply(app, req, body, true, &cmd->react.arg);
    case ITEM_ACTION_TOGGLE:
        cmd->react.op = REACT_TOGGLE;
        return body_reaction_or_reply(app, req, body, false, &cmd->react.arg);
    case ITEM_ACTION_KIND:
        break;
    }
    int kind = kinds_find(app->kinds, kind_segment, false);
    if (kind < 0) {
        reply_problem(req, 400, "invalid-reaction", "the path names no configured reaction kind");
        return false;
    }
    cmd->react.arg = kindset_of(kind);
    cmd->react.op = put ? REACT_ADD : REACT_REMOVE;
    return true;
}

static void write_release(void *arg)
{
    write_cmd_t *cmd = arg;
    answer_free(&cmd->answer);
    free(cmd);
}

typedef struct {
    write_cmd_t cmd;
    app_shard_t *shard;      /* the item's */
    app_shard_t *user_shard; /* with several shards and a key: where the key's claim is (claims.h) */
    bool claimed;            /* the claim was taken: released if the write did not commit */
} item_write_t;

/* Writer thread: the answer is final; note a failed commit (/readyz), release the key's claim if
 * the write was refused, name the shard in its cursor (several shards: "S.P", fresh and replayed
 * answers alike), and hand it to the request's HTTP thread. The writer answers 503 only when the
 * commit failed. */
static void write_done(write_cmd_t *cmd)
{
    item_write_t *w = (item_write_t *)cmd;
    app_shard_t *shard = w->shard;
    if (cmd->answer.status == 503)
        atomic_store(&shard->last_write_failed_ms, wall_ms());
    /* a claim taken in the write's own transaction (the user's shard is the item's) is released the
     * same way, when the write did not commit */
    bool claimed = w->claimed || (cmd->react.claim && cmd->react.claim_held);
    if (claimed && claims_release_due(cmd))
        claims_release(w->user_shard->writer, (span_t){cmd->react.user, cmd->react.user_len},
                       (span_t){cmd->react.key, cmd->react.key_len}, cmd->react.fingerprint);
    if (cmd->answer.status == 200 && answer_cursor_shard(&cmd->answer, (uint32_t)shard->app->nshards, shard->k) != 0)
        log_line("level=error event=cursor-splice-failed shard=%u", shard->k);
    http_pending_respond(cmd->done_arg, &cmd->answer, write_release, cmd);
}

/* Writer thread of the user's shard: the key's claim is decided. Taken: the write goes to the item's
 * shard; bound to another request: 409, as the item's shard would say; not committed: 503. */
static void claim_done(void *arg, int outcome)
{
    item_write_t *w = arg;
    write_cmd_t *cmd = &w->cmd;
    if (outcome == CLAIM_TAKEN) {
        w->claimed = true;
        if (writer_submit(w->shard->writer, cmd) == 0)
            return;
        claims_release(w->user_shard->writer, (span_t){cmd->react.user, cmd->react.user_len},
                       (span_t){cmd->react.key, cmd->react.key_len}, cmd->react.fingerprint);
        answer_problem(&cmd->answer, 503, "overloaded", "too many writes are waiting; retry shortly");
    } else if (outcome == CLAIM_MISMATCH) {
        if (answer_idem_mismatch(&cmd->answer) != 0)
            answer_problem(&cmd->answer, 500, "internal", "out of memory");
    } else {
        atomic_store(&w->user_shard->last_write_failed_ms, wall_ms());
        answer_problem(&cmd->answer, 503, "unavailable", "the user's shard cannot be written; retry shortly");
    }
    http_pending_respond(cmd->done_arg, &cmd->answer, write_release, cmd);
}

/* Queues the write: with several shards and an Idempotency-Key, its claim on the user's shard first
 * (claims.h), the write once that is taken; in the write's own transaction when the user's shard is
 * the item's (write_react_t.claim). Returns 0, or -1 when nothing was queued. */
static int write_submit(app_t *app, item_write_t *w)
{
    write_cmd_t *cmd = &w->cmd;
    if (app->nshards == 1 || !cmd->react.key_len)
        return writer_submit(w->shard->writer, cmd);
    span_t user = {cmd->react.user, cmd->react.user_len};
    w->user_shard = app_user_shard(app, user);
    if (w->user_shard == w->shard) {
        cmd->react.claim = true;
        return writer_submit(w->shard->writer, cmd);
    }
    return claims_take(w->user_shard->writer, user, (span_t){cmd->react.key, cmd->react.key_len},
                       cmd->react.fingerprint, claim_done, w);
}

void items_write(app_t *app, http_request_t *req, span_t item, item_action_t action, span_t kind)
{
    auth_t who;
    span_t body;
    if (!auth_user_or_reply(app, req, true, &who) ||
        !rate_or_reply(app, atomic_load(&app->write_limit), req, who.user) || !item_or_reply(req, item) ||
        !body_or_reply(req, &body))
        return;
    item_write_t *w = calloc(1, sizeof *w);
    if (!w) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    write_cmd_t *cmd = &w->cmd; /* first member: write_release frees w through it */
    w->shard = app_item_shard(app, item);
    if (!write_headers_or_reply(req, cmd, action == ITEM_ACTION_TOGGLE) ||
        !write_op_or_reply(app, req, action, kind, body, cmd)) {
        free(w);
        return;
    }
    memcpy(cmd->react.item, item.ptr, item.len);
    cmd->react.item_len = item.len;
    memcpy(cmd->react.user, who.user.ptr, who.user.len);
    cmd->react.user_len = who.user.len;
    cmd->react.admin = who.admin;
    if (cmd->react.key_len &&
        fingerprint_request(http_req_method(req), http_req_target(req), body, cmd->react.fingerprint) != 0) {
        free(w);
        reply_problem(req, 500, "internal", "fingerprinting the request failed");
        return;
    }
    cmd->done = write_done;
    cmd->done_arg = http_defer(req);
    /* Deferred first, then the check: a shutdown that has seen no deferred request left also sees
     * this one, or this one sees the shutdown (both atomics are sequentially consistent). The writer
     * refuses only when its queue is full or it is stopping, which comes after draining is set. */
    bool draining = atomic_load(&app->draining);
    if (!cmd->done_arg || draining || write_submit(app, w) != 0) {
        if (cmd->done_arg)
            http_pending_cancel(cmd->done_arg);
        free(w);
        if (draining)
            reply_problem(req, 503, "unavailable", "the server is shutting down; retry on another node or shortly");
        else
            reply_problem(req, 503, "overloaded", "too many writes are waiting; retry shortly");
    }
}
