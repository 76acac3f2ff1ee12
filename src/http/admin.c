/* admin.c — POST /v1/admin/recount: recounts on a thread of its own, one recount at a time. */
#include <pthread.h>
#include <stdlib.h>

#include "core/ids.h"
#include "engine/recount.h"
#include "http/app.h"

typedef struct {
    app_t *app;
    http_pending_t *pending;
    span_t *items; /* NULL: all */
    size_t nitems;
    char *arena; /* the items' bytes */
    answer_t answer;
} recount_job_t;

static void job_free(void *arg)
{
    recount_job_t *job = arg;
    answer_free(&job->answer);
    free(job->items);
    free(job->arena);
    free(job);
}

static void recount_render(recount_job_t *job, const recount_report_t *rep)
{
    json_t *drift = json_array();
    for (size_t i = 0; drift && i < rep->ndrift; i++) {
        const recount_drift_t *d = &rep->drift[i];
        json_array_append_new(drift, json_pack("{s:s,s:s,s:I,s:I}", "item", d->item, "kind",
                                               kinds_name(job->app->kinds, d->kind), "counted", (json_int_t)d->counted,
                                               "stored", (json_int_t)d->stored));
    }
    json_t *body = json_pack("{s:I,s:I,s:o}", "checked", (json_int_t)rep->checked, "corrected",
                             (json_int_t)rep->corrected, "drift", drift);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (text)
        answer_set_body(&job->answer, 200, ANSWER_JSON, text, strlen(text));
    else
        answer_problem(&job->answer, 500, "internal", "out of memory");
}

static void *recount_thread(void *arg)
{
    recount_job_t *job = arg;
    recount_report_t rep;
    int rc = recount_run(job->app->store, job->app->writer, job->items, job->nitems, &rep);
    if (rc == STORE_OK)
        recount_render(job, &rep);
    else
        answer_problem(&job->answer, 503, "unavailable", "the recount could not finish; run it again");
    recount_report_free(&rep);
    atomic_store(&job->app->recount_running, false);
    http_pending_respond(job->pending, &job->answer, job_free, job);
    return NULL;
}

/* {} or {"items":[ids…]} → job->items (NULL for all). */
static bool recount_body_or_reply(http_request_t *req, recount_job_t *job)
{
    span_t body = http_req_body(req);
    if (body.len > BODY_MAX_BYTES * 64) {
        reply_problem(req, 413, "body-too-large", "a recount body is at most 256 KiB");
        return false;
    }
    json_error_t err;
    json_t *doc = body.len ? json_loadb(body.ptr, body.len, JSON_REJECT_DUPLICATES, &err) : json_object();
    json_t *items = doc ? json_object_get(doc, "items") : NULL;
    if (!json_is_object(doc) || (items && !json_is_array(items))) {
        reply_problem(req, 400, "invalid-json", "the body is {} or {\"items\":[\"id\",…]}");
        json_decref(doc);
        return false;
    }
    size_t n = items ? json_array_size(items) : 0;
    if (n > RECOUNT_ITEMS_MAX) {
        reply_problem(req, 400, "too-many-ids", "at most 10000 items per recount; {} recounts all");
        json_decref(doc);
        return false;
    }
    bool ok = true;
    if (items) {
        job->items = calloc(n ? n : 1, sizeof *job->items);
        job->arena = malloc(n * ID_MAX_LEN + 1);
        ok = job->items && job->arena;
        for (size_t i = 0; ok && i < n; i++) {
            json_t *v = json_array_get(items, i);
            span_t id = {json_string_value(v), json_is_string(v) ? json_string_length(v) : 0};
            if (!json_is_string(v) || !id_valid(id)) {
                reply_problem(req, 400, "invalid-item-id", "every item must be a valid item id");
                json_decref(doc);
                return false;
            }
            memcpy(job->arena + i * ID_MAX_LEN, id.ptr, id.len);
            job->items[i] = (span_t){job->arena + i * ID_MAX_LEN, id.len};
        }
        job->nitems = n;
    }
    json_decref(doc);
    if (!ok)
        reply_problem(req, 503, "overloaded", "out of memory");
    return ok;
}

void admin_recount(app_t *app, http_request_t *req)
{
    if (!auth_admin_or_reply(app, req))
        return;
    recount_job_t *job = calloc(1, sizeof *job);
    if (!job) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    job->app = app;
    if (!recount_body_or_reply(req, job)) {
        job_free(job);
        return;
    }
    bool idle = false;
    if (!atomic_compare_exchange_strong(&app->recount_running, &idle, true)) {
        job_free(job);
        reply_problem(req, 503, "overloaded", "a recount is already running");
        return;
    }
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    job->pending = http_defer(req);
    if (!job->pending || pthread_create(&tid, &attr, recount_thread, job) != 0) {
        if (job->pending)
            http_pending_cancel(job->pending);
        atomic_store(&app->recount_running, false);
        job_free(job);
        reply_problem(req, 503, "overloaded", "cannot start the recount");
    }
    pthread_attr_destroy(&attr);
}
