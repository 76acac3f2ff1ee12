/* tallyd.h — the server's options (one field per flag of src/tallyd_flags.c) and what the parts of
 * tallyd share: the flag table, and the reload of the settings SIGHUP may change. */
#ifndef TALLY_TALLYD_H
#define TALLY_TALLYD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/forwarded.h"
#include "core/kinds.h"
#include "core/log.h"
#include "core/netallow.h"
#include "core/ratelimit.h"
#include "engine/authkeys.h"
#include "flags.h"
#include "http/app.h"

#define DATA_DIR_DEFAULT "./data"

/* Every flag's value, filled from the defaults of the flag table, then the --config file,
 * then the command line (src/tallyd_flags.c). */
typedef struct {
    const char *listen;
    const char *admin_listen;
    const char *data;
    const char *store;             /* the first --store URI; NULL: the embedded store in data */
    const char *stores[SHARD_MAX]; /* every --store URI, shard k at k (several: shards) */
    size_t nstores;
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
    uint64_t export_timeout_ms, max_exports;
    const char *access_log;
    const char *cors[CORS_ORIGINS_MAX];
    int ncors;
    netallow_t webhook_allow;
    netallow_t trusted_proxies;
    forwarded_kind_t real_ip_header;
    uint64_t client_prefix_v6;
    uint64_t webhook_timeout_ms, webhook_backoff_min_ms, webhook_backoff_max_ms, webhook_secret_overlap_ms;
    list_access_t who_reacted, user_reactions;
    uint64_t public_max_age_ms;
    log_format_t log_format;
} options_t;

extern const flagset_t tallyd_flagset;

#define RATE_TABLE_CAPACITY (1u << 20) /* buckets per limiter: ~24 MiB, whatever the number of users */

/* What the table cannot check flag by flag (--data with --store, the backoffs' order, the kinds),
 * and the defaults that depend on the machine. Returns 0, or -1 with err filled. */
int tallyd_options_finish(options_t *o, const flag_source_t *from, kinds_t *kinds, flag_error_t *err);

/* The rules that name the client behind trusted proxies. */
client_rules_t tallyd_client_rules(const options_t *o);

/* Where reload_jwt and the others find what they change. */
typedef struct {
    app_t *app;
    auth_keys_t *keys;
    const flag_args_t *args; /* the command line, kept: it wins over the file on every reload */
    options_t *in_force;     /* the options in force (replaced by a good reload) */
    flag_source_t *from;     /* where each option in force came from */
    conf_t *conf;            /* the text of the last reload's file (the start-up one is kept) */
    char **running;          /* per flag, the text of the value in force (flags_value_text) */
    void *retired;           /* CORS lists and access log streams replaced, kept until exit */
} reload_ctx_t;

/* The keys and claim rules of tokens, from the options and the environment. */
auth_config_t tallyd_auth_config(const options_t *o);

/* SIGHUP: reads the file again and applies what may change while running (logging each change,
 * and each other change as waiting for a restart); a file that does not parse changes nothing.
 * Reopens the access log. Returns 0, or -1 when the file was refused. */
int tallyd_reload(reload_ctx_t *ctx);

/* Each reloadable part on its own (tallyd_reload calls them): 0, or -1 having logged why. */
int reload_jwt(reload_ctx_t *ctx, const options_t *next);
int reload_rate_limits(reload_ctx_t *ctx, const options_t *next);
void reload_lists(reload_ctx_t *ctx, const options_t *next);
void reload_webhooks(reload_ctx_t *ctx, const options_t *next);
int reload_cors(reload_ctx_t *ctx, const options_t *next);
int reload_client_rules(reload_ctx_t *ctx, const options_t *next);
int reopen_access_log(app_t *app, const char *path);

/* At exit, with no thread left: what reloads kept. */
void tallyd_reload_free(reload_ctx_t *ctx);

#endif
