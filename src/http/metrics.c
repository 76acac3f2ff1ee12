/* metrics.c — GET /metrics in the Prometheus text format (names by Prometheus conventions). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/textbuf.h"
#include "engine/recount.h"
#include "http/metrics.h"

#include "http/export.h"
#include "http/live.h"
#include "http/router.h"
#include "http/server.h"
#include "version.h"

#define SAMPLE_VALUE_MAX 32 /* "%.17g" of any double */

static void metric_head(textbuf_t *t, const char *name, const char *type, const char *help)
{
    textbuf_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(textbuf_t *t, const char *name, const char *help, uint64_t v)
{
    metric_head(t, name, "counter", help);
    textbuf_printf(t, "%s %llu\n", name, (unsigned long long)v);
}

/* A sample's value in the fewest significant digits, 15 to 17, that read back as the same double:
 * 0.1 as 0.1 (not the 0.10000000000000001 of %.17g), and nothing lost where a sum needs all 17.
 * What Prometheus's own clients print. */
static const char *sample_value(char buf[SAMPLE_VALUE_MAX], double v)
{
    if (isnan(v))
        return "NaN";
    if (isinf(v))
        return v > 0 ? "+Inf" : "-Inf";
    for (int digits = 15; digits < 17; digits++) {
        snprintf(buf, SAMPLE_VALUE_MAX, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            return buf;
    }
    snprintf(buf, SAMPLE_VALUE_MAX, "%.17g", v);
    return buf;
}

static void gauge(textbuf_t *t, const char *name, const char *help, double v)
{
    char value[SAMPLE_VALUE_MAX];
    metric_head(t, name, "gauge", help);
    textbuf_printf(t, "%s %s\n", name, sample_value(value, v));
}

static void histogram(textbuf_t *t, const char *name, const char *help, const histogram_t *h)
{
    metric_head(t, name, "histogram", help);
    uint64_t cumulative = 0;
    char le[SAMPLE_VALUE_MAX];
    for (size_t i = 0; i < h->nbounds; i++) {
        cumulative += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        textbuf_printf(t, "%s_bucket{le=\"%s\"} %llu\n", name, sample_value(le, h->bounds[i]),
                       (unsigned long long)cumulative);
    }
    cumulative += atomic_load_explicit(&h->counts[h->nbounds], memory_order_relaxed);
    textbuf_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cumulative);
    char sum[SAMPLE_VALUE_MAX];
    textbuf_printf(t, "%s_sum %s\n%s_count %llu\n", name, sample_value(sum, atomic_load(&h->sum)), name,
                   (unsigned long long)cumulative);
}

static uint64_t resident_bytes(void)
{
    unsigned long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &pages_total, &pages_resident) != 2)
        pages_resident = 0;
    fclose(f);
    return (uint64_t)pages_resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t store_file_bytes(const char *dir)
{
    char path[4096];
    struct stat st;
    if (!dir)
        return 0; /* a database server's store: its files are the server's */
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

static void render_requests(textbuf_t *t, app_t *app)
{
    metric_head(t, "tally_http_requests_total", "counter", "HTTP responses by route and status.");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (int s = 0; s < STATUS_CODES; s++) {
            uint64_t n = atomic_load_explicit(&app->responses[r][s], memory_order_relaxed);
            if (n)
                textbuf_printf(t, "tally_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                               route_name((route_id_t)r), s, (unsigned long long)n);
        }
}

/* Item policies: how many are in force, changes made through this node, writes refused by code. */
static void render_policies(textbuf_t *t, app_t *app)
{
    if (!app->policies)
        return;
    const policies_stats_t *ps = policies_stats(app->policies);
    gauge(t, "tally_policies", "Item policies in force on this node.",
          (double)atomic_load_explicit(&ps->count, memory_order_relaxed));
    counter(t, "tally_policy_changes_total", "Item policies put or deleted through this node.",
            atomic_load_explicit(&ps->changes, memory_order_relaxed));
    counter(t, "tally_policy_loads_total", "Times this node loaded the item policies from the store.",
            atomic_load_explicit(&ps->loads, memory_order_relaxed));
    metric_head(t, "tally_policy_refusals_total", "counter", "Writes refused by an item's policy, by problem code.");
    for (int v = POLICY_CLOSED; v < POLICY_VERDICTS; v++)
        textbuf_printf(t, "tally_policy_refusals_total{code=\"%s\"} %llu\n", policy_verdict_code((policy_verdict_t)v),
                       (unsigned long long)atomic_load_explicit(&ps->refused[v], memory_order_relaxed));
}

/* Voided users: how many this node knows, voids and restores made through it and the rows they moved.
 * With several shards: the users and the voids as shard 0 (voided first) says, the rows and loads of
 * every shard. */
static void render_voids(textbuf_t *t, app_t *app)
{
    if (!app->voids)
        return;
    const voids_stats_t *vs = voids_stats(app->voids);
    uint64_t voided_rows = 0, restored_rows = 0, loads = 0;
    for (size_t k = 0; k < app->nshards; k++) {
        const voids_stats_t *one = app->shard[k].voids ? voids_stats(app->shard[k].voids) : NULL;
        if (!one)
            continue;
        voided_rows += atomic_load_explicit(&one->voided_rows, memory_order_relaxed);
        restored_rows += atomic_load_explicit(&one->restored_rows, memory_order_relaxed);
        loads += atomic_load_explicit(&one->loads, memory_order_relaxed);
    }
    gauge(t, "tally_voided_users", "Voided users known on this node.",
          (double)atomic_load_explicit(&vs->count, memory_order_relaxed));
    counter(t, "tally_voids_total", "Users voided through this node.",
            atomic_load_explicit(&vs->voids, memory_order_relaxed));
    counter(t, "tally_restores_total", "Voided users restored through this node.",
            atomic_load_explicit(&vs->restores, memory_order_relaxed));
    counter(t, "tally_voided_rows_total", "Reaction rows that stopped counting through this node's voids.",
            voided_rows);
    counter(t, "tally_restored_rows_total", "Reaction rows that counted again through this node's restores.",
            restored_rows);
    counter(t, "tally_void_loads_total", "Times this node loaded the voided users from the store.", loads);
}

/* The feature version: the one in force (as this node last read it), the highest this build supports,
 * the nodes seen alive and those of them holding the version back. */
static void render_features(textbuf_t *t, app_t *app)
{
    if (!app->features)
        return;
    const features_stats_t *fs = features_stats(app->features);
    gauge(t, "tally_feature_version", "The feature version in force on the store, as this node last read it.",
          (double)atomic_load_explicit(&fs->in_force, memory_order_relaxed));
    gauge(t, "tally_feature_version_supported", "The highest feature version this build supports.",
          (double)FEATURE_VERSION_SUPPORTED);
    gauge(t, "tally_feature_nodes", "Nodes seen alive on the store at this node's last heartbeat, itself included.",
          (double)atomic_load_explicit(&fs->nodes_alive, memory_order_relaxed));
    gauge(t, "tally_feature_nodes_behind",
          "Of those nodes, the ones supporting a lower feature version than this build (they hold it back).",
          (double)atomic_load_explicit(&fs->nodes_behind, memory_order_relaxed));
    counter(t, "tally_feature_heartbeat_failures_total", "Heartbeats of this node that could not be written.",
            atomic_load_explicit(&fs->heartbeat_failures, memory_order_relaxed));
}

/* Per webhook: the age of its oldest undelivered transition, deliveries and failures (this node's). */
static void render_webhooks(textbuf_t *t, app_t *app)
{
    static webhooks_stat_t st[WHSTORE_MAX]; /* rendered under metrics_lock: one exposition at a time */
    static pthread_mutex_t metrics_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&metrics_lock);
    size_t n = webhooks_stats(app->webhooks, st, WHSTORE_MAX);
    metric_head(t, "tally_webhook_oldest_undelivered_seconds", "gauge",
                "Age of the oldest transition not yet delivered to the webhook (0 when caught up).");
    for (size_t i = 0; i < n; i++)
        textbuf_printf(t, "tally_webhook_oldest_undelivered_seconds{webhook=\"%s\"} %.3f\n", st[i].id,
                       st[i].oldest_undelivered_s);
    metric_head(t, "tally_webhook_deliveries_total", "counter", "Batches this node delivered (answered 2xx).");
    for (size_t i = 0; i < n; i++)
        textbuf_printf(t, "tally_webhook_deliveries_total{webhook=\"%s\"} %llu\n", st[i].id,
                       (unsigned long long)st[i].deliveries);
    metric_head(t, "tally_webhook_failures_total", "counter",
                "Delivery attempts of this node that failed (no 2xx in time); each is retried.");
    for (size_t i = 0; i < n; i++)
        textbuf_printf(t, "tally_webhook_failures_total{webhook=\"%s\"} %llu\n", st[i].id,
                       (unsigned long long)st[i].failures);
    metric_head(t, "tally_webhook_expired", "gauge",
                "1 when the webhook fell behind the log's retention and delivery stopped (resume it).");
    for (size_t i = 0; i < n; i++)
        textbuf_printf(t, "tally_webhook_expired{webhook=\"%s\"} %d\n", st[i].id, st[i].expired ? 1 : 0);
    pthread_mutex_unlock(&metrics_lock);
}

/* into += from, bucket by bucket (the same bounds: every shard's histogram is made alike). */
static void histogram_add(histogram_t *into, const histogram_t *from)
{
    if (!from)
        return;
    if (!into->nbounds) {
        into->nbounds = from->nbounds;
        memcpy(into->bounds, from->bounds, sizeof into->bounds);
    }
    for (size_t i = 0; i <= from->nbounds; i++)
        atomic_fetch_add_explicit(&into->counts[i], atomic_load_explicit(&from->counts[i], memory_order_relaxed),
                                  memory_order_relaxed);
    atomic_fetch_add_explicit(&into->count, atomic_load_explicit(&from->count, memory_order_relaxed),
                              memory_order_relaxed);
    atomic_store(&into->sum, atomic_load(&into->sum) + atomic_load(&from->sum));
}

#define WRITER_SUM(field) atomic_fetch_add(&sum->field, atomic_load(&ws->field))

/* Every shard's writer, as one: counters and histograms summed, the lag the largest, fold_leader
 * when this node folds any shard's log (one shard: that writer's own figures). */
static void writer_sums(const app_t *app, writer_stats_t *sum, uint64_t *lag_ms)
{
    *lag_ms = 0;
    for (size_t k = 0; k < app->nshards; k++) {
        const writer_stats_t *ws = writer_stats(app->shard[k].writer);
        WRITER_SUM(batches);
        WRITER_SUM(commands);
        WRITER_SUM(failed_commands);
        WRITER_SUM(replays);
        WRITER_SUM(transitions);
        WRITER_SUM(folds);
        WRITER_SUM(folded);
        WRITER_SUM(fold_items);
        WRITER_SUM(swept);
        WRITER_SUM(pruned);
        WRITER_SUM(queue_depth);
        WRITER_SUM(commit_failures);
        WRITER_SUM(conflict_retries);
        if (atomic_load(&ws->fold_leader))
            atomic_store(&sum->fold_leader, true);
        histogram_add(&sum->write_seconds, &ws->write_seconds);
        histogram_add(&sum->batch_commands, &ws->batch_commands);
        histogram_add(&sum->fold_entries, &ws->fold_entries);
        uint64_t lag = writer_lag_ms(app->shard[k].writer);
        *lag_ms = lag > *lag_ms ? lag : *lag_ms;
    }
}

/* Every shard's store statistics, as one: shard 0's, with the others' sizes and round trips added
 * (and COMMIT's durations into commit_seconds); connected is shard 0's (tally_db_connected has each). */
static bool store_sums(const app_t *app, store_stats_t *st, histogram_t *commit_seconds)
{
    if (store_stats(app->store, st) != STORE_OK)
        return false;
    histogram_add(commit_seconds, st->commit_seconds);
    for (size_t k = 1; k < app->nshards; k++) {
        store_stats_t sk = {0};
        if (store_stats(app->shard[k].store, &sk) != STORE_OK)
            continue;
        st->rows += sk.rows;
        st->items += sk.items;
        st->log_entries += sk.log_entries;
        st->idem_records += sk.idem_records;
        st->used_bytes += sk.used_bytes;
        st->round_trips += sk.round_trips;
        st->transactions += sk.transactions;
        st->writer_round_trips += sk.writer_round_trips;
        st->fold_round_trips += sk.fold_round_trips;
        histogram_add(commit_seconds, sk.commit_seconds);
    }
    if (st->commit_seconds)
        st->commit_seconds = commit_seconds;
    return true;
}

/* The whole exposition into a; any thread. */
static void metrics_render(app_t *app, answer_t *a)
{
    writer_stats_t sums;
    histogram_t commit_sums;
    memset(&sums, 0, sizeof sums);
    memset(&commit_sums, 0, sizeof commit_sums);
    uint64_t lag_ms;
    writer_sums(app, &sums, &lag_ms);
    writer_stats_t *ws = &sums;
    store_stats_t st = {0};
    bool have_store = store_sums(app, &st, &commit_sums);
    textbuf_t t = {0};
    metric_head(&t, "tally_build_info", "gauge", "The version running, its store and its reaction mode (always 1).");
    textbuf_printf(&t, "tally_build_info{version=\"%s\",store=\"%s\",mode=\"%s\"} 1\n", tally_version,
                   app->data_dir ? "lmdb" : "postgresql", app->kinds->mode == REACTION_MODE_MANY ? "many" : "one");
    gauge(&t, "tally_start_time_seconds", "When this process started (Unix time).", app->start_time_s);
    render_requests(&t, app);
    histogram(&t, "tally_write_duration_seconds", "Writes from queueing to a durable answer.", &ws->write_seconds);
    histogram(&t, "tally_writer_batch_commands", "Commands per writer commit (group commit size).",
              &ws->batch_commands);
    histogram(&t, "tally_pipeline_batch_entries", "Log entries folded into the counts per fold.", &ws->fold_entries);
    gauge(&t, "tally_writer_queue_depth", "Writes waiting for the writer.", (double)atomic_load(&ws->queue_depth));
    gauge(&t, "tally_pipeline_lag_seconds", "Age of the oldest transition not yet folded into the counts.",
          (double)lag_ms / 1000.0);
    counter(&t, "tally_writer_commits_total", "Writer transactions.", atomic_load(&ws->batches));
    counter(&t, "tally_writes_total", "Write commands processed.", atomic_load(&ws->commands));
    counter(&t, "tally_writer_commit_failures_total", "Writer transactions that failed to commit (nothing applied).",
            atomic_load(&ws->commit_failures));
    counter(&t, "tally_pipeline_folds_total", "Folds that moved the checkpoint.", atomic_load(&ws->folds));
    counter(&t, "tally_writes_failed_total", "Write commands answered 503 because their commit failed.",
            atomic_load(&ws->failed_commands));
    counter(&t, "tally_transitions_total", "Reaction transitions committed.", atomic_load(&ws->transitions));
    counter(&t, "tally_pipeline_folded_total", "Log entries folded into the counts.", atomic_load(&ws->folded));
    counter(&t, "tally_pipeline_count_updates_total", "Counts records written by the pipeline.",
            atomic_load(&ws->fold_items));
    counter(&t, "tally_idempotent_replays_total", "Answers replayed for a repeated Idempotency-Key.",
            atomic_load(&ws->replays));
    counter(&t, "tally_idempotency_records_swept_total", "Expired idempotency records deleted.",
            atomic_load(&ws->swept));
    counter(&t, "tally_log_pruned_total", "Log entries pruned behind the checkpoint.", atomic_load(&ws->pruned));
    counter(&t, "tally_rate_limited_total", "Requests refused with 429.", atomic_load(&app->rate_limited));
    counter(&t, "tally_forwarded_total", "Requests whose client a trusted proxy named (--trusted-proxies).",
            atomic_load(&app->forwarded));
    counter(&t, "tally_forwarded_invalid_total",
            "Requests from a trusted proxy whose client header could not be used (malformed, unknown, obfuscated, "
            "or no untrusted address): the proxy's address was taken.",
            atomic_load(&app->forwarded_invalid));
    gauge(&t, "tally_recount_drift", "Drift entries found by the last recount (of each shard, summed; should be 0).",
          (double)recount_last_drift());
    counter(&t, "tally_recount_corrections_total", "Count corrections made by recounts.",
            atomic_load(&recount_stats.corrected_total));
    counter(&t, "tally_recount_runs_total", "Recounts finished.", atomic_load(&recount_stats.runs));
    gauge(&t, "tally_list_index_mismatches",
          "Entries of the lists (who reacted, a user's reactions) that disagreed with the rows in the last recount "
          "(of each shard, summed; should be 0).",
          (double)recount_last_list_mismatches());
    if (have_store) {
        gauge(&t, "tally_store_used_bytes", "Bytes of the store's map in use.", (double)st.used_bytes);
        gauge(&t, "tally_store_rows", "Reaction rows.", (double)st.rows);
        gauge(&t, "tally_store_items", "Items with counts.", (double)st.items);
        gauge(&t, "tally_log_entries", "Transitions retained in the log.", (double)st.log_entries);
        gauge(&t, "tally_idempotency_records", "Idempotency records kept.", (double)st.idem_records);
        gauge(&t, "tally_row_filter_ready", "1 when the row filter is filled and answers for missing rows.",
              st.row_filter_ready ? 1 : 0);
    }
    if (have_store && st.journal) { /* the embedded store's journal */
        counter(&t, "tally_journal_records_total", "Batches appended to the journal and synced, a record each.",
                st.journal_records);
        counter(&t, "tally_store_commits_total",
                "Commits of the B-tree; under load an epoch's batches share one (records per commit).", st.commits);
        counter(&t, "tally_journal_bytes_total", "Bytes appended to the journal.", st.journal_bytes);
        counter(&t, "tally_journal_checkpoints_total", "Syncs of the data file recorded as the journal's base.",
                st.checkpoints);
        counter(&t, "tally_journal_checkpoint_failures_total",
                "Checkpoints that failed (tried again; the journal keeps every record since the last base).",
                st.checkpoint_failures);
        gauge(&t, "tally_journal_last_checkpoint_seconds", "Duration of the last checkpoint (the data file's sync).",
              st.last_checkpoint_seconds);
    }
    if (st.shared) { /* a database server's store */
        /* per shard: one shard's database down leaves the others' items served */
        metric_head(&t, "tally_db_connected", "gauge", "1 while the shard's database answers.");
        for (size_t k = 0; k < app->nshards; k++) {
            store_stats_t sk = {0};
            bool up = k == 0 ? st.connected : store_stats(app->shard[k].store, &sk) == STORE_OK && sk.connected;
            textbuf_printf(&t, "tally_db_connected{shard=\"%zu\"} %d\n", k, up ? 1 : 0);
        }
        gauge(&t, "tally_fold_leader", "1 while this node folds the log into the counts.",
              atomic_load(&ws->fold_leader) ? 1 : 0);
        counter(&t, "tally_db_round_trips_total", "Statements sent to the database.", st.round_trips);
        counter(&t, "tally_db_transactions_total",
                "Transactions committed in the database (the writer's batches and the fold's own).", st.transactions);
        counter(&t, "tally_db_writer_round_trips_total",
                "Round trips of the writer's connection (its batches and sweep), of tally_db_round_trips_total.",
                st.writer_round_trips);
        counter(&t, "tally_db_fold_round_trips_total",
                "Round trips of the fold's connection (its folds and the leader lock), of tally_db_round_trips_total.",
                st.fold_round_trips);
        counter(&t, "tally_writer_conflict_retries_total",
                "Batches or folds run again after a conflict with another node (deadlock, serialization).",
                atomic_load(&ws->conflict_retries));
        histogram(&t, "tally_db_commit_seconds", "Duration of the writer's COMMIT (the server's durable sync).",
                  st.commit_seconds);
    }
    gauge(&t, "tally_store_file_bytes", "Disk space used by the store's data file.",
          (double)store_file_bytes(app->data_dir));
    trend_entry_t hot[100];
    gauge(&t, "tally_hot_items", "Items written more often than --hot-threshold per second.",
          (double)trending_hot(app->trending, 100, hot));
    gauge(&t, "tally_trending_behind_entries", "Log entries the trending follower has yet to read.",
          (double)trending_behind(app->trending));
    counter(&t, "tally_trending_errors_total", "Failed store reads and persists of trending.",
            trending_errors(app->trending));
    http_server_stats_t hs;
    http_server_stats(&hs);
    gauge(&t, "tally_http_connections", "Open HTTP connections.", (double)hs.connections);
    gauge(&t, "tally_http_admin_connections", "Open connections on the --admin-listen listener.",
          (double)hs.admin_connections);
    counter(&t, "tally_http_connections_refused_total", "Connections refused at --max-connections.", hs.refused);
    counter(&t, "tally_http_accept_errors_total",
            "Connections that could not be accepted (out of file descriptors or memory); accepting pauses.",
            hs.accept_errors);
    counter(&t, "tally_http_large_bodies_refused_total",
            "Admin request bodies refused because the large-body budget was in use.", hs.large_bodies_refused);
    gauge(&t, "tally_http_large_body_bytes", "Bytes reserved by admitted large request bodies in flight.",
          (double)hs.large_body_bytes);
    live_http_stats_t ls;
    live_http_stats(&ls);
    gauge(&t, "tally_live_streams", "Open live-count streams (GET /v1/live).", (double)ls.open);
    counter(&t, "tally_live_streams_opened_total", "Live-count streams opened.", ls.opened);
    counter(&t, "tally_live_events_total", "Counts events sent on live streams.", ls.events);
    counter(&t, "tally_live_dropped_total", "Live streams closed because their client stopped reading.", ls.dropped);
    counter(&t, "tally_live_refused_total", "Live streams refused at --max-live-streams(-per-client).", ls.refused);
    counter(&t, "tally_live_errors_total", "Failed store reads of the live-counts follower.", ls.errors);
    export_http_stats_t xs;
    export_http_stats(&xs);
    gauge(&t, "tally_exports_running", "Exports holding a snapshot of the store now.", (double)xs.running);
    counter(&t, "tally_exports_started_total", "Exports started (GET /v1/admin/export, /v1/users/{user}/export).",
            xs.started);
    counter(&t, "tally_exports_completed_total", "Exports read whole (with their closing line).", xs.completed);
    counter(&t, "tally_exports_cut_total", "Exports cut: --export-timeout, the client left, or shutdown.", xs.cut);
    counter(&t, "tally_exports_failed_total", "Exports ended by a failed store read.", xs.failed);
    counter(&t, "tally_exports_refused_total", "Exports refused with 503 at --max-exports.", xs.refused);
    counter(&t, "tally_export_lines_total", "Lines sent by exports that ended (closing lines not counted).", xs.lines);
    if (ls.shards > 1) { /* per shard: each follows its own log (with one, the gauge as it always was) */
        metric_head(&t, "tally_live_cursor", "gauge", "The checkpoint the shard's live-counts follower read last.");
        for (size_t k = 0; k < ls.shards; k++)
            textbuf_printf(&t, "tally_live_cursor{shard=\"%zu\"} %llu\n", k, (unsigned long long)ls.cursor[k]);
    } else {
        gauge(&t, "tally_live_cursor", "The checkpoint the live-counts follower read last.", (double)ls.cursor[0]);
    }
    gauge(&t, "tally_writes_failing", "1 for 10 s after a reaction write failed to commit (disk full?).",
          app_writes_failing(app) ? 1 : 0);
    render_webhooks(&t, app);
    render_policies(&t, app);
    render_voids(&t, app);
    render_features(&t, app);
    gauge(&t, "process_resident_memory_bytes", "Resident memory size in bytes.", (double)resident_bytes());
    if (t.failed) {
        free(t.buf);
        answer_problem(a, 500, "internal", "out of memory");
        return;
    }
    answer_set_body(a, 200, ANSWER_TEXT, t.buf, t.len);
}

typedef struct {
    read_job_t job; /* first */
    app_t *app;
    http_pending_t *pending;
    answer_t answer;
} metrics_job_t;

static void metrics_release(void *arg)
{
    metrics_job_t *m = arg;
    answer_free(&m->answer);
    free(m);
}

static void metrics_run(read_job_t *job)
{
    metrics_job_t *m = (metrics_job_t *)job;
    metrics_render(m->app, &m->answer);
    http_pending_respond(m->pending, &m->answer, metrics_release, m);
}

void metrics_get(app_t *app, http_request_t *req)
{
    metrics_job_t *m = calloc(1, sizeof *m);
    if (!m) {
        reply_problem(req, 500, "internal", "out of memory");
        return;
    }
    m->app = app;
    if (!app->readers) { /* the store's statistics are read from memory and its own pages */
        metrics_render(app, &m->answer);
        http_respond(req, &m->answer);
        metrics_release(m);
        return;
    }
    app_read_submit(app, req, &m->job, metrics_run, &m->pending, m); /* a round trip: not on this loop */
}
