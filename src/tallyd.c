/* tallyd.c — the server: flags, wiring of store → writer → HTTP, signals, graceful shutdown. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "core/clock.h"
#include "core/kinds.h"
#include "core/log.h"
#include "core/netallow.h"
#include "core/parse.h"
#include "engine/recount.h"
#include "engine/shards.h"
#include "engine/userfold.h"
#include "engine/webhooks.h"
#include "engine/writer.h"
#include "http/app.h"
#include "http/dispatch.h"
#include "http/export.h"
#include "http/live.h"
#include "http/server.h"
#include "http/ui.h"
#include "store/lmdb/lmdb.h"
#include "store/store.h"
#include "tallyd.h"

#define EXIT_USAGE 2
#define LISTEN_BACKLOG 1024
#define DRAIN_TIMEOUT_MS 10000
#define SHUTDOWN_FLUSH_MS 200
#define LIVE_END_WAIT_MS 2000 /* live streams whose clients stopped reading are dropped from half of it */
#define RECOUNT_SAMPLE_ITEMS 100
#define ADMIN_JOB_WAIT_MS 60000
#define EXPORT_END_WAIT_MS 5000             /* exports let go of their snapshots at shutdown: a page each at most */
#define EXPORT_RETRY_AFTER_S 5              /* past --max-exports: an export lasts seconds to minutes */
#define HTTP_SMALL_BODY_BYTES (8u << 10)    /* h2o's cap for everyone; handlers enforce the contract's 4 KiB */
#define RECOUNT_BODY_MAX_BYTES (256u << 10) /* an admin recount's item list (admin.c) */
#define LARGE_BODIES_IN_FLIGHT 2            /* admitted admin bodies of --import-max-size at once */
#define HEALTH_RESERVED_CONNECTIONS 16      /* past --max-connections, for /healthz and /readyz only */
#define ADMIN_MAX_CONNECTIONS 256           /* the admin listener's own slots */
#define FD_OVERHEAD 128                     /* descriptors besides connections: store, log, threads' queues */

/* A refused flag or configuration file: exit status 2 (the message names the flag, and the file and
 * line when it came from one). */
static _Noreturn void die_flags(const flag_error_t *err)
{
    log_line("level=error event=bad-flag msg=\"%s\" help=\"see tallyd --help\"", err->msg);
    exit(EXIT_USAGE);
}

static _Noreturn void die_usage(const char *flag, const char *why)
{
    flag_error_t err;
    snprintf(err.msg, sizeof err.msg, "%s: %s", flag, why);
    die_flags(&err);
}

static bool addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

/* Binds the listening socket; prints nothing. Returns the fd, or -1 with a message on stderr. */
static int listen_on(const char *flag, const char *spec, bool loopback_only, char *shown, size_t shown_len)
{
    char host[LISTEN_HOST_MAX + 1], port_text[8];
    uint16_t port;
    if (parse_listen(spec, host, &port) != 0) /* checked with the flags already */
        die_usage(flag, "expected HOST:PORT");
    snprintf(port_text, sizeof port_text, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res;
    int rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0) {
        log_line("level=error event=start-failed flag=%s msg=\"%s %s: %s\"", flag, flag, spec, gai_strerror(rc));
        return -1;
    }
    if (loopback_only && !addr_is_loopback(res->ai_addr)) {
        log_line("level=error event=start-failed flag=%s msg=\"development mode (no TALLY_JWT_SECRET) only listens on "
                 "loopback addresses, not %s\"",
                 flag, spec);
        freeaddrinfo(res);
        return -1;
    }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        log_line("level=error event=start-failed flag=%s msg=\"cannot listen on %s: %s\"", flag, spec, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_storage bound;
    socklen_t len = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &len);
    char addr[INET6_ADDRSTRLEN];
    if (bound.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&bound;
        inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof addr);
        snprintf(shown, shown_len, "[%s]:%u", addr, ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&bound;
        inet_ntop(AF_INET, &a->sin_addr, addr, sizeof addr);
        snprintf(shown, shown_len, "%s:%u", addr, ntohs(a->sin_port));
    }
    return fd;
}

/* Every connection is a file descriptor: raise the soft RLIMIT_NOFILE as far as needed (up to the
 * hard limit). When even the hard limit is too low, an explicit --max-connections is refused (exit
 * 2); the default is lowered to fit, with a warning. *nofile is the soft limit in force after (0
 * when unknown). Returns 0, or -1 having said why. */
static int fd_limit_or_exit(options_t *o, uint64_t *nofile)
{
    struct rlimit rl;
    *nofile = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    *nofile = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    rlim_t extra = HEALTH_RESERVED_CONNECTIONS + (o->admin_listen ? ADMIN_MAX_CONNECTIONS : 0) + FD_OVERHEAD;
    rlim_t need = (rlim_t)o->max_connections + extra;
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        *nofile = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    }
    if (rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_cur <= extra + 1 || o->max_connections_given) {
        log_line(
            "level=error event=bad-flag flag=--max-connections msg=\"%llu connections need %llu file descriptors, "
            "but RLIMIT_NOFILE allows %llu (raise it with ulimit -n or LimitNOFILE=, or lower --max-connections)\"",
            (unsigned long long)o->max_connections, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
        return -1;
    }
    o->max_connections = (uint64_t)(rl.rlim_cur - extra);
    log_line("level=warn event=max-connections-lowered max_connections=%llu msg=\"RLIMIT_NOFILE is %llu; raise it to "
             "serve more\"",
             (unsigned long long)o->max_connections, (unsigned long long)rl.rlim_cur);
    return 0;
}

/* Live streams hold connections: their cap must leave room below --max-connections for everything
 * else. A cap given is refused (exit 2) when it does not; the default is lowered to half, with a
 * warning: a small --max-connections alone would otherwise change the streams' cap unseen. */
static void live_caps_or_exit(options_t *o)
{
    if (o->max_live_streams < o->max_connections)
        return;
    if (o->max_live_streams_given) {
        char why[160];
        snprintf(why, sizeof why, "must be below --max-connections (%llu)", (unsigned long long)o->max_connections);
        die_usage("--max-live-streams", why);
    }
    uint64_t was = o->max_live_streams;
    o->max_live_streams = o->max_connections / 2;
    log_line("level=warn event=max-live-streams-lowered max_live_streams=%llu msg=\"--max-connections is %llu, not "
             "above the default --max-live-streams %llu: live streams get half of the connections; give "
             "--max-live-streams to choose\"",
             (unsigned long long)o->max_live_streams, (unsigned long long)o->max_connections, (unsigned long long)was);
}

/* The connection limits in force, once fitted: what an operator needs to read a 503 at a cap. */
static void log_limits(const options_t *o, uint64_t nofile)
{
    char nofile_text[24] = "unknown";
    if (nofile == UINT64_MAX)
        snprintf(nofile_text, sizeof nofile_text, "unlimited");
    else if (nofile)
        snprintf(nofile_text, sizeof nofile_text, "%llu", (unsigned long long)nofile);
    log_line("level=info event=limits max_connections=%llu health_connections=%d admin_connections=%d "
             "max_live_streams=%llu max_live_streams_per_client=%llu rlimit_nofile=%s",
             (unsigned long long)o->max_connections, HEALTH_RESERVED_CONNECTIONS,
             o->admin_listen ? ADMIN_MAX_CONNECTIONS : 0, (unsigned long long)o->max_live_streams,
             (unsigned long long)o->max_live_streams_per_client, nofile_text);
}

/* The writer hands a batch's answers to the HTTP threads together: one wake-up per thread. */
static void answers_hold(void *arg)
{
    (void)arg;
    http_answers_hold();
}

static void answers_flush(void *arg)
{
    (void)arg;
    http_answers_flush();
}

/* A shard's writer committed transitions: wake that shard's change feed long polls, the trending
 * follower and webhook delivery. */
static void on_commit(void *arg)
{
    app_shard_t *shard = arg;
    app_t *app = shard->app;
    feed_notify(shard->feed);
    if (app->trending)
        trending_notify_shard(app->trending, shard->k);
    webhooks_notify(app->webhooks);
}

/* Development mode, or the keys tokens are verified with. Returns 0, or exit status 2 having said
 * why (a weak TALLY_JWT_SECRET is a bad value too). */
static int auth_setup(app_t *app, auth_keys_t *keys, const options_t *o)
{
    char err[1536];
    const char *flag = NULL;
    auth_config_t cfg = tallyd_auth_config(o);
    app->dev_mode = !auth_config_token_mode(&cfg);
    if (app->dev_mode) {
        log_line("level=warn event=development-mode msg=\"no TALLY_JWT_SECRET: the user is the X-User-Id "
                 "header; listening on loopback only\"");
        return 0;
    }
    if (auth_keys_reload(keys, &cfg, &flag, err, sizeof err) != 0) {
        log_line("level=error event=bad-flag flag=%s msg=\"%s: %s\"", flag, flag, err);
        return EXIT_USAGE;
    }
    app->keys = keys;
    return 0;
}

/* The app's settings from the flags. Returns 0, or -1 having said why. */
static int app_setup(app_t *app, const options_t *o, const kinds_t *kinds, store_t *store)
{
    app->kinds = kinds;
    app->store = store;
    app->data_dir = o->store ? NULL : o->data;
    ratelimit_t *write_limit, *read_limit;
    if (ratelimit_new(o->write_rule, RATE_TABLE_CAPACITY, &write_limit) != 0 ||
        ratelimit_new(o->read_rule, RATE_TABLE_CAPACITY, &read_limit) != 0) {
        log_line("level=error event=start-failed msg=\"out of memory for the rate limits\"");
        return -1;
    }
    atomic_store(&app->write_limit, write_limit);
    atomic_store(&app->read_limit, read_limit);
    static cors_list_t cors;
    for (int i = 0; i < o->ncors; i++)
        cors.origins[i] = o->cors[i];
    cors.count = o->ncors;
    atomic_store(&app->cors, &cors);
    app->max_header_bytes = o->max_header_bytes;
    static client_rules_t client_rules;
    client_rules = tallyd_client_rules(o);
    atomic_store(&app->client_rules, &client_rules);
    app->who_reacted = o->who_reacted;
    app->user_reactions = o->user_reactions;
    export_http_setup(&(export_http_options_t){
        .max_exports = o->max_exports, .timeout_ms = o->export_timeout_ms, .retry_after_s = EXPORT_RETRY_AFTER_S});
    atomic_store(&app->public_max_age_s, (unsigned)(o->public_max_age_ms / 1000));
    if (o->access_log) {
        FILE *out = strcmp(o->access_log, "-") == 0 ? stderr : fopen(o->access_log, "ae");
        atomic_store(&app->access_log, out);
        if (!out) {
            log_line("level=error event=start-failed flag=--access-log msg=\"--access-log %s: %s\"", o->access_log,
                     strerror(errno));
            return -1;
        }
        setvbuf(out, NULL, _IOLBF, 0);
    }
    return 0;
}

/* Each shard's change feed and writer; shard 0's are also the cluster-wide records' (app->feed,
 * app->writer). Returns NULL, or what could not be started. */
/* A user's list across shards (engine/userfold.h): NULL with one shard. Freed once the writers stop. */
static userfold_t *user_fold;

static const char *shard_engines_start(app_t *app, writer_options_t *wopt)
{
    if (userfold_new(app->shards, &user_fold) != 0)
        return "the fold of the users' lists";
    if (user_fold)
        recount_use_shards(app->shards);
    for (size_t k = 0; k < app->nshards; k++) {
        app_shard_t *shard = &app->shard[k];
        wopt->on_commit_arg = shard;
        wopt->voids = shard->voids; /* the shard's own flags: its writer decides from them */
        if (user_fold) {
            wopt->fold_more = userfold_fold;
            wopt->prune_floor = userfold_prune_floor;
            wopt->fold_more_arg = userfold_arg(user_fold, k);
        }
        if (feed_start(shard->store, &shard->feed) != 0)
            return "the change feed thread";
        if (writer_start(shard->store, app->kinds, wopt, &shard->writer) != 0)
            return "the writer thread";
    }
    app->feed = app->shard[0].feed;
    app->writer = app->shard[0].writer;
    return NULL;
}

/* The feed, the writer, trending and the periodic recount. Returns 0, or -1 having said why. */
static int engine_start(app_t *app, const options_t *o, recount_sampler_t **samplers)
{
    writer_options_t wopt = {
        .queue_max = o->queue_max,
        .batch_max = o->batch_max,
        .fold_max = WRITER_FOLD_MAX_DEFAULT,
        .fold_window_ms = o->fold_window_ms,
        .idem_ttl_ms = o->idem_ttl_ms,
        .sweep_max = WRITER_SWEEP_MAX_DEFAULT,
        .log_retention_ms = o->log_retention_ms,
        .log_max_bytes = o->log_max_bytes,
        .on_commit = on_commit,
        .release_begin = answers_hold,
        .release_end = answers_flush,
    };
    trending_options_t topt = {.capacity = o->trending_capacity, .hot_threshold = (double)o->hot_threshold};
    webhooks_options_t hopt = {
        .timeout_ms = o->webhook_timeout_ms,
        .backoff_min_ms = o->webhook_backoff_min_ms,
        .backoff_max_ms = o->webhook_backoff_max_ms,
        .secret_overlap_ms = o->webhook_secret_overlap_ms,
        .allow = o->webhook_allow,
        .mode = o->reaction_mode,
    };
    const char *what = NULL;
    char perr[256];
    if (policies_open(app->store, app->kinds, &app->policies, perr, sizeof perr) != 0) {
        log_line("level=error event=start-failed msg=\"%s\"", perr);
        return -1;
    }
    wopt.policies = app->policies;
    /* The voided-user flag is on every shard: each shard's set is followed apart, and the reads of an
     * item go by its shard's (shard 0's, app->voids, is the cluster's: the lists, the metrics). */
    for (size_t k = 0; k < app->nshards; k++)
        if (voids_open(app->shard[k].store, k > 0, &app->shard[k].voids, perr, sizeof perr) != 0) {
            log_line("level=error event=start-failed msg=\"%s\"", perr);
            return -1;
        }
    app->voids = app->shard[0].voids;
    if (store_shared(app->store) && readers_start(READERS_THREADS_DEFAULT, READERS_QUEUE_MAX, &app->readers) != 0)
        what = "the reader threads";
    else
        what = shard_engines_start(app, &wopt);
    if (!what && features_open(app->store, app->writer, true, &app->features, perr, sizeof perr) != 0) {
        log_line("level=error event=start-failed msg=\"%s\"", perr);
        return -1;
    }
    if (!what) { /* a follower per shard, its summaries on its shard */
        store_t *stores[SHARD_MAX];
        writer_t *writers[SHARD_MAX];
        for (size_t k = 0; k < app->nshards; k++)
            stores[k] = app->shard[k].store, writers[k] = app->shard[k].writer;
        if (trending_start_shards(stores, writers, app->nshards, app->kinds, &topt, &app->trending) != 0)
            what = "trending";
    }
    for (size_t k = 0; k < app->nshards && !what; k++)
        if (recount_sampler_start(app->shard[k].store, app->shard[k].writer, o->recount_interval_ms,
                                  RECOUNT_SAMPLE_ITEMS, &samplers[k]) != 0)
            what = "the periodic recount";
    store_t *hook_stores[SHARD_MAX]; /* webhooks follow every shard's log */
    for (size_t k = 0; k < app->nshards; k++)
        hook_stores[k] = app->shard[k].store;
    if (!what && webhooks_start(hook_stores, app->nshards, app->writer, app->kinds, &hopt, &app->webhooks) != 0)
        what = "webhook delivery";
    if (what)
        log_line("level=error event=start-failed msg=\"cannot start %s\"", what);
    return what ? -1 : 0;
}

static int http_start(app_t *app, const options_t *o, int listen_fd, int admin_fd)
{
    size_t large_limit = o->import_max_bytes > RECOUNT_BODY_MAX_BYTES ? o->import_max_bytes : RECOUNT_BODY_MAX_BYTES;
    http_server_config_t hcfg = {
        .listen_fd = listen_fd,
        .admin_listen = admin_fd >= 0,
        .admin_fd = admin_fd,
        .threads = (int)o->threads,
        .small_body_bytes = HTTP_SMALL_BODY_BYTES,
        .max_body_bytes = large_limit,
        .large_body_budget = LARGE_BODIES_IN_FLIGHT * large_limit,
        .request_timeout_ms = o->request_timeout_ms,
        .handler = app_handle,
        .on_respond = app_on_respond,
        .admits_large_body = app_admits_large_body,
        .max_connections = o->max_connections,
        .health_reserve = HEALTH_RESERVED_CONNECTIONS,
        .admin_max_connections = ADMIN_MAX_CONNECTIONS,
        .app = app,
    };
    if (http_server_start(&hcfg) != 0) {
        log_line("level=error event=start-failed msg=\"cannot start the HTTP threads\"");
        return -1;
    }
    return 0;
}

/* Waits for SIGTERM or SIGINT, reloading on each SIGHUP (telling systemd, when it started us, that
 * a reload is under way and when it is done). Returns the signal. */
static int wait_for_stop(const sigset_t *stop_signals, reload_ctx_t *ctx, const char *status)
{
    int sig = 0;
    for (;;) {
        sigwait(stop_signals, &sig);
        if (sig != SIGHUP)
            return sig;
        sd_notifyf(0, "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=%llu",
                   (unsigned long long)(mono_ns() / 1000));
        int rc = tallyd_reload(ctx);
        sd_notifyf(0, "READY=1\nSTATUS=%s%s", status, rc == 0 ? "" : " (the last reload was refused: see the log)");
    }
}

/* Stop accepting, answer what is in flight, then stop the engine and close the store. */
static void shut_down(app_t *app, recount_sampler_t **samplers)
{
    atomic_store(&app->ready, false);
    atomic_store(&app->draining, true);
    http_server_stop_accepting();
    live_http_end_all(); /* no more live updates; every stream ends once what it was sent has left */
    for (size_t k = 0; k < app->nshards; k++)
        feed_stop(app->shard[k].feed);                             /* long polls are answered at once */
    size_t exports_left = export_http_end_all(EXPORT_END_WAIT_MS); /* each lets go of its snapshot; cut */
    if (exports_left)
        log_line("level=warn event=shutdown-exports left=%zu", exports_left);
    size_t left = http_server_drain(DRAIN_TIMEOUT_MS);
    if (left)
        log_line("level=warn event=shutdown-drain unanswered=%zu", left);
    readers_stop(app->readers); /* what is queued is answered while the loops still run */
    const struct timespec flush = {0, SHUTDOWN_FLUSH_MS * 1000000L};
    nanosleep(&flush, NULL); /* the loops keep running: the last answers leave their sockets */
    size_t streams_left = live_http_wait_ended(LIVE_END_WAIT_MS); /* the loops still run for them */
    if (streams_left)
        log_line("level=warn event=shutdown-live-streams left=%zu", streams_left);
    http_server_stop();
    live_http_stop();
    for (size_t k = 0; k < app->nshards; k++)
        recount_sampler_stop(samplers[k]);
    /* A long admin job (import, recount, erase) still needs the writer and the store. */
    const struct timespec tick = {0, 10 * 1000000L};
    for (int i = 0; atomic_load(&app->admin_busy) && i < ADMIN_JOB_WAIT_MS / 10; i++)
        nanosleep(&tick, NULL);
    if (atomic_load(&app->admin_busy))
        log_line("level=warn event=shutdown msg=\"an admin job is still running; stopping anyway\"");
    webhooks_stop(app->webhooks);  /* a batch in flight stays pending in the store: sent again at the next start */
    trending_stop(app->trending);  /* persists its open buckets through the writer */
    features_close(app->features); /* its heartbeat goes through the writer */
    for (size_t k = 0; k < app->nshards; k++)
        writer_stop(app->shard[k].writer);
    userfold_free(user_fold);
    user_fold = NULL;
    policies_close(app->policies);
    for (size_t k = 0; k < app->nshards; k++)
        voids_close(app->shard[k].voids);
    for (size_t k = 0; k < app->nshards; k++)
        feed_free(app->shard[k].feed);
    readers_free(app->readers);
    shards_close(app->shards);
}

int main(int argc, char **argv)
{
    static options_t o;
    static app_t app;
    static auth_keys_t keys = {.lock = PTHREAD_RWLOCK_INITIALIZER};
    static kinds_t kinds;
    static flag_args_t args;
    app.start_time_s = (double)wall_ms() / 1000.0;
    static conf_t conf, reload_conf; /* the start-up file's text stays: options point into it */
    char err[512];
    flag_error_t ferr;
    log_format_t format;
    /* The flags' own errors are in the format asked for on the command line. */
    const char *format_arg = flags_peek(argc, argv, "log-format");
    if (format_arg && log_format_parse(format_arg, &format) == 0)
        log_set_format(format);
    int scanned = flags_scan_args(&tallyd_flagset, argc, argv, &args, &ferr);
    if (scanned > 0)
        return 0;
    /* Kept for the process's life (reloads compare against them): static, so reachable at any exit. */
    static flag_source_t *from;
    static char **running;
    from = calloc(tallyd_flagset.count, sizeof *from);
    running = calloc(tallyd_flagset.count, sizeof *running);
    if (!from || !running) {
        log_line("level=error event=start-failed msg=\"out of memory\"");
        return 1;
    }
    if (scanned < 0 || flags_build(&tallyd_flagset, &args, &o, from, &conf, &ferr) != 0 ||
        tallyd_options_finish(&o, from, &kinds, &ferr) != 0)
        die_flags(&ferr);
    log_set_format(o.log_format);
    for (size_t i = 0; i < tallyd_flagset.count; i++)
        if (!(running[i] = flags_value_text(&tallyd_flagset, &args, &conf, i))) {
            log_line("level=error event=start-failed msg=\"out of memory\"");
            return 1;
        }

    /* Block the stop signals in every thread (the JWKS fetcher's too); main waits for them below. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = auth_setup(&app, &keys, &o);
    if (rc != 0)
        return rc;

    if (!o.store && lmdb_lock_dir(o.data, err, sizeof err) < 0) {
        log_line("level=error event=start-failed msg=\"%s\"", err);
        return 1;
    }
    uint64_t nofile;
    if (fd_limit_or_exit(&o, &nofile) != 0)
        return EXIT_USAGE;
    live_caps_or_exit(&o);
    log_limits(&o, nofile);
    char shown[LISTEN_HOST_MAX + 16], admin_shown[LISTEN_HOST_MAX + 16];
    int listen_fd = listen_on("--listen", o.listen, app.dev_mode, shown, sizeof shown), admin_fd = -1;
    if (listen_fd < 0 || (o.admin_listen && (admin_fd = listen_on("--admin-listen", o.admin_listen, app.dev_mode,
                                                                  admin_shown, sizeof admin_shown)) < 0))
        return 1;
    app.admin_listen = admin_fd >= 0;
    store_t *store;
    store_options_t sopt = {
        .map_size_bytes = o.map_size,
        .row_filter_bytes = o.row_filter,
        .idem_ttl_ms = o.idem_ttl_ms,
        .log_retention_ms = o.log_retention_ms,
        .reaction_mode = o.reaction_mode,
    };
    /* One store per shard (the embedded store and a single database: shard 0 of 1), each opened and
     * its identity written or checked. */
    const char *data_location[] = {o.data};
    const char *const *locations = o.nstores ? o.stores : data_location;
    app.nshards = o.nstores ? o.nstores : 1;
    if (shards_open(locations, app.nshards, &kinds, &sopt, &app.shards, err, sizeof err) != 0) {
        log_line("level=error event=start-failed msg=\"%s\"", err);
        return 1;
    }
    for (size_t k = 0; k < app.nshards; k++)
        app.shard[k] = (app_shard_t){.app = &app, .k = (uint32_t)k, .store = shards_store(app.shards, k)};
    store = shards_store(app.shards, 0);
    static recount_sampler_t *samplers[SHARD_MAX]; /* one per shard */
    openapi_config_t doc = {.kinds = &kinds,
                            .many = strcmp(sopt.reaction_mode, "many") == 0,
                            .dev_mode = app.dev_mode,
                            .admin_listen = admin_fd >= 0,
                            .rate_limited = o.write_rule.rate_per_s > 0,
                            .files = ui_files,
                            .nfiles = ui_files_count};
    static const openapi_access_t list_access[] = {[LIST_ACCESS_ADMIN] = OPENAPI_ACCESS_ADMIN,
                                                   [LIST_ACCESS_OWNER] = OPENAPI_ACCESS_OWNER,
                                                   [LIST_ACCESS_USERS] = OPENAPI_ACCESS_USERS,
                                                   [LIST_ACCESS_PUBLIC] = OPENAPI_ACCESS_PUBLIC};
    doc.route_access[ROUTE_ITEM_REACTIONS] = list_access[o.who_reacted];
    doc.route_access[ROUTE_USER_REACTIONS] = list_access[o.user_reactions];
    if (ui_openapi_render(&app, &doc) != 0) {
        log_line("level=error event=start-failed msg=\"out of memory for the OpenAPI document\"");
        return 1;
    }
    live_http_options_t lopt = {
        .max_streams = o.max_live_streams,
        .max_streams_per_client = o.max_live_streams_per_client,
        .follow = {.interval_ms = o.live_interval_ms, .keepalive_ms = o.live_keepalive_ms},
    };
    if (app_setup(&app, &o, &kinds, store) != 0 || engine_start(&app, &o, samplers) != 0)
        return 1;
    if (live_http_start(&app, &lopt) != 0) { /* before the HTTP threads: a stream may come at once */
        log_line("level=error event=start-failed msg=\"cannot start the live-counts follower\"");
        return 1;
    }
    if (http_start(&app, &o, listen_fd, admin_fd) != 0)
        return 1;
    atomic_store(&app.ready, true);
    if (admin_fd >= 0)
        printf("tallyd: admin listening on http://%s\n", admin_shown);
    printf("tallyd: listening on http://%s\n", shown);
    fflush(stdout);
    char status[640];
    snprintf(status, sizeof status, "serving on http://%s%s%s, %s store%s", shown,
             admin_fd >= 0 ? ", admin on http://" : "", admin_fd >= 0 ? admin_shown : "",
             o.store ? "PostgreSQL" : "embedded", app.dev_mode ? ", development mode" : "");
    /* After the listening line: a supervisor told READY=1 finds what the line announces. */
    sd_notifyf(0, "READY=1\nSTATUS=%s\nMAINPID=%lu", status, (unsigned long)getpid());

    reload_ctx_t reload = {.app = &app,
                           .keys = &keys,
                           .args = &args,
                           .in_force = &o,
                           .from = from,
                           .conf = &reload_conf,
                           .running = running};
    int sig = wait_for_stop(&stop_signals, &reload, status);
    bool passed = features_passed(app.features); /* set before its SIGTERM: stopped, not asked to */
    sd_notify(0, "STOPPING=1\nSTATUS=stopping: finishing the requests in flight");
    log_line("level=info event=shutdown signal=%s", sig == SIGTERM ? "TERM" : "INT");
    shut_down(&app, samplers);
    auth_keys_stop(&keys);
    close(listen_fd);
    if (admin_fd >= 0)
        close(admin_fd);
    tallyd_reload_free(&reload);
    conf_free(&conf);
    free(from);
    return passed ? 1 : 0;
}
