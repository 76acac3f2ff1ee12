/* tallyd_flags.c — tallyd's flags: one row each (name, value, default, help, setter, field of
 * options_t), read by the command line, --config, --help and SIGHUP alike. */
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "core/kinds.h"
#include "core/parse.h"
#include "engine/export.h"
#include "engine/trending.h"
#include "engine/writer.h"
#include "store/store.h"
#include "tallyd.h"
#include "version.h"

#define STR(x) STR_(x)
#define STR_(x) #x

static const char *set_listen(const flag_t *f, const char *value, void *dest)
{
    char host[LISTEN_HOST_MAX + 1];
    uint16_t port;
    if (parse_listen(value, host, &port) != 0)
        return f->why ? f->why : "expected HOST:PORT";
    *(const char **)dest = value;
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
static const char *set_log_format(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    return log_format_parse(value, dest) == 0 ? NULL : "expected logfmt or json";
}

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

/* Each --store is the next shard's database, in the order given (the same on every node). */
static const char *set_store(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    options_t *o = (options_t *)((char *)dest - offsetof(options_t, store));
    if (!store_location_is_url(value))
        return "expected a postgresql:// (or postgres://) URI";
    if (o->nstores == SHARD_MAX)
        return "given too many times (256 shards at most)";
    o->stores[o->nstores++] = value;
    o->store = o->stores[0];
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

static const char *set_real_ip_header(const flag_t *f, const char *value, void *dest)
{
    return forwarded_kind_parse(value, dest) == 0 ? NULL : f->why;
}

/* A duration of whole seconds, at most f->max seconds (HTTP's max-age counts seconds). */
static const char *set_seconds(const flag_t *f, const char *value, void *dest)
{
    uint64_t ms;
    if (parse_duration_ms(value, &ms) != 0 || ms % 1000 != 0 || ms / 1000 > f->max)
        return f->why;
    *(uint64_t *)dest = ms;
    return NULL;
}

#define OPT(field) offsetof(options_t, field)
#define PUBLIC_MAX_AGE_MAX_S 31536000u /* a year: RFC 9111 §5.2.2.1 leaves larger values to caches */
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
    {"--data", "DIR", NULL, "the embedded store's directory, created if needed (default ./data)", flag_set_string,
     OPT(data), .group = 1},
    {"--store", "URI", NULL,
     "keep everything in PostgreSQL instead: postgresql://user@host/db?...\n"
     "(libpq's URI; PG* variables and ~/.pgpass apply; not with --data);\n"
     "repeatable: one per shard, in the same order on every node",
     set_store, OPT(store), .group = 1, .opts = FLAG_REPEATS},
    {"--reactions", "LIST", KINDS_DEFAULT, "reaction kinds, comma-separated, a-z 0-9 _", flag_set_string,
     OPT(reactions)},
    {"--reaction-mode", "one|many", "one",
     "one: a user holds one kind per item; many: any set of kinds\n(a store of one mode may be reopened in many)",
     set_mode, OPT(reaction_mode)},
    {"--jwt-secret-file", "FILE", NULL,
     "HS256 secrets, one per line (the first signs; all verify), read again\n"
     "on every SIGHUP (default: the TALLY_JWT_SECRET environment variable)",
     flag_set_string, OPT(jwt_secret_file), .opts = FLAG_RELOADS},
    {"--jwt-keys", "FILE", NULL,
     "public keys of an identity provider, a JWK Set (RS256, PS256, ES256,\n"
     "EdDSA); needs --jwt-issuer and --jwt-audience (default none)",
     flag_set_string, OPT(jwt_keys), .opts = FLAG_RELOADS},
    {"--jwt-jwks-url", "URL", NULL,
     "fetch the JWK Set from this https:// URL (http:// to loopback only) at\n"
     "start, every --jwt-jwks-refresh, and on an unknown kid (at most every\n"
     "30s); needs --jwt-issuer and --jwt-audience (default none)",
     flag_set_string, OPT(jwt_jwks_url), .opts = FLAG_RELOADS},
    {"--jwt-jwks-refresh", "DUR", AUTH_JWKS_REFRESH_DEFAULT, "fetch --jwt-jwks-url again this often", flag_set_duration,
     OPT(jwt_jwks_refresh_ms), 1000, 0, "must be at least 1s", .opts = FLAG_RELOADS},
    {"--jwt-issuer", "ISS", NULL, "tokens' iss must equal ISS (default: not checked)", flag_set_string, OPT(jwt_issuer),
     .opts = FLAG_RELOADS},
    {"--jwt-audience", "AUD", NULL, "tokens' aud (string or array) must contain AUD (default: not checked)",
     flag_set_string, OPT(jwt_audience), .opts = FLAG_RELOADS},
    {"--jwt-user-claim", "NAME", JWT_DEFAULT_USER_CLAIM, "the claim that names the user (a dotted path for nested)",
     flag_set_string, OPT(jwt_user_claim), .opts = FLAG_RELOADS},
    {"--jwt-admin-claim", "NAME=VALUE", JWT_DEFAULT_ADMIN_CLAIM "=" JWT_DEFAULT_ADMIN_VALUE,
     "admin when the claim NAME (a dotted path such as realm_access.roles)\n"
     "is VALUE or an array holding VALUE",
     flag_set_string, OPT(jwt_admin_claim), .opts = FLAG_RELOADS},
    {"--threads", "N", NULL, "HTTP threads (default: the number of CPUs)", flag_set_uint, OPT(threads), 1, 64},
    {"--idempotency-ttl", "DUR", "24h", "how long Idempotency-Key answers are kept: 90s, 15m, 24h", flag_set_duration,
     OPT(idem_ttl_ms), 1000, 0, "must be at least 1s"},
    {"--fold-window", "DUR", "0", "minimum interval between folds of the log into counts and lists", flag_set_duration,
     OPT(fold_window_ms)},
    {"--request-timeout", "DUR", "10s", "time to read a request and idle keep-alive limit", flag_set_duration,
     OPT(request_timeout_ms), 100, 0, "must be at least 100ms"},
    {"--queue-max", "N", STR(WRITER_QUEUE_MAX_DEFAULT), "writes waiting for the writer at most; past it 503",
     flag_set_uint, OPT(queue_max), 1, 1u << 24},
    {"--batch-max", "N", STR(WRITER_BATCH_MAX_DEFAULT), "writes per commit at most", flag_set_uint, OPT(batch_max), 1,
     1u << 20},
    {"--map-size", "SIZE", "256G", "virtual size of the store's map, e.g. 256G", flag_set_size, OPT(map_size), 1u << 24,
     UINT64_MAX, "expected a size of at least 16M, such as 256G"},
    {"--row-filter", "SIZE", "64M",
     "memory for the filter of which (item, user) pairs have a row, so a\n"
     "missing row (most viewers on most items) skips the B-tree; about\n"
     "10 bits a row; 0 turns it off",
     flag_set_size, OPT(row_filter), 0, 64ull << 30, "expected a size up to 64G, such as 64M, or 0"},
    {"--log-retention", "DUR", "24h", "keep folded transitions (the change feed) this long", flag_set_duration,
     OPT(log_retention_ms)},
    {"--log-max-size", "SIZE", "4GiB", "prune the oldest folded transitions past this size", flag_set_size,
     OPT(log_max_bytes), 1, UINT64_MAX, "expected a size such as 4GiB"},
    {"--import-max-size", "SIZE", "16M",
     "largest body POST /v1/admin/import takes, from an admin, as the first\n"
     "request of a connection; every other body is refused over 8K",
     flag_set_size, OPT(import_max_bytes), 0, 1ull << 32, "expected a size up to 4G, such as 16M"},
    {"--rate-limit", "RATE/s[:BURST]", "20/s:40", "writes per user; burst defaults to twice the rate; off disables it",
     set_rate, OPT(write_rule), 0, 0, "expected RATE/s[:BURST] such as 20/s:40, or off", .opts = FLAG_RELOADS},
    {"--read-rate-limit", "RATE/s[:BURST]", "200/s:400", "reads without a user, per client address", set_rate,
     OPT(read_rule), 0, 0, "expected RATE/s[:BURST] such as 200/s:400, or off", .opts = FLAG_RELOADS},
    {"--max-header-size", "SIZE", "16K",
     "request header section at most; past it 431 (h2o itself refuses\n"
     "more than 100 headers or ~400 KiB)",
     flag_set_size, OPT(max_header_bytes), 1024, 1u << 20, "expected a size from 1K to 1M, such as 16K"},
    {"--max-connections", "N", "10000",
     "open connections at most; past it 503 and close (16 more for health\n"
     "checks); lowered to fit RLIMIT_NOFILE when not given. At 5000 or less,\n"
     "and without --max-live-streams, live streams get half of it",
     flag_set_uint, OPT(max_connections), 1, 1000000},
    {"--cors-origin", "ORIGIN", NULL, "allow browser calls from ORIGIN (repeatable; * for any; default none)", set_cors,
     OPT(cors), .opts = FLAG_RELOADS | FLAG_REPEATS},
    {"--access-log", "FILE", NULL, "one line per answer (key=value), appended to FILE; - for stderr (default off)",
     flag_set_string, OPT(access_log), .opts = FLAG_RELOADS},
    {"--recount-interval", "DUR", "5m",
     "recount the 100 most recently written items this often, correcting and\n"
     "logging any drift; 0 turns it off",
     flag_set_duration, OPT(recount_interval_ms)},
    {"--hot-threshold", "RATE", "50", "transitions per second that make an item hot", flag_set_uint, OPT(hot_threshold),
     1, 10000000},
    {"--trending-capacity", "K", STR(TRENDING_CAPACITY_DEFAULT),
     "counters per trending summary; the error bound is events/K", flag_set_uint, OPT(trending_capacity), 16, 65536},
    {"--trusted-proxies", "CIDR[,CIDR...]", NULL,
     "proxies whose --real-ip-header names the client (right-most address\n"
     "not itself trusted); from any other peer the header is ignored\n"
     "(default none)",
     set_allow, OPT(trusted_proxies), .opts = FLAG_RELOADS},
    {"--real-ip-header", "x-forwarded-for|forwarded", "x-forwarded-for",
     "the one header read from a trusted proxy (Forwarded: RFC 7239)", set_real_ip_header, OPT(real_ip_header), 0, 0,
     "expected x-forwarded-for or forwarded", .opts = FLAG_RELOADS},
    {"--client-prefix-v6", "BITS", "64", "IPv6 clients share per-address limits per prefix of this length",
     flag_set_uint, OPT(client_prefix_v6), 1, 128},
    {"--webhook-allow", "CIDR[,CIDR...]", NULL,
     "let webhooks reach these ranges too; by default loopback, link-local,\n"
     "private and unique-local addresses are refused (default none)",
     set_allow, OPT(webhook_allow)},
    {"--webhook-timeout", "DUR", "10s", "a delivery counts when answered 2xx within this", flag_set_duration,
     OPT(webhook_timeout_ms), 100, 0, "must be at least 100ms", .opts = FLAG_RELOADS},
    {"--webhook-backoff-min", "DUR", "1s", "first retry of a failed delivery after this (doubling)", flag_set_duration,
     OPT(webhook_backoff_min_ms), 10, 0, "must be at least 10ms", .opts = FLAG_RELOADS},
    {"--webhook-backoff-max", "DUR", "5m", "retries of a failed delivery at most this far apart", flag_set_duration,
     OPT(webhook_backoff_max_ms), 10, 0, "must be at least 10ms", .opts = FLAG_RELOADS},
    {"--webhook-secret-overlap", "DUR", "24h", "after a secret rotation the old secret signs too this long",
     flag_set_duration, OPT(webhook_secret_overlap_ms), .opts = FLAG_RELOADS},
    {"--live-interval", "DUR", "250ms",
     "live streams (GET /v1/live): at most one event per item this often;\n"
     "changes within it are sent as one",
     flag_set_duration, OPT(live_interval_ms), 1, 0, "must be at least 1ms"},
    {"--live-keepalive", "DUR", "15s", "a keep-alive comment on every live stream this often", flag_set_duration,
     OPT(live_keepalive_ms), 1, 0, "must be at least 1ms"},
    {"--max-live-streams", "N", "5000",
     "open live streams at most; past it 503. A value given must be below\n"
     "--max-connections; the default becomes half of --max-connections when\n"
     "that is 5000 or less (logged at start)",
     flag_set_uint, OPT(max_live_streams), 0, 1000000},
    {"--max-live-streams-per-client", "N", "16", "open live streams per client address at most; past it 503",
     flag_set_uint, OPT(max_live_streams_per_client), 0, 1000000},
    {"--export-timeout", "DUR", EXPORT_TIMEOUT_DEFAULT,
     "how long an export (GET /v1/admin/export, GET /v1/users/{user}/export)\n"
     "may hold its snapshot of the store; past it the export is cut: its\n"
     "answer ends without the closing line",
     flag_set_duration, OPT(export_timeout_ms), 1, 0, "must be at least 1ms"},
    {"--max-exports", "N", STR(EXPORT_MAX_DEFAULT), "exports running at once at most; past it 503 with Retry-After",
     flag_set_uint, OPT(max_exports), 1, 1000},
    {"--who-reacted", "admin|users|public", "admin",
     "who may list an item's reactors (GET /v1/items/{item}/reactions):\n"
     "admins, any authenticated user, or anyone",
     set_access, OPT(who_reacted), 0, 0, "expected admin, users or public", .opts = FLAG_RELOADS},
    {"--user-reactions", "owner|users|public", "owner",
     "who may list a user's reactions (GET /v1/users/{user}/reactions):\n"
     "that user and admins, any authenticated user, or anyone",
     set_access, OPT(user_reactions), 0, 0, "expected owner, users or public", .opts = FLAG_RELOADS},
    {"--public-max-age", "DUR", "1s",
     "reads without a user (GET /v1/items/{item}, GET /v1/items?ids=) may be\n"
     "cached this long (Cache-Control: public, max-age); 0: no-cache, every\n"
     "use revalidated with the ETag",
     set_seconds, OPT(public_max_age_ms), 0, PUBLIC_MAX_AGE_MAX_S,
     "expected whole seconds up to a year, such as 1s, 30s or 5m", .opts = FLAG_RELOADS},
    {"--log-format", "logfmt|json", "logfmt",
     "every line on standard error (events, the access log, a fatal error):\n"
     "logfmt, or one JSON object a line with ts, level, event and msg",
     set_log_format, OPT(log_format)},
    {"--config", "FILE", NULL,
     "read flags from FILE, one name = value a line (the flag's name without\n"
     "--; # starts a comment); the command line replaces the file's value(s)\n"
     "for a flag; SIGHUP reads it again (default none)",
     flag_set_string, 0, .opts = FLAG_ARGS_ONLY},
    {"--version", NULL, NULL, "print the version and exit", NULL, 0, .opts = FLAG_ARGS_ONLY},
    {"--help", NULL, NULL, "this text", NULL, 0, .opts = FLAG_ARGS_ONLY},
    {"--print-config-template", NULL, NULL,
     "print a configuration file listing every flag, commented out;\n"
     "the flags given with it are set in it",
     NULL, 0, .opts = FLAG_ARGS_ONLY},
};
#pragma GCC diagnostic pop

const flagset_t tallyd_flagset = {
    .program = "tallyd",
    .version = tally_version,
    .flags = flags,
    .count = sizeof flags / sizeof flags[0],
    .opts_size = sizeof(options_t),
    .usage = "usage: tallyd [flags]",
    .footer = "Without TALLY_JWT_SECRET, --jwt-secret-file, --jwt-keys or --jwt-jwks-url the server runs in\n"
              "development mode: the user is the X-User-Id header, and it only listens on loopback addresses.\n",
};

static bool given(const flag_source_t *from, const char *name)
{
    const flag_t *f = flags_find(&tallyd_flagset, name);
    return from && f && from[f - flags] != FLAG_NOT_GIVEN;
}

int tallyd_options_finish(options_t *o, const flag_source_t *from, kinds_t *kinds, flag_error_t *err)
{
    char why[256];
    if (o->store && o->data)
        snprintf(err->msg, sizeof err->msg, "--store: give either --data or --store, not both");
    else if (o->webhook_backoff_max_ms < o->webhook_backoff_min_ms)
        snprintf(err->msg, sizeof err->msg, "--webhook-backoff-max: must be at least --webhook-backoff-min");
    else if (kinds_parse(kinds, o->reactions, why, sizeof why) != 0)
        snprintf(err->msg, sizeof err->msg, "--reactions: %s", why);
    else {
        if (!o->store && !o->data)
            o->data = DATA_DIR_DEFAULT;
        kinds->mode = strcmp(o->reaction_mode, "many") == 0 ? REACTION_MODE_MANY : REACTION_MODE_ONE;
        if (o->threads == 0) {
            long cpus = sysconf(_SC_NPROCESSORS_ONLN);
            o->threads = cpus > 0 ? (uint64_t)cpus : 1;
        }
        o->max_connections_given = given(from, "max-connections");
        o->max_live_streams_given = given(from, "max-live-streams");
        return 0;
    }
    return -1;
}
