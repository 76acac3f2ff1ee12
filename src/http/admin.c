/* admin.c — the admin endpoints that run long: recount, import, erasing a user, deleting an item.
 * Each runs on a thread of its own (never an HTTP thread), one admin job at a time, and answers
 * through the deferred-answer mechanism of request.h. */
#include <pthread.h>
#include <stdlib.h>

#include "core/ids.h"
#include "engine/import.h"
#include "engine/recount.h"
#include "http/admin.h"
#include "http/auth.h"

#define IMPORT_BODY_TYPES "application/x-ndjson or text/csv"

typedef struct admin_job admin_job_t;
struct admin_job {
    app_t *app;
    http_pending_t *pending;
    void (*run)(admin_job_t *job); /* fills answer */
    answer_t answer;
    /* the job's input */
    span_t *items; /* recount: NULL = all */
    size_t nitems;
    char *arena;
    write_type_t clear_type; /* erase/delete: WRITE_CLEAR_USER or WRITE_CLEAR_ITEM */
    char name[ID_MAX_LEN];
    size_t name_len;
    import_options_t import;
    span_t body; /* import: the request body, which lives as long as the request */
};

static void job_free(void *arg)
{
    admin_job_t *job = arg;
    answer_free(&job->answer);
    free(job->items);
    free(job->arena);
    free(job);
}

static void *job_thread(void *arg)
{
    admin_job_t *job = arg;
    pthread_setname_np(pthread_self(), "tally-admin-job");
    job->run(job);
    atomic_store(&job->app->admin_busy, false);
    http_pending_respond(job->pending, &job->answer, job_free, job);
    return NULL;
}

/* Starts job on its own thread; on any failure answers req and frees job. */
static void job_start(app_t *app, http_request_t *req, admin_job_t *job)
{
    bool idle = false;
    if (!atomic_compare_exchange_strong(&app->admin_busy, &idle, true)) {
        job_free(job);
        reply_problem(req, 503, "overloaded", "another admin job is running; retry when it is done");
        return;
    }
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    job->app = app;
    job->pending = http_defer(req);
    if (!job->pending || pthread_create(&tid, &attr, job_thread, job) != 0) {
        if (job->pending)
            http_pending_cancel(job->pending);
        atomic_store(&app->admin_busy, false);
        job_free(job);
        reply_problem(req, 503, "overloaded", "cannot start the job");
    }
    pthread_attr_destroy(&attr);
}

static admin_job_t *job_new(http_request_t *req)
{
    admin_job_t *job = calloc(1, sizeof *job);
    if (!job)
        reply_problem(req, 503, "overloaded", "out of memory");
    return job;
}

/* --- recount --- */

/* Adds what one shard's recount found to the whole report. */
static int report_add(recount_report_t *to, recount_report_t *from)
{
    to->checked += from->checked;
    to->corrected += from->corrected;
    to->list_mismatches += from->list_mismatches;
    if (from->ndrift && to->ndrift + from->ndrift > to->cap) {
        size_t cap = to->ndrift + from->ndrift;
        recount_drift_t *drift = realloc(to->drift, cap * sizeof *drift);
        if (!drift)
            return STORE_ERROR;
        to->drift = drift;
        to->cap = cap;
    }
    if (from->ndrift)
        memcpy(to->drift + to->ndrift, from->drift, from->ndrift * sizeof *from->drift);
    to->ndrift += from->ndrift;
    return STORE_OK;
}

/* Recounts the items (NULL: all) on their shards, each shard with its own writer, one after the
 * other; a run stopped by an error may be run again (each shard's corrections are its own). */
static int recount_shards(app_t *app, const span_t *items, size_t nitems, recount_report_t *rep)
{
    *rep = (recount_report_t){0};
    span_t *some = items ? malloc((nitems ? nitems : 1) * sizeof *some) : NULL;
    if (items && !some)
        return STORE_ERROR;
    int rc = STORE_OK;
    for (size_t k = 0; k < app->nshards && rc == STORE_OK; k++) {
        app_shard_t *shard = &app->shard[k];
        size_t m = 0;
        for (size_t i = 0; items && i < nitems; i++)
            if (app_item_shard(app, items[i]) == shard)
                some[m++] = items[i];
        if (items && m == 0)
            continue;
        recount_report_t one;
        rc = recount_run(shard->store, shard->writer, items ? some : NULL, m, &one);
        if (rc == STORE_OK)
            rc = report_add(rep, &one);
        recount_report_free(&one);
    }
    free(some);
    return rc;
}

static void recount_job(admin_job_t *job)
{
    recount_report_t rep;
    int rc = recount_shards(job->app, job->items, job->nitems, &rep);
    if (rc != STORE_OK) {
        answer_problem(&job->answer, 503, "unavailable", "the recount could not finish; run it again");
        recount_report_free(&rep);
        return;
    }
    json_t *drift = json_array();
    for (size_t i = 0; drift && i < rep.ndrift; i++) {
        const recount_drift_t *d = &rep.drift[i];
        json_array_append_new(drift, json_pack("{s:s,s:s,s:I,s:I}", "item", d->item, "kind",
                                               kinds_count_name(job->app->kinds, d->kind), "counted",
                                               (json_int_t)d->counted, "stored", (json_int_t)d->stored));
    }
    answer_json(&job->answer, 200,
                json_pack("{s:I,s:I,s:o,s:I}", "checked", (json_int_t)rep.checked, "corrected",
                          (json_int_t)rep.corrected, "drift", drift, "list_mismatches",
                          (json_int_t)rep.list_mismatches));
    recount_report_free(&rep);
}

/* {} or {"items":[ids…]} → job->items (NULL for all). */
static bool recount_body_or_reply(http_request_t *req, admin_job_t *job)
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
    admin_job_t *job;
    if (!auth_admin_or_reply(app, req) || !(job = job_new(req)))
        return;
    job->run = recount_job;
    if (!recount_body_or_reply(req, job)) {
        job_free(job);
        return;
    }
    job_start(app, req, job);
}

/* --- erase a user, delete an item --- */

static void clear_job(admin_job_t *job)
{
    /* An item's rows are on its shard; a user's on every shard (each item's): cleared shard by shard. */
    app_t *app = job->app;
    span_t name = {job->name, job->name_len};
    bool user = job->clear_type == WRITE_CLEAR_USER;
    uint64_t changed = 0;
    for (size_t k = 0; k < app->nshards; k++) {
        app_shard_t *shard = &app->shard[k];
        if (!user && app_item_shard(app, name) != shard)
            continue;
        write_cmd_t cmd = {.type = job->clear_type};
        memcpy(cmd.clear.name, job->name, job->name_len);
        cmd.clear.name_len = job->name_len;
        do {
            answer_free(&cmd.answer);
            if (writer_call(shard->writer, &cmd) != 0 || cmd.answer.status != 200) {
                answer_free(&cmd.answer);
                answer_problem(&job->answer, 503, "unavailable",
                               "the store could not finish; what was cleared stays cleared, run it again");
                return;
            }
            changed += cmd.clear.changed;
        } while (cmd.clear.more);
        answer_free(&cmd.answer);
    }
    answer_json(&job->answer, 200, json_pack("{s:I}", "changed", (json_int_t)changed));
}

void admin_clear(app_t *app, http_request_t *req, span_t name, bool user)
{
    admin_job_t *job;
    if (!auth_admin_or_reply(app, req))
        return;
    if (!id_valid(name)) {
        reply_problem(req, 400, user ? "invalid-user-id" : "invalid-item-id",
                      "ids are 1-128 bytes of A-Z a-z 0-9 . _ : ~ - (and not . or ..)");
        return;
    }
    if (!(job = job_new(req)))
        return;
    job->run = clear_job;
    job->clear_type = user ? WRITE_CLEAR_USER : WRITE_CLEAR_ITEM;
    memcpy(job->name, name.ptr, name.len);
    job->name_len = name.len;
    job_start(app, req, job);
}

/* --- import --- */

static json_t *rejected_array(const import_report_t *rep)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < rep->nrejected; i++)
        json_array_append_new(
            list, json_pack("{s:I,s:s}", "line", (json_int_t)rep->rejected[i].line, "error", rep->rejected[i].error));
    return list;
}

static uint32_t import_shard_of(void *arg, span_t item)
{
    return app_item_shard(arg, item)->k;
}

static void import_job(admin_job_t *job)
{
    import_buffer_t buf = {job->body, 0};
    import_source_t src = {import_buffer_next, import_buffer_rewind, &buf};
    import_report_t rep;
    app_t *app = job->app;
    writer_t *writers[SHARD_MAX];
    for (size_t k = 0; k < app->nshards; k++)
        writers[k] = app->shard[k].writer;
    import_route_t route = {writers, app->nshards, import_shard_of, app};
    int rc = import_run(&route, app->kinds, &src, &job->import, &rep);
    if (rep.aborted) {
        answer_problem(&job->answer, 400, "import-rejected", "the import has bad lines; nothing was applied");
        json_t *doc = json_loadb(job->answer.body, job->answer.body_len, 0, NULL);
        if (doc) {
            json_object_set_new(doc, "rejected", rejected_array(&rep));
            answer_json(&job->answer, 400, doc);
            job->answer.type = ANSWER_PROBLEM;
        }
    } else if (rc != 0) {
        answer_problem(&job->answer, 503, "unavailable",
                       "the import stopped part-way (the writer refused or a commit failed); run it again: "
                       "what was applied stays, and a re-run changes nothing twice");
    } else {
        answer_json(&job->answer, 200,
                    json_pack("{s:I,s:I,s:I,s:o}", "read", (json_int_t)rep.read, "applied", (json_int_t)rep.applied,
                              "unchanged", (json_int_t)rep.unchanged, "rejected", rejected_array(&rep)));
    }
    import_report_free(&rep);
}

void admin_import(app_t *app, http_request_t *req, span_t query)
{
    admin_job_t *job;
    span_t type = {0}, on_error;
    if (!auth_admin_or_reply(app, req))
        return;
    http_req_header(req, "content-type", &type);
    size_t n = 0;
    while (n < type.len && type.ptr[n] != ';' && type.ptr[n] != ' ')
        n++;
    type.len = n;
    import_format_t format;
    if (type.len == strlen("application/x-ndjson") && strncasecmp(type.ptr, "application/x-ndjson", n) == 0)
        format = IMPORT_NDJSON;
    else if (type.len == strlen("text/csv") && strncasecmp(type.ptr, "text/csv", n) == 0)
        format = IMPORT_CSV;
    else {
        reply_problem(req, 415, "unsupported-media-type", "an import body is " IMPORT_BODY_TYPES);
        return;
    }
    bool abort_on_error = false;
    if (parse_query_param(query, "on-error", &on_error)) {
        if (span_eq_str(on_error, "abort"))
            abort_on_error = true;
        else if (!span_eq_str(on_error, "skip")) {
            reply_problem(req, 400, "invalid-parameter", "on-error is skip (the default) or abort");
            return;
        }
    }
    if (!(job = job_new(req)))
        return;
    job->run = import_job;
    job->import = (import_options_t){format, abort_on_error, IMPORT_BATCH_DEFAULT};
    job->body = http_req_body(req);
    job_start(app, req, job);
}
