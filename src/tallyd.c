/* tallyd.c — the server: flags, wiring of store → writer → HTTP, signals, graceful shutdown. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
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

#include "core/kinds.h"
#include "core/netallow.h"
#include "core/parse.h"
#include "engine/recount.h"
#include "engine/webhooks.h"
#include "engine/writer.h"
#include "http/app.h"
#include "http/live.h"
#include "http/server.h"
#include "http/ui.h"
#include "store/lmdb/lmdb.h"
#include "store/store.h"

#define EXIT_USAGE 2
#define LISTEN_BACKLOG 1024
#define DRAIN_TIMEOUT_MS 10000
#define SHUTDOWN_FLUSH_MS 200
#define LIVE_END_WAIT_MS 2000 /* live streams that will not end cleanly (clients not reading) are dropped at half */
#define RECOUNT_SAMPLE_ITEMS 100
#define ADMIN_JOB_WAIT_MS 60000
#define RATE_TABLE_CAPACITY (1u << 20)      /* buckets per limiter: ~24 MiB, whatever the number of users */
#define HTTP_SMALL_BODY_BYTES (8u << 10)    /* h2o's cap for everyone; handlers enforce the contract's 4 KiB */
#define RECOUNT_BODY_MAX_BYTES (256u << 10) /* an admin recount's item list (admin.c) */
#define LARGE_BODIES_IN_FLIGHT 2            /* admitted admin bodies of --import-max-size at once */
#define HEALTH_RESERVED_CONNECTIONS 16      /* past --max-connections, for /healthz and /readyz only */
#define ADMIN_MAX_CONNECTIONS 256           /* the admin listener's own slots */
#define FD_OVERHEAD 128                     /* descriptors besides connections: store, log, threads' queues */
#define HELP_COLUMN 29                      /* where a flag's help text starts in --help */
#define STR(x) STR_(x)
#define STR_(x) #x

/* Every flag's value, filled from the defaults of the flag table, then from the command line. */
typedef struct {
    const char *listen;
    const char *admin_listen;
    const char *data;
    const char *store; /* --store URI; NULL: the embedded store in data */
    const char *reactions;
    const char *reaction_mode;
    const char *jwt_secret_file;
    const char *jwt_keys, *jwt_jwks_url, *jwt_issuer, *jwt_audience, *jwt_user_claim, *jwt_admin_claim;
    uint64_t jwt_jwks_refresh_ms;
    uint64_t threads; /* 0: the number of CPUs */
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
    uint64_t hot_threshold;
    uint64_t trending_capacity;
    uint64_t recount_interval_ms;
    uint64_t live_interval_ms, live_keepalive_ms;
    uint64_t max_live_streams, max_live_streams_per_client;
    bool max_live_streams_given;
    const char *access_log;
    const char *cors[CORS_ORIGINS_MAX];
    int ncors;
    netallow_t webhook_allow;
    uint64_t webhook_timeout_ms, webhook_backoff_min_ms, webhook_backoff_max_ms, webhook_secret_overlap_ms;
    list_access_t who_reacted, user_reactions;
} options_t;

typedef struct flag flag_t;

/* Parses value into dest (a field of options_t) within the flag's bounds. Returns NULL, or why the
 * value is refused (a static or flag-owned string). */
typedef const char *(*flag_set_fn)(const flag_t *f, const char *value, void *dest);

/* One flag: adding a flag is one line of flags[] below (and its field in options_t). */
struct flag {
    const char *name; /* "--listen" */
    const char *arg;  /* what --help shows for the value ("HOST:PORT"); NULL: the flag takes none */
    const char *def;  /* the default, parsed by set like a given value; NULL: none (or said in help) */
    const char *help; /* lines separated by \n; --help appends the default */
    flag_set_fn set;
    size_t offset;     /* of the value in options_t */
    uint64_t min, max; /* bounds of numbers, sizes and durations */
    const char *why;   /* the message for a refused value (the setters' own when NULL) */
};

static const char *set_string(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    *(const char **)dest = value;
    return NULL;
}

static const char *set_listen(const flag_t *f, const char *value, void *dest)
{
    char host[LISTEN_HOST_MAX + 1];
    uint16_t port;
    if (parse_listen(value, host, &port) != 0)
        return f->why ? f->why : "expected HOST:PORT";
    *(const char **)dest = value;
    return NULL;
}

static const char *set_uint(const flag_t *f, const char *value, void *dest)
{
    uint64_t n;
    if (parse_uint(span_of(value), f->max, &n) != 0 || n < f->min)
        return f->why ? f->why : "expected a whole number in range";
    *(uint64_t *)dest = n;
    return NULL;
}

static const char *set_duration(const flag_t *f, const char *value, void *dest)
{
    uint64_t ms;
    if (parse_duration_ms(value, &ms) != 0)
        return "expected a duration such as 250ms, 90s, 15m or 24h";
    if (ms < f->min)
        return f->why;
    *(uint64_t *)dest = ms;
    return NULL;
}

static const char *set_size(const flag_t *f, const char *value, void *dest)
{
    uint64_t bytes;
    if (parse_size_bytes(value, &bytes) != 0 || bytes < f->min || bytes > f->max)
        return f->why;
    *(uint64_t *)dest = bytes;
    return NULL;
}

static const char *set_rate(const flag_t *f, const char *value, void *dest)
{
    return ratelimit_parse(value, dest) == 0 ? NULL : f->why;
}

static const char *set_mode(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    if (strcmp(value, "one") != 0 && strcmp(value, "many") != 0)
        return "expected one or many";
    *(const char **)dest = value;
    return NULL;
}

/* --who-reacted admin|users|public, --user-reactions owner|users|public: f->why lists the words. */
static const char *set_access(const flag_t *f, const char *value, void *dest)
{
    static const struct {
        const char *word;
        list_access_t access;
    } words[] = {{"admin", LIST_ACCESS_ADMIN},
                 {"owner", LIST_ACCESS_OWNER},
                 {"users", LIST_ACCESS_USERS},
                 {"public", LIST_ACCESS_PUBLIC}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        /* each flag takes its own first word (admin or owner) and the two shared ones */
        if (strcmp(value, words[i].word) == 0 && strstr(f->why, value)) {
            *(list_access_t *)dest = words[i].access;
            return NULL;
        }
    }
    return f->why;
}

static const char *set_store(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    if (!store_location_is_url(value))
        return "expected a postgresql:// (or postgres://) URI";
    *(const char **)dest = value;
    return NULL;
}

static const char *set_cors(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    options_t *o = (options_t *)((char *)dest - offsetof(options_t, cors));
    if (o->ncors == CORS_ORIGINS_MAX)
        return "given too many times";
    if (strcmp(value, "*") != 0 && strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0)
        return "expected * or an origin such as https://app.example";
    o->cors[o->ncors++] = value;
    return NULL;
}

static const char *set_allow(const flag_t *f, const char *value, void *dest)
{
    static char why[160];
    (void)f;
    return netallow_parse(dest, value, why, sizeof why) == 0 ? NULL : why;
}

#define OPT(field) offsetof(options_t, field)
#define DATA_DIR_DEFAULT "./data"
#define DAY_MS (24ull * 3600 * 1000)

/* Fields left out of a line are zero (no bounds, the setter's own message). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const flag_t flags[] = {
    {"--listen", "HOST:PORT", "127.0.0.1:8080", "address to serve HTTP on; port 0 picks a free port", set_listen,
     OPT(listen)},
    {"--admin-listen", "HOST:PORT", NULL,
     "a second listener for /v1/admin/..., /v1/changes, /metrics and health;\n"
     "the public one then refuses bodies over 8K (default: none)",
     set_listen, OPT(admin_listen)},
    {"--data", "DIR", NULL, "the embedded store's directory, created if needed (default ./data)", set_string,
     OPT(data)},
    {"--store", "URI", NULL,
     "keep everything in PostgreSQL instead: postgresql://user@host/db?...\n"
     "(libpq's URI; PG* variables and ~/.pgpass apply; not with --data)",
     set_store, OPT(store)},
    {"--reactions", "LIST", KINDS_DEFAULT, "reaction kinds, comma-separated, a-z 0-9 _", set_string, OPT(reactions)},
    {"--reaction-mode", "one|many", "one",
     "one: a user holds one kind per item; many: any set of kinds\n(a store of one mode may be reopened in many)",
     set_mode, OPT(reaction_mode)},
    {"--jwt-secret-file", "FILE", NULL,
     "HS256 secrets, one per line (the first signs; all verify); re-read on\n"
     "SIGHUP (default: the TALLY_JWT_SECRET environment variable)",
     set_string, OPT(jwt_secret_file)},
    {"--jwt-keys", "FILE", NULL,
     "public keys of an identity provider, a JWK Set (RS256, PS256, ES256,\n"
     "EdDSA); needs --jwt-issuer and --jwt-audience (default none)",
     set_string, OPT(jwt_keys)},
    {"--jwt-jwks-url", "URL", NULL,
     "fetch the JWK Set from this https:// URL (http:// to loopback only) at\n"
     "start, every --jwt-jwks-refresh, and on an unknown kid (at most every\n"
     "30s); needs --jwt-issuer and --jwt-audience (default none)",
     set_string, OPT(jwt_jwks_url)},
    {"--jwt-jwks-refresh", "DUR", AUTH_JWKS_REFRESH_DEFAULT, "fetch --jwt-jwks-url again this often", set_duration,
     OPT(jwt_jwks_refresh_ms), 1000, 0, "must be at least 1s"},
    {"--jwt-issuer", "ISS", NULL, "tokens' iss must equal ISS (default: not checked)", set_string, OPT(jwt_issuer)},
    {"--jwt-audience", "AUD", NULL, "tokens' aud (string or array) must contain AUD (default: not checked)", set_string,
     OPT(jwt_audience)},
    {"--jwt-user-claim", "NAME", JWT_DEFAULT_USER_CLAIM, "the claim that names the user (a dotted path for nested)",
     set_string, OPT(jwt_user_claim)},
    {"--jwt-admin-claim", "NAME=VALUE", JWT_DEFAULT_ADMIN_CLAIM "=" JWT_DEFAULT_ADMIN_VALUE,
     "admin when the claim NAME (a dotted path such as realm_access.roles)\n"
     "is VALUE or an array holding VALUE",
     set_string, OPT(jwt_admin_claim)},
    {"--threads", "N", NULL, "HTTP threads (default: the number of CPUs)", set_uint, OPT(threads), 1, 64},
    {"--idempotency-ttl", "DUR", "24h", "how long Idempotency-Key answers are kept: 90s, 15m, 24h", set_duration,
     OPT(idem_ttl_ms), 1000, 0, "must be at least 1s"},
    {"--fold-window", "DUR", "0", "minimum interval between folds of the log into counts and lists", set_duration,
     OPT(fold_window_ms)},
    {"--request-timeout", "DUR", "10s", "time to read a request and idle keep-alive limit", set_duration,
     OPT(request_timeout_ms), 100, 0, "must be at least 100ms"},
    {"--queue-max", "N", STR(WRITER_QUEUE_MAX_DEFAULT), "writes waiting for the writer at most; past it 503", set_uint,
     OPT(queue_max), 1, 1u << 24},
    {"--batch-max", "N", STR(WRITER_BATCH_MAX_DEFAULT), "writes per commit at most", set_uint, OPT(batch_max), 1,
     1u << 20},
    {"--map-size", "SIZE", "256G", "virtual size of the store's map, e.g. 256G", set_size, OPT(map_size), 1u << 24,
     UINT64_MAX, "expected a size of at least 16M, such as 256G"},
    {"--row-filter", "SIZE", "64M",
     "memory for the filter of which (item, user) pairs have a row, so a\n"
     "missing row (most viewers on most items) skips the B-tree; about\n"
     "10 bits a row; 0 turns it off",
     set_size, OPT(row_filter), 0, 64ull << 30, "expected a size up to 64G, such as 64M, or 0"},
    {"--log-retention", "DUR", "24h", "keep folded transitions (the change feed) this long", set_duration,
     OPT(log_retention_ms)},
    {"--log-max-size", "SIZE", "4GiB", "prune the oldest folded transitions past this size", set_size,
     OPT(log_max_bytes), 1, UINT64_MAX, "expected a size such as 4GiB"},
    {"--import-max-size", "SIZE", "16M",
     "largest body POST /v1/admin/import takes, from an admin, as the first\n"
     "request of a connection; every other body is refused over 8K",
     set_size, OPT(import_max_bytes), 0, 1ull << 32, "expected a size up to 4G, such as 16M"},
    {"--rate-limit", "RATE/s[:BURST]", "20/s:40", "writes per user; burst defaults to twice the rate; off disables it",
     set_rate, OPT(write_rule), 0, 0, "expected RATE/s[:BURST] such as 20/s:40, or off"},
    {"--read-rate-limit", "RATE/s[:BURST]", "200/s:400", "reads without a user, per client address", set_rate,
     OPT(read_rule), 0, 0, "expected RATE/s[:BURST] such as 200/s:400, or off"},
    {"--max-header-size", "SIZE", "16K",
     "request header section at most; past it 431 (h2o itself refuses\n"
     "more than 100 headers or ~400 KiB)",
     set_size, OPT(max_header_bytes), 1024, 1u << 20, "expected a size from 1K to 1M, such as 16K"},
    {"--max-connections", "N", "10000",
     "open connections at most; past it 503 and close (16 more for health\n"
     "checks); lowered to fit RLIMIT_NOFILE when not given",
     set_uint, OPT(max_connections), 1, 1000000},
    {"--cors-origin", "ORIGIN", NULL, "allow browser calls from ORIGIN (repeatable; * for any; default none)", set_cors,
     OPT(cors)},
    {"--access-log", "FILE", NULL, "one line per answer (key=value), appended to FILE; - for stderr (default off)",
     set_string, OPT(access_log)},
    {"--recount-interval", "DUR", "5m",
     "recount the 100 most recently written items this often, correcting and\n"
     "logging any drift; 0 turns it off",
     set_duration, OPT(recount_interval_ms)},
    {"--hot-threshold", "RATE", "50", "transitions per second that make an item hot", set_uint, OPT(hot_threshold), 1,
     10000000},
    {"--trending-capacity", "K", STR(TRENDING_CAPACITY_DEFAULT),
     "counters per trending summary; the error bound is events/K", set_uint, OPT(trending_capacity), 16, 65536},
    {"--webhook-allow", "CIDR[,CIDR...]", NULL,
     "let webhooks reach these ranges too; by default loopback, link-local,\n"
     "private and unique-local addresses are refused (default none)",
     set_allow, OPT(webhook_allow)},
    {"--webhook-timeout", "DUR", "10s", "a delivery counts when answered 2xx within this", set_duration,
     OPT(webhook_timeout_ms), 100, 0, "must be at least 100ms"},
    {"--webhook-backoff-min", "DUR", "1s", "first retry of a failed delivery after this (doubling)", set_duration,
     OPT(webhook_backoff_min_ms), 10, 0, "must be at least 10ms"},
    {"--webhook-backoff-max", "DUR", "5m", "retries of a failed delivery at most this far apart", set_duration,
     OPT(webhook_backoff_max_ms), 10, 0, "must be at least 10ms"},
    {"--webhook-secret-overlap", "DUR", "24h", "after a secret rotation the old secret signs too this long",
     set_duration, OPT(webhook_secret_overlap_ms)},
    {"--live-interval", "DUR", "250ms",
     "live streams (GET /v1/live): at most one event per item this often;\n"
     "changes within it are sent as one",
     set_duration, OPT(live_interval_ms), 1, 0, "must be at least 1ms"},
    {"--live-keepalive", "DUR", "15s", "a keep-alive comment on every live stream this often", set_duration,
     OPT(live_keepalive_ms), 1, 0, "must be at least 1ms"},
    {"--max-live-streams", "N", "5000", "open live streams at most (below --max-connections); past it 503", set_uint,
     OPT(max_live_streams), 0, 1000000},
    {"--max-live-streams-per-client", "N", "16", "open live streams per client address at most; past it 503", set_uint,
     OPT(max_live_streams_per_client), 0, 1000000},
    {"--who-reacted", "admin|users|public", "admin",
     "who may list an item's reactors (GET /v1/items/{item}/reactions):\n"
     "admins, any authenticated user, or anyone",
     set_access, OPT(who_reacted), 0, 0, "expected admin, users or public"},
    {"--user-reactions", "owner|users|public", "owner",
     "who may list a user's reactions (GET /v1/users/{user}/reactions):\n"
     "that user and admins, any authenticated user, or anyone",
     set_access, OPT(user_reactions), 0, 0, "expected owner, users or public"},
    {"--help", NULL, NULL, "this text", NULL, 0},
};
#pragma GCC diagnostic pop
#define NFLAGS (sizeof flags / sizeof flags[0])

static void die_usage(const char *flag, const char *why)
{
    fprintf(stderr, "tallyd: %s: %s\n(see tallyd --help)\n", flag, why);
    exit(EXIT_USAGE);
}

/* --help: every flag of the table with its help text and default. */
static void print_help(FILE *out)
{
    fputs("usage: tallyd [flags]\n\n", out);
    for (size_t i = 0; i < NFLAGS; i++) {
        const flag_t *f = &flags[i];
        int n = fprintf(out, "  %s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
        for (const char *line = f->help; line;) {
            const char *nl = strchr(line, '\n');
            int len = nl ? (int)(nl - line) : (int)strlen(line);
            if (n >= HELP_COLUMN - 1) {
                fputc('\n', out);
                n = 0;
            }
            fprintf(out, "%*s%.*s", HELP_COLUMN - n, "", len, line);
            if (!nl && f->def)
                fprintf(out, " (default %s)", f->def);
            fputc('\n', out);
            n = 0;
            line = nl ? nl + 1 : NULL;
        }
    }
    fputs("\nWithout TALLY_JWT_SECRET, --jwt-secret-file, --jwt-keys or --jwt-jwks-url the server runs in\n"
          "development mode: the user is the X-User-Id header, and it only listens on loopback addresses.\n",
          out);
}

static void set_or_die(const flag_t *f, const char *value, options_t *o)
{
    const char *why = f->set(f, value, (char *)o + f->offset);
    if (why)
        die_usage(f->name, why);
}

/* Defaults first (from the table), then the command line; a bad value exits 2 naming the flag. */
static void parse_flags(int argc, char **argv, options_t *o)
{
    struct option longopts[NFLAGS + 1];
    for (size_t i = 0; i < NFLAGS; i++) {
        longopts[i] =
            (struct option){flags[i].name + 2, flags[i].arg ? required_argument : no_argument, NULL, (int)i + 1};
        if (flags[i].def)
            set_or_die(&flags[i], flags[i].def, o);
    }
    longopts[NFLAGS] = (struct option){NULL, 0, NULL, 0};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        const char *given = argv[optind - 1];
        if (c == ':')
            die_usage(given, "needs a value");
        if (c < 1 || c > (int)NFLAGS)
            die_usage(given, "unknown flag");
        const flag_t *f = &flags[c - 1];
        if (!f->set) { /* --help */
            print_help(stdout);
            exit(0);
        }
        set_or_die(f, optarg, o);
        if (f->offset == OPT(max_connections))
            o->max_connections_given = true;
        if (f->offset == OPT(max_live_streams))
            o->max_live_streams_given = true;
    }
    if (optind < argc)
        die_usage(argv[optind], "unexpected argument");
    if (o->threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = cpus > 0 ? (uint64_t)cpus : 1;
    }
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

/* Live streams hold connections: their cap must leave room below --max-connections for everything
 * else. A cap given is refused (exit 2) when it does not; the default is lowered to half. */
static void live_caps_or_exit(options_t *o)
{
    if (o->max_live_streams < o->max_connections)
        return;
    if (o->max_live_streams_given) {
        char why[160];
        snprintf(why, sizeof why, "must be below --max-connections (%llu)", (unsigned long long)o->max_connections);
        die_usage("--max-live-streams", why);
    }
    o->max_live_streams = o->max_connections / 2;
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

/* The writer committed transitions: wake the change feed's long polls and the trending follower. */
static void on_commit(void *arg)
{
    app_t *app = arg;
    feed_notify(app->feed);
    if (app->trending)
        trending_notify(app->trending);
    webhooks_notify(app->webhooks);
}

/* Where tokens' keys come from, and the claim rules, from the flags and the environment. */
static auth_config_t auth_config(const options_t *o)
{
    const char *secret = getenv("TALLY_JWT_SECRET");
    return (auth_config_t){
        .secret_file = o->jwt_secret_file,
        .secret = o->jwt_secret_file || !secret || !*secret ? NULL : secret,
        .keys_file = o->jwt_keys,
        .jwks_url = o->jwt_jwks_url,
        .jwks_refresh_ms = o->jwt_jwks_refresh_ms,
        .issuer = o->jwt_issuer,
        .audience = o->jwt_audience,
        .user_claim = o->jwt_user_claim,
        .admin_claim = o->jwt_admin_claim,
    };
}

/* Development mode, or the keys tokens are verified with. Returns 0, or exit status 2 having said
 * why (a weak TALLY_JWT_SECRET is a bad value too). */
static int auth_setup(app_t *app, auth_keys_t *keys, const options_t *o)
{
    char err[1536];
    const char *flag = NULL;
    auth_config_t cfg = auth_config(o);
    app->dev_mode = !auth_config_token_mode(&cfg);
    if (app->dev_mode) {
        fprintf(stderr, "level=warn event=development-mode msg=\"no TALLY_JWT_SECRET: the user is the X-User-Id "
                        "header; listening on loopback only\"\n");
        return 0;
    }
    if (auth_keys_reload(keys, &cfg, &flag, err, sizeof err) != 0) {
        fprintf(stderr, "tallyd: %s: %s\n", flag, err);
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
    if (ratelimit_new(o->write_rule, RATE_TABLE_CAPACITY, &app->write_limit) != 0 ||
        ratelimit_new(o->read_rule, RATE_TABLE_CAPACITY, &app->read_limit) != 0) {
        fprintf(stderr, "tallyd: out of memory for the rate limits\n");
        return -1;
    }
    for (int i = 0; i < o->ncors; i++)
        app->cors_origins[i] = o->cors[i];
    app->ncors = o->ncors;
    app->max_header_bytes = o->max_header_bytes;
    app->who_reacted = o->who_reacted;
    app->user_reactions = o->user_reactions;
    if (o->access_log) {
        app->access_log = strcmp(o->access_log, "-") == 0 ? stderr : fopen(o->access_log, "a");
        if (!app->access_log) {
            fprintf(stderr, "tallyd: --access-log %s: %s\n", o->access_log, strerror(errno));
            return -1;
        }
        setvbuf(app->access_log, NULL, _IOLBF, 0);
    }
    return 0;
}

/* The feed, the writer, trending and the periodic recount. Returns 0, or -1 having said why. */
static int engine_start(app_t *app, const options_t *o, recount_sampler_t **sampler)
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
        .on_commit_arg = app,
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
    if (store_shared(app->store) && readers_start(READERS_THREADS_DEFAULT, READERS_QUEUE_MAX, &app->readers) != 0)
        what = "the reader threads";
    else if (feed_start(app->store, &app->feed) != 0)
        what = "the change feed thread";
    else if (writer_start(app->store, app->kinds, &wopt, &app->writer) != 0)
        what = "the writer thread";
    else if (trending_start(app->store, app->writer, app->kinds, &topt, &app->trending) != 0)
        what = "trending";
    else if (recount_sampler_start(app->store, app->writer, o->recount_interval_ms, RECOUNT_SAMPLE_ITEMS, sampler) != 0)
        what = "the periodic recount";
    else if (webhooks_start(app->store, app->writer, app->kinds, &hopt, &app->webhooks) != 0)
        what = "webhook delivery";
    if (what)
        fprintf(stderr, "tallyd: cannot start %s\n", what);
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
        fprintf(stderr, "tallyd: cannot start the HTTP threads\n");
        return -1;
    }
    return 0;
}

/* Waits for SIGTERM or SIGINT, re-reading the secrets and the key file on each SIGHUP. Returns the
 * signal. */
static int wait_for_stop(const sigset_t *stop_signals, const options_t *o, auth_keys_t *keys, bool dev_mode)
{
    char err[1536];
    const char *flag = NULL;
    int sig = 0;
    for (;;) {
        sigwait(stop_signals, &sig);
        if (sig != SIGHUP)
            return sig;
        auth_config_t cfg = auth_config(o);
        if (dev_mode || (!o->jwt_secret_file && !o->jwt_keys))
            fprintf(stderr, "level=info event=sighup msg=\"nothing to reload\"\n");
        else if (auth_keys_reload(keys, &cfg, &flag, err, sizeof err) != 0)
            fprintf(stderr, "level=error event=secrets-reload flag=%s error=\"%s\" msg=\"keeping the keys in force\"\n",
                    flag, err);
        else
            fprintf(stderr, "level=info event=secrets-reloaded count=%d\n", keys->count);
    }
}

/* Stop accepting, answer what is in flight, then stop the engine and close the store. */
static void shut_down(app_t *app, recount_sampler_t *sampler)
{
    atomic_store(&app->ready, false);
    atomic_store(&app->draining, true);
    http_server_stop_accepting();
    live_http_end_all();  /* no more live updates; every stream ends once what it was sent has left */
    feed_stop(app->feed); /* long polls are answered at once */
    size_t left = http_server_drain(DRAIN_TIMEOUT_MS);
    if (left)
        fprintf(stderr, "level=warn event=shutdown-drain unanswered=%zu\n", left);
    readers_stop(app->readers); /* what is queued is answered while the loops still run */
    const struct timespec flush = {0, SHUTDOWN_FLUSH_MS * 1000000L};
    nanosleep(&flush, NULL); /* the loops keep running: the last answers leave their sockets */
    size_t streams_left = live_http_wait_ended(LIVE_END_WAIT_MS); /* the loops still run for them */
    if (streams_left)
        fprintf(stderr, "level=warn event=shutdown-live-streams left=%zu\n", streams_left);
    http_server_stop();
    live_http_stop();
    recount_sampler_stop(sampler);
    /* A long admin job (import, recount, erase) still needs the writer and the store. */
    const struct timespec tick = {0, 10 * 1000000L};
    for (int i = 0; atomic_load(&app->admin_busy) && i < ADMIN_JOB_WAIT_MS / 10; i++)
        nanosleep(&tick, NULL);
    if (atomic_load(&app->admin_busy))
        fprintf(stderr, "level=warn event=shutdown msg=\"an admin job is still running; stopping anyway\"\n");
    webhooks_stop(app->webhooks); /* a batch in flight stays pending in the store: sent again at the next start */
    trending_stop(app->trending); /* persists its open buckets through the writer */
    writer_stop(app->writer);
    feed_free(app->feed);
    readers_free(app->readers);
    store_close(app->store);
}

int main(int argc, char **argv)
{
    static options_t o;
    static app_t app;
    static auth_keys_t keys = {.lock = PTHREAD_RWLOCK_INITIALIZER};
    static kinds_t kinds;
    char err[512];
    parse_flags(argc, argv, &o);
    if (o.store && o.data)
        die_usage("--store", "give either --data or --store, not both");
    if (o.webhook_backoff_max_ms < o.webhook_backoff_min_ms)
        die_usage("--webhook-backoff-max", "must be at least --webhook-backoff-min");
    if (!o.store && !o.data)
        o.data = DATA_DIR_DEFAULT;
    if (kinds_parse(&kinds, o.reactions, err, sizeof err) != 0)
        die_usage("--reactions", err);
    kinds.mode = strcmp(o.reaction_mode, "many") == 0 ? REACTION_MODE_MANY : REACTION_MODE_ONE;

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
        fprintf(stderr, "tallyd: %s\n", err);
        return 1;
    }
    if (fd_limit_or_exit(&o) != 0)
        return EXIT_USAGE;
    live_caps_or_exit(&o);
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
    if (store_open(o.store ? o.store : o.data, &kinds, &sopt, &store, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "tallyd: %s\n", err);
        return 1;
    }
    recount_sampler_t *sampler;
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
        fprintf(stderr, "tallyd: out of memory for the OpenAPI document\n");
        return 1;
    }
    live_http_options_t lopt = {
        .max_streams = o.max_live_streams,
        .max_streams_per_client = o.max_live_streams_per_client,
        .follow = {.interval_ms = o.live_interval_ms, .keepalive_ms = o.live_keepalive_ms},
    };
    if (app_setup(&app, &o, &kinds, store) != 0 || engine_start(&app, &o, &sampler) != 0)
        return 1;
    if (live_http_start(&app, &lopt) != 0) { /* before the HTTP threads: a stream may come at once */
        fprintf(stderr, "tallyd: cannot start the live-counts follower\n");
        return 1;
    }
    if (http_start(&app, &o, listen_fd, admin_fd) != 0)
        return 1;
    atomic_store(&app.ready, true);
    if (admin_fd >= 0)
        printf("tallyd: admin listening on http://%s\n", admin_shown);
    printf("tallyd: listening on http://%s\n", shown);
    fflush(stdout);

    int sig = wait_for_stop(&stop_signals, &o, &keys, app.dev_mode);
    fprintf(stderr, "level=info event=shutdown signal=%s\n", sig == SIGTERM ? "TERM" : "INT");
    shut_down(&app, sampler);
    auth_keys_stop(&keys);
    close(listen_fd);
    if (admin_fd >= 0)
        close(admin_fd);
    return 0;
}
