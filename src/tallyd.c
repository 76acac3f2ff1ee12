/* tallyd.c — the server: flags, wiring of store → writer → HTTP, signals, graceful shutdown. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/kinds.h"
#include "core/parse.h"
#include "engine/recount.h"
#include "engine/writer.h"
#include "http/app.h"
#include "http/server.h"
#include "store/store.h"

#define EXIT_USAGE 2
#define LISTEN_BACKLOG 1024
#define DRAIN_TIMEOUT_MS 10000
#define SHUTDOWN_FLUSH_MS 200
#define RECOUNT_SAMPLE_ITEMS 100
#define ADMIN_JOB_WAIT_MS 60000
#define RATE_TABLE_CAPACITY (1u << 20)      /* buckets per limiter: ~24 MiB, whatever the number of users */
#define HTTP_SMALL_BODY_BYTES (8u << 10)    /* h2o's cap for everyone; handlers enforce the contract's 4 KiB */
#define RECOUNT_BODY_MAX_BYTES (256u << 10) /* an admin recount's item list (admin.c) */
#define LARGE_BODIES_IN_FLIGHT 2            /* admitted admin bodies of --import-max-size at once */
#define HEALTH_RESERVED_CONNECTIONS 16      /* past --max-connections, for /healthz and /readyz only */
#define ADMIN_MAX_CONNECTIONS 256           /* the admin listener's own slots */
#define FD_OVERHEAD 128                     /* descriptors besides connections: store, log, threads' queues */

typedef struct {
    const char *listen;
    const char *admin_listen;
    const char *data;
    const char *reactions;
    const char *jwt_secret_file;
    int threads;
    uint64_t idem_ttl_ms;
    uint64_t fold_window_ms;
    uint64_t request_timeout_ms;
    uint64_t map_size;
    uint64_t row_filter;
    uint64_t queue_max;
    uint64_t batch_max;
    uint64_t log_retention_ms;
    uint64_t log_max_bytes;
    uint64_t import_max_bytes;
    uint64_t max_connections;
    bool max_connections_given;
    uint64_t max_header_bytes;
    ratelimit_rule_t write_rule, read_rule;
    double hot_threshold;
    uint64_t trending_capacity;
    uint64_t recount_interval_ms;
    const char *access_log;
    const char *cors[CORS_ORIGINS_MAX];
    int ncors;
} options_t;

static const char usage_text[] =
    "usage: tallyd [flags]\n"
    "\n"
    "  --listen HOST:PORT         address to serve HTTP on; port 0 picks a free port (default 127.0.0.1:8080)\n"
    "  --admin-listen HOST:PORT   a second listener for /v1/admin/..., /v1/changes, /metrics and health;\n"
    "                             the public one then refuses bodies over 8K (default: none)\n"
    "  --data DIR                 the embedded store's directory, created if needed (default ./data)\n"
    "  --reactions LIST           reaction kinds, comma-separated, a-z 0-9 _ (default like,dislike)\n"
    "  --jwt-secret-file FILE     HS256 secrets, one per line (the first signs; all verify); re-read on\n"
    "                             SIGHUP (default: the TALLY_JWT_SECRET environment variable)\n"
    "  --threads N                HTTP threads (default: the number of CPUs)\n"
    "  --idempotency-ttl DUR      how long Idempotency-Key answers are kept: 90s, 15m, 24h (default 24h)\n"
    "  --fold-window DUR          minimum interval between folds of the log into counts (default 0)\n"
    "  --request-timeout DUR      time to read a request and idle keep-alive limit (default 10s)\n"
    "  --queue-max N              writes waiting for the writer at most; past it 503 (default 8192)\n"
    "  --batch-max N              writes per commit at most (default 1024)\n"
    "  --map-size SIZE            virtual size of the store's map, e.g. 256G (default 256G)\n"
    "  --row-filter SIZE          memory for the filter of which (item, user) pairs have a row, so a\n"
    "                             missing row (most viewers on most items) skips the B-tree; about\n"
    "                             10 bits a row; 0 turns it off (default 64M)\n"
    "  --log-retention DUR        keep folded transitions (the change feed) this long (default 24h)\n"
    "  --import-max-size SIZE     largest body POST /v1/admin/import takes, from an admin, as the first\n"
    "                             request of a connection; every other body is refused over 8K (default 16M)\n"
    "  --rate-limit RATE/s[:BURST]  writes per user; burst defaults to twice the rate; off disables it\n"
    "                             (default 20/s:40)\n"
    "  --read-rate-limit RATE/s[:BURST]  reads without a user, per client address (default 200/s:400)\n"
    "  --max-header-size SIZE     request header section at most; past it 431 (default 16K; h2o itself\n"
    "                             refuses more than 100 headers or ~400 KiB)\n"
    "  --max-connections N        open connections at most; past it 503 and close (default 10000)\n"
    "  --cors-origin ORIGIN       allow browser calls from ORIGIN (repeatable; * for any; default none)\n"
    "  --access-log FILE          one line per answer (key=value), appended to FILE; - for stderr (default off)\n"
    "  --recount-interval DUR     recount the 100 most recently written items this often, correcting and\n"
    "                             logging any drift; 0 turns it off (default 5m)\n"
    "  --hot-threshold RATE       transitions per second that make an item hot (default 50)\n"
    "  --trending-capacity K      counters per trending summary; the error bound is events/K (default 512)\n"
    "  --log-max-size SIZE        prune the oldest folded transitions past this size (default 4GiB)\n"
    "  --help                     this text\n"
    "\n"
    "Without TALLY_JWT_SECRET the server runs in development mode: the user is the X-User-Id header,\n"
    "and it only listens on loopback addresses.\n";

static void die_usage(const char *flag, const char *why)
{
    fprintf(stderr, "tallyd: %s: %s\n(see tallyd --help)\n", flag, why);
    exit(EXIT_USAGE);
}

static uint64_t flag_duration(const char *flag, const char *value)
{
    uint64_t ms;
    if (parse_duration_ms(value, &ms) != 0)
        die_usage(flag, "expected a duration such as 250ms, 90s, 15m or 24h");
    return ms;
}

static uint64_t flag_uint(const char *flag, const char *value, uint64_t min, uint64_t max)
{
    uint64_t n;
    if (parse_uint(span_of(value), max, &n) != 0 || n < min)
        die_usage(flag, "expected a whole number in range");
    return n;
}

static void parse_flags(int argc, char **argv, options_t *o)
{
    enum {
        F_LISTEN = 1,
        F_DATA,
        F_REACTIONS,
        F_THREADS,
        F_TTL,
        F_FOLD,
        F_TIMEOUT,
        F_QUEUE,
        F_BATCH,
        F_MAP,
        F_ROW_FILTER,
        F_RETENTION,
        F_LOGMAX,
        F_JWT,
        F_IMPORTMAX,
        F_RATE,
        F_READRATE,
        F_MAXCONN,
        F_CORS,
        F_HOT,
        F_MAXHDR,
        F_RECOUNT,
        F_ACCESSLOG,
        F_TRENDCAP,
        F_ADMIN_LISTEN,
        F_HELP
    };
    static const struct option flags[] = {
        {"listen", required_argument, NULL, F_LISTEN},
        {"data", required_argument, NULL, F_DATA},
        {"reactions", required_argument, NULL, F_REACTIONS},
        {"threads", required_argument, NULL, F_THREADS},
        {"jwt-secret-file", required_argument, NULL, F_JWT},
        {"idempotency-ttl", required_argument, NULL, F_TTL},
        {"fold-window", required_argument, NULL, F_FOLD},
        {"request-timeout", required_argument, NULL, F_TIMEOUT},
        {"queue-max", required_argument, NULL, F_QUEUE},
        {"batch-max", required_argument, NULL, F_BATCH},
        {"map-size", required_argument, NULL, F_MAP},
        {"row-filter", required_argument, NULL, F_ROW_FILTER},
        {"log-retention", required_argument, NULL, F_RETENTION},
        {"log-max-size", required_argument, NULL, F_LOGMAX},
        {"import-max-size", required_argument, NULL, F_IMPORTMAX},
        {"rate-limit", required_argument, NULL, F_RATE},
        {"read-rate-limit", required_argument, NULL, F_READRATE},
        {"max-connections", required_argument, NULL, F_MAXCONN},
        {"cors-origin", required_argument, NULL, F_CORS},
        {"hot-threshold", required_argument, NULL, F_HOT},
        {"max-header-size", required_argument, NULL, F_MAXHDR},
        {"recount-interval", required_argument, NULL, F_RECOUNT},
        {"access-log", required_argument, NULL, F_ACCESSLOG},
        {"trending-capacity", required_argument, NULL, F_TRENDCAP},
        {"admin-listen", required_argument, NULL, F_ADMIN_LISTEN},
        {"help", no_argument, NULL, F_HELP},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", flags, NULL)) != -1) {
        const char *flag = argv[optind - 1];
        switch (c) {
        case F_LISTEN:
            o->listen = optarg;
            break;
        case F_ADMIN_LISTEN:
            o->admin_listen = optarg;
            break;
        case F_DATA:
            o->data = optarg;
            break;
        case F_REACTIONS:
            o->reactions = optarg;
            break;
        case F_JWT:
            o->jwt_secret_file = optarg;
            break;
        case F_THREADS:
            o->threads = (int)flag_uint("--threads", optarg, 1, 64);
            break;
        case F_TTL:
            o->idem_ttl_ms = flag_duration("--idempotency-ttl", optarg);
            if (o->idem_ttl_ms < 1000)
                die_usage("--idempotency-ttl", "must be at least 1s");
            break;
        case F_FOLD:
            o->fold_window_ms = flag_duration("--fold-window", optarg);
            break;
        case F_TIMEOUT:
            o->request_timeout_ms = flag_duration("--request-timeout", optarg);
            if (o->request_timeout_ms < 100)
                die_usage("--request-timeout", "must be at least 100ms");
            break;
        case F_QUEUE:
            o->queue_max = flag_uint("--queue-max", optarg, 1, 1u << 24);
            break;
        case F_BATCH:
            o->batch_max = flag_uint("--batch-max", optarg, 1, 1u << 20);
            break;
        case F_MAP:
            if (parse_size_bytes(optarg, &o->map_size) != 0 || o->map_size < (1u << 24))
                die_usage("--map-size", "expected a size of at least 16M, such as 256G");
            break;
        case F_ROW_FILTER:
            if (parse_size_bytes(optarg, &o->row_filter) != 0 || o->row_filter > (64ull << 30))
                die_usage("--row-filter", "expected a size up to 64G, such as 64M, or 0");
            break;
        case F_RETENTION:
            o->log_retention_ms = flag_duration("--log-retention", optarg);
            break;
        case F_LOGMAX:
            if (parse_size_bytes(optarg, &o->log_max_bytes) != 0 || o->log_max_bytes == 0)
                die_usage("--log-max-size", "expected a size such as 4GiB");
            break;
        case F_IMPORTMAX:
            if (parse_size_bytes(optarg, &o->import_max_bytes) != 0 || o->import_max_bytes > (1ull << 32))
                die_usage("--import-max-size", "expected a size up to 4G, such as 16M");
            break;
        case F_RATE:
            if (ratelimit_parse(optarg, &o->write_rule) != 0)
                die_usage("--rate-limit", "expected RATE/s[:BURST] such as 20/s:40, or off");
            break;
        case F_READRATE:
            if (ratelimit_parse(optarg, &o->read_rule) != 0)
                die_usage("--read-rate-limit", "expected RATE/s[:BURST] such as 200/s:400, or off");
            break;
        case F_MAXCONN:
            o->max_connections = flag_uint("--max-connections", optarg, 1, 1000000);
            o->max_connections_given = true;
            break;
        case F_CORS:
            if (o->ncors == CORS_ORIGINS_MAX)
                die_usage("--cors-origin", "given too many times");
            if (strcmp(optarg, "*") != 0 && strncmp(optarg, "http://", 7) != 0 && strncmp(optarg, "https://", 8) != 0)
                die_usage("--cors-origin", "expected * or an origin such as https://app.example");
            o->cors[o->ncors++] = optarg;
            break;
        case F_MAXHDR:
            if (parse_size_bytes(optarg, &o->max_header_bytes) != 0 || o->max_header_bytes < 1024 ||
                o->max_header_bytes > (1u << 20))
                die_usage("--max-header-size", "expected a size from 1K to 1M, such as 16K");
            break;
        case F_ACCESSLOG:
            o->access_log = optarg;
            break;
        case F_RECOUNT:
            o->recount_interval_ms = flag_duration("--recount-interval", optarg);
            break;
        case F_HOT:
            o->hot_threshold = (double)flag_uint("--hot-threshold", optarg, 1, 10000000);
            break;
        case F_TRENDCAP:
            o->trending_capacity = flag_uint("--trending-capacity", optarg, 16, 65536);
            break;
        case F_HELP:
            fputs(usage_text, stdout);
            exit(0);
        case ':':
            die_usage(flag, "needs a value");
            break;
        default:
            die_usage(flag, "unknown flag");
        }
    }
    if (optind < argc)
        die_usage(argv[optind], "unexpected argument");
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
    if (parse_listen(spec, host, &port) != 0)
        die_usage(flag, "expected HOST:PORT");
    snprintf(port_text, sizeof port_text, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res;
    int rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "tallyd: %s %s: %s\n", flag, spec, gai_strerror(rc));
        return -1;
    }
    if (loopback_only && !addr_is_loopback(res->ai_addr)) {
        fprintf(stderr,
                "tallyd: development mode (no TALLY_JWT_SECRET) only listens on loopback addresses, "
                "not %s\n",
                spec);
        freeaddrinfo(res);
        return -1;
    }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        fprintf(stderr, "tallyd: cannot listen on %s: %s\n", spec, strerror(errno));
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
 * 2); the default is lowered to fit, with a warning. Returns 0, or -1 having said why. */
static int fd_limit_or_exit(options_t *o)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    rlim_t extra = HEALTH_RESERVED_CONNECTIONS + (o->admin_listen ? ADMIN_MAX_CONNECTIONS : 0) + FD_OVERHEAD;
    rlim_t need = (rlim_t)o->max_connections + extra;
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_cur <= extra + 1 || o->max_connections_given) {
        fprintf(stderr,
                "tallyd: --max-connections: %llu connections need %llu file descriptors, but RLIMIT_NOFILE allows "
                "%llu (raise it with ulimit -n or LimitNOFILE=, or lower --max-connections)\n",
                (unsigned long long)o->max_connections, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
        return -1;
    }
    o->max_connections = (uint64_t)(rl.rlim_cur - extra);
    fprintf(stderr,
            "level=warn event=max-connections-lowered max_connections=%llu msg=\"RLIMIT_NOFILE is %llu; raise it to "
            "serve more\"\n",
            (unsigned long long)o->max_connections, (unsigned long long)rl.rlim_cur);
    return 0;
}

/* The writer committed transitions: wake the change feed's long polls and the trending follower. */
static void on_commit(void *arg)
{
    app_t *app = arg;
    feed_notify(app->feed);
    if (app->trending)
        trending_notify(app->trending);
}

int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    options_t o = {
        .listen = "127.0.0.1:8080",
        .data = "./data",
        .reactions = KINDS_DEFAULT,
        .threads = cpus > 0 ? (int)cpus : 1,
        .idem_ttl_ms = 24ull * 3600 * 1000,
        .request_timeout_ms = 10000,
        .map_size = STORE_MAP_SIZE_DEFAULT,
        .row_filter = 64ull << 20,
        .queue_max = WRITER_QUEUE_MAX_DEFAULT,
        .batch_max = WRITER_BATCH_MAX_DEFAULT,
        .log_retention_ms = 24ull * 3600 * 1000,
        .log_max_bytes = 4ull << 30,
        .import_max_bytes = 16u << 20,
        .max_connections = 10000,
        .max_header_bytes = 16u << 10,
        .write_rule = {20, 40},
        .read_rule = {200, 400},
        .hot_threshold = 50,
        .trending_capacity = TRENDING_CAPACITY_DEFAULT,
        .recount_interval_ms = 5 * 60 * 1000,
    };
    parse_flags(argc, argv, &o);
    kinds_t kinds;
    char err[512];
    if (kinds_parse(&kinds, o.reactions, err, sizeof err) != 0)
        die_usage("--reactions", err);
    static app_t app;
    static auth_keys_t keys = {.lock = PTHREAD_RWLOCK_INITIALIZER};
    const char *secret = getenv("TALLY_JWT_SECRET");
    app.dev_mode = !o.jwt_secret_file && !(secret && *secret);
    if (!app.dev_mode) {
        if (auth_keys_load(&keys, o.jwt_secret_file, secret, err, sizeof err) != 0) {
            fprintf(stderr, "tallyd: %s: %s\n", o.jwt_secret_file ? "--jwt-secret-file" : "TALLY_JWT_SECRET", err);
            return o.jwt_secret_file ? EXIT_USAGE : 1;
        }
        app.keys = &keys;
    } else {
        fprintf(stderr, "level=warn event=development-mode msg=\"no TALLY_JWT_SECRET: the user is the X-User-Id "
                        "header; listening on loopback only\"\n");
    }

    /* Block the stop signals in every thread; main waits for them below. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (store_lock_dir(o.data, err, sizeof err) < 0) {
        fprintf(stderr, "tallyd: %s\n", err);
        return 1;
    }
    char shown[LISTEN_HOST_MAX + 16], admin_shown[LISTEN_HOST_MAX + 16];
    if (fd_limit_or_exit(&o) != 0)
        return EXIT_USAGE;
    int listen_fd = listen_on("--listen", o.listen, app.dev_mode, shown, sizeof shown);
    if (listen_fd < 0)
        return 1;
    int admin_fd = -1;
    if (o.admin_listen &&
        (admin_fd = listen_on("--admin-listen", o.admin_listen, app.dev_mode, admin_shown, sizeof admin_shown)) < 0)
        return 1;
    app.admin_listen = o.admin_listen != NULL;
    store_t *store;
    store_options_t sopt = {.map_size_bytes = o.map_size, .row_filter_bytes = o.row_filter};
    if (store_open(o.data, &kinds, &sopt, &store, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "tallyd: %s\n", err);
        return 1;
    }
    writer_options_t wopt = {
        .queue_max = o.queue_max,
        .batch_max = o.batch_max,
        .fold_max = WRITER_FOLD_MAX_DEFAULT,
        .fold_window_ms = o.fold_window_ms,
        .idem_ttl_ms = o.idem_ttl_ms,
        .sweep_max = WRITER_SWEEP_MAX_DEFAULT,
        .log_retention_ms = o.log_retention_ms,
        .log_max_bytes = o.log_max_bytes,
    };
    app.kinds = &kinds;
    app.store = store;
    app.data_dir = o.data;
    app.write_limit = ratelimit_new(o.write_rule, RATE_TABLE_CAPACITY);
    app.read_limit = ratelimit_new(o.read_rule, RATE_TABLE_CAPACITY);
    for (int i = 0; i < o.ncors; i++)
        app.cors_origins[i] = o.cors[i];
    app.ncors = o.ncors;
    app.max_header_bytes = o.max_header_bytes;
    if (o.access_log) {
        app.access_log = strcmp(o.access_log, "-") == 0 ? stderr : fopen(o.access_log, "a");
        if (!app.access_log) {
            fprintf(stderr, "tallyd: --access-log %s: %s\n", o.access_log, strerror(errno));
            return 1;
        }
        setvbuf(app.access_log, NULL, _IOLBF, 0);
    }
    if (feed_start(store, &app.feed) != 0) {
        fprintf(stderr, "tallyd: cannot start the change feed thread\n");
        return 1;
    }
    wopt.on_commit = on_commit;
    wopt.on_commit_arg = &app;
    if (writer_start(store, &kinds, &wopt, &app.writer) != 0) {
        fprintf(stderr, "tallyd: cannot start the writer thread\n");
        return 1;
    }
    trending_options_t topt = {.capacity = o.trending_capacity, .hot_threshold = o.hot_threshold};
    if (trending_start(store, app.writer, &kinds, &topt, &app.trending) != 0) {
        fprintf(stderr, "tallyd: cannot start trending\n");
        return 1;
    }
    recount_sampler_t *sampler;
    if (recount_sampler_start(store, app.writer, o.recount_interval_ms, RECOUNT_SAMPLE_ITEMS, &sampler) != 0) {
        fprintf(stderr, "tallyd: cannot start the periodic recount\n");
        return 1;
    }
    size_t large_limit = o.import_max_bytes > RECOUNT_BODY_MAX_BYTES ? o.import_max_bytes : RECOUNT_BODY_MAX_BYTES;
    http_server_config_t hcfg = {
        .listen_fd = listen_fd,
        .admin_listen = admin_fd >= 0,
        .admin_fd = admin_fd,
        .threads = o.threads,
        .small_body_bytes = HTTP_SMALL_BODY_BYTES,
        .max_body_bytes = large_limit,
        .large_body_budget = LARGE_BODIES_IN_FLIGHT * large_limit,
        .request_timeout_ms = o.request_timeout_ms,
        .handler = app_handle,
        .on_respond = app_on_respond,
        .admits_large_body = app_admits_large_body,
        .max_connections = o.max_connections,
        .health_reserve = HEALTH_RESERVED_CONNECTIONS,
        .admin_max_connections = ADMIN_MAX_CONNECTIONS,
        .app = &app,
    };
    if (http_server_start(&hcfg) != 0) {
        fprintf(stderr, "tallyd: cannot start the HTTP threads\n");
        return 1;
    }
    atomic_store(&app.ready, true);
    if (admin_fd >= 0)
        printf("tallyd: admin listening on http://%s\n", admin_shown);
    printf("tallyd: listening on http://%s\n", shown);
    fflush(stdout);

    int sig = 0;
    for (;;) {
        sigwait(&stop_signals, &sig);
        if (sig != SIGHUP)
            break;
        if (!o.jwt_secret_file)
            fprintf(stderr, "level=info event=sighup msg=\"nothing to reload\"\n");
        else if (auth_keys_load(&keys, o.jwt_secret_file, NULL, err, sizeof err) != 0)
            fprintf(stderr, "level=error event=secrets-reload error=\"%s\" msg=\"keeping the secrets in force\"\n",
                    err);
        else
            fprintf(stderr, "level=info event=secrets-reloaded count=%d\n", keys.count);
    }
    fprintf(stderr, "level=info event=shutdown signal=%s\n", sig == SIGTERM ? "TERM" : "INT");
    atomic_store(&app.ready, false);
    atomic_store(&app.draining, true);
    http_server_stop_accepting();
    feed_stop(app.feed); /* long polls are answered at once */
    size_t left = http_server_drain(DRAIN_TIMEOUT_MS);
    if (left)
        fprintf(stderr, "level=warn event=shutdown-drain unanswered=%zu\n", left);
    const struct timespec flush = {0, SHUTDOWN_FLUSH_MS * 1000000L};
    nanosleep(&flush, NULL); /* the loops keep running: the last answers leave their sockets */
    http_server_stop();
    recount_sampler_stop(sampler);
    /* A long admin job (import, recount, erase) still needs the writer and the store. */
    const struct timespec tick = {0, 10 * 1000000L};
    for (int i = 0; atomic_load(&app.admin_busy) && i < ADMIN_JOB_WAIT_MS / 10; i++)
        nanosleep(&tick, NULL);
    if (atomic_load(&app.admin_busy))
        fprintf(stderr, "level=warn event=shutdown msg=\"an admin job is still running; stopping anyway\"\n");
    trending_stop(app.trending); /* persists its open buckets through the writer */
    writer_stop(app.writer);
    feed_free(app.feed);
    store_close(store);
    close(listen_fd);
    if (admin_fd >= 0)
        close(admin_fd);
    return 0;
}
