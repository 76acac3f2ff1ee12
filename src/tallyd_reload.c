/* tallyd_reload.c — SIGHUP: the configuration file read again, and the settings that may change
 * while running applied: the JWT keys and claims, the rate limits, who may read the lists, the
 * webhook timings, the CORS origins; the access log is reopened. Everything is parsed and checked
 * before anything changes; what needs a restart is logged and left as it is. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tallyd.h"

/* Something replaced that a thread may still be reading: kept, reachable, until exit. */
typedef struct retired {
    struct retired *next;
    FILE *log;       /* an access log stream no longer written to (not stderr) */
    bool holds_conf; /* a conf_t follows, to free with conf_free */
    /* a cors_list_t and its strings, a client_rules_t, or a conf_t follow when this holds one */
} retired_t;

static void retire(reload_ctx_t *ctx, retired_t *r)
{
    r->next = ctx->retired;
    ctx->retired = r;
}

auth_config_t tallyd_auth_config(const options_t *o)
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

/* Returns 0 when the authentication settings of next are in force (or unchanged), 1 when they were
 * refused and the ones in force kept (a weak secret, a key file with no usable key, a switch between
 * development mode and tokens). */
int reload_jwt(reload_ctx_t *ctx, const options_t *next)
{
    char err[1536];
    const char *flag = NULL;
    auth_config_t cfg = tallyd_auth_config(next);
    bool token_mode = auth_config_token_mode(&cfg);
    if (ctx->app->dev_mode || !token_mode) {
        if (ctx->app->dev_mode != !token_mode)
            log_line("level=warn event=restart-needed flag=--jwt-secret-file msg=\"switching between development "
                     "mode and tokens needs a restart; keeping the mode in force\"");
        return ctx->app->dev_mode != !token_mode;
    }
    if (auth_keys_reload(ctx->keys, &cfg, &flag, err, sizeof err) != 0) {
        log_line("level=error event=secrets-reload flag=%s error=\"%s\" msg=\"keeping the keys in force\"", flag, err);
        return 1;
    }
    log_line("level=info event=secrets-reloaded count=%d", ctx->keys->count);
    return 0;
}

/* A table for a limit that was off and is turned on; NULL when none is needed. */
static int rate_table_for(ratelimit_t *current, ratelimit_rule_t rule, ratelimit_t **fresh)
{
    *fresh = NULL;
    if (current || rule.rate_per_s <= 0)
        return 0;
    return ratelimit_new(rule, RATE_TABLE_CAPACITY, fresh);
}

static void rate_apply(ratelimit_t *_Atomic *slot, ratelimit_t *fresh, ratelimit_rule_t rule)
{
    ratelimit_t *current = atomic_load(slot);
    if (current)
        ratelimit_set_rule(current, rule); /* an unused table stays: turning it on again costs nothing */
    else if (fresh)
        atomic_store(slot, fresh);
}

int reload_rate_limits(reload_ctx_t *ctx, const options_t *next)
{
    ratelimit_t *w, *r;
    if (rate_table_for(atomic_load(&ctx->app->write_limit), next->write_rule, &w) != 0)
        return -1;
    if (rate_table_for(atomic_load(&ctx->app->read_limit), next->read_rule, &r) != 0) {
        ratelimit_free(w);
        return -1;
    }
    rate_apply(&ctx->app->write_limit, w, next->write_rule);
    rate_apply(&ctx->app->read_limit, r, next->read_rule);
    return 0;
}

void reload_lists(reload_ctx_t *ctx, const options_t *next)
{
    atomic_store(&ctx->app->who_reacted, next->who_reacted);
    atomic_store(&ctx->app->user_reactions, next->user_reactions);
    atomic_store(&ctx->app->public_max_age_s, (unsigned)(next->public_max_age_ms / 1000));
}

void reload_webhooks(reload_ctx_t *ctx, const options_t *next)
{
    if (ctx->app->webhooks)
        webhooks_set_timings(ctx->app->webhooks, next->webhook_timeout_ms, next->webhook_backoff_min_ms,
                             next->webhook_backoff_max_ms, next->webhook_secret_overlap_ms);
}

/* The origins copied (the file's text they come from is freed by a later reload). */
static retired_t *cors_copy(const options_t *o)
{
    size_t bytes = sizeof(retired_t) + sizeof(cors_list_t);
    for (int i = 0; i < o->ncors; i++)
        bytes += strlen(o->cors[i]) + 1;
    retired_t *r = calloc(1, bytes);
    if (!r)
        return NULL;
    cors_list_t *list = (cors_list_t *)(r + 1);
    char *p = (char *)(list + 1);
    for (int i = 0; i < o->ncors; i++) {
        size_t len = strlen(o->cors[i]) + 1;
        memcpy(p, o->cors[i], len);
        list->origins[i] = p;
        p += len;
    }
    list->count = o->ncors;
    return r;
}

client_rules_t tallyd_client_rules(const options_t *o)
{
    return (client_rules_t){
        .trusted = o->trusted_proxies, .header = o->real_ip_header, .prefix_v6 = (unsigned)o->client_prefix_v6};
}

/* --trusted-proxies and --real-ip-header: the rules replaced whole (readers in flight keep the old). */
int reload_client_rules(reload_ctx_t *ctx, const options_t *next)
{
    retired_t *r = calloc(1, sizeof(retired_t) + sizeof(client_rules_t));
    if (!r)
        return -1;
    *(client_rules_t *)(r + 1) = tallyd_client_rules(next);
    retire(ctx, r);
    atomic_store(&ctx->app->client_rules, (const client_rules_t *)(r + 1));
    return 0;
}

int reload_cors(reload_ctx_t *ctx, const options_t *next)
{
    retired_t *r = cors_copy(next);
    if (!r)
        return -1;
    retire(ctx, r); /* the list in force, kept reachable; the old ones stay for readers in flight */
    atomic_store(&ctx->app->cors, (const cors_list_t *)(r + 1));
    return 0;
}

int reopen_access_log(app_t *app, const char *path)
{
    FILE *out = atomic_load(&app->access_log);
    if (!out || out == stderr || !path || strcmp(path, "-") == 0)
        return 0;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        log_line("level=error event=access-log-reopen-failed file=\"%s\" error=\"%s\" msg=\"writing to the file "
                 "in force\"",
                 path, strerror(errno));
        return -1;
    }
    /* The stream keeps its descriptor number: a line in flight ends in the old file or the new. */
    flockfile(out);
    fflush(out);
    int rc = dup2(fd, fileno(out));
    funlockfile(out);
    close(fd);
    if (rc < 0) {
        log_line("level=error event=access-log-reopen-failed file=\"%s\" error=\"%s\"", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* --access-log changed: off, -, or another file. */
static int access_log_switch(reload_ctx_t *ctx, const char *path)
{
    FILE *old = atomic_load(&ctx->app->access_log), *next = NULL;
    if (path && strcmp(path, "-") == 0)
        next = stderr;
    else if (path && old && old != stderr)
        return reopen_access_log(ctx->app, path); /* the same stream, the new file beneath it */
    else if (path) {
        next = fopen(path, "ae");
        if (!next) {
            log_line("level=error event=access-log-reopen-failed file=\"%s\" error=\"%s\"", path, strerror(errno));
            return -1;
        }
        setvbuf(next, NULL, _IOLBF, 0);
    }
    if (old && old != stderr) {
        retired_t *r = calloc(1, sizeof *r);
        if (!r) {
            if (next && next != stderr)
                fclose(next);
            return -1;
        }
        r->log = old;
        retire(ctx, r);
        fflush(old);
    }
    atomic_store(&ctx->app->access_log, next);
    return 0;
}

static bool same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool is_jwt_flag(const flag_t *f)
{
    return strncmp(f->name, "--jwt-", 6) == 0;
}

int tallyd_reload(reload_ctx_t *ctx)
{
    const flagset_t *fs = &tallyd_flagset;
    const char *path = ctx->args->config;
    options_t *next = calloc(1, sizeof *next);
    flag_source_t *from = calloc(fs->count, sizeof *from);
    char **texts = calloc(fs->count, sizeof *texts);
    bool *changed = calloc(fs->count, sizeof *changed);
    conf_t conf = {0};
    kinds_t kinds;
    flag_error_t err;
    int rc = -1, nchanged = 0;
    if (!next || !from || !texts || !changed) {
        log_line("level=error event=reload-failed msg=\"out of memory; nothing changed\"");
        goto out;
    }
    if (!path) {
        log_line("level=info event=sighup msg=\"no --config file; reloading the keys and reopening the access "
                 "log\"");
        *next = *ctx->in_force;
    } else if (flags_build(fs, ctx->args, next, from, &conf, &err) != 0 ||
               tallyd_options_finish(next, from, &kinds, &err) != 0) {
        log_line("level=error event=reload-failed file=\"%s\" msg=\"%s; nothing changed\"", path, err.msg);
        reopen_access_log(ctx->app, ctx->in_force->access_log); /* rotation still works */
        goto out;
    }
    for (size_t i = 0; i < fs->count; i++) {
        texts[i] = flags_value_text(fs, ctx->args, path ? &conf : ctx->conf, i);
        if (!texts[i]) {
            log_line("level=error event=reload-failed msg=\"out of memory; nothing changed\"");
            goto out;
        }
        changed[i] = path && !same(texts[i], ctx->running[i]);
    }
    /* Everything that can fail first, the JWT keys last of those: they swap whole or not at all. */
    const flag_t *flags = fs->flags;
    bool rates = false, cors = false, proxies = false;
    for (size_t i = 0; i < fs->count; i++) {
        if (!changed[i])
            continue;
        rates |=
            flags[i].offset == offsetof(options_t, write_rule) || flags[i].offset == offsetof(options_t, read_rule);
        cors |= flags[i].offset == offsetof(options_t, cors);
        proxies |= flags[i].offset == offsetof(options_t, trusted_proxies) ||
                   flags[i].offset == offsetof(options_t, real_ip_header);
    }
    if ((rates && reload_rate_limits(ctx, next) != 0) || (cors && reload_cors(ctx, next) != 0) ||
        (proxies && reload_client_rules(ctx, next) != 0)) {
        log_line("level=error event=reload-failed msg=\"out of memory; nothing changed\"");
        goto out; /* a table allocated for a limit turned on is in force only with the rest: see below */
    }
    /* Refused authentication settings keep the ones in force; the other settings apply all the same. */
    bool jwt_kept = reload_jwt(ctx, next) != 0;
    reload_lists(ctx, next);
    reload_webhooks(ctx, next);
    size_t log_flag = (size_t)(flags_find(fs, "access-log") - flags);
    if (changed[log_flag])
        access_log_switch(ctx, next->access_log);
    else
        reopen_access_log(ctx->app, next->access_log);
    /* What is in force now: the reloadable values; the others stay as they started. */
    options_t *o = ctx->in_force;
    for (size_t i = 0; i < fs->count; i++) {
        if (!changed[i])
            continue;
        if (jwt_kept && is_jwt_flag(&flags[i])) {
            log_line("level=warn event=config-kept flag=%s msg=\"refused (see above); the value in force stays\"",
                     flags[i].name);
            continue;
        }
        if (!(flags[i].opts & FLAG_RELOADS)) {
            log_line("level=warn event=restart-needed flag=%s msg=\"changed in %s; applies at the next restart\"",
                     flags[i].name, path);
            continue;
        }
        /* values of the JWT flags (secrets' files, URLs) are not logged; the others are plain settings */
        if (is_jwt_flag(&flags[i]))
            log_line("level=info event=config-changed flag=%s", flags[i].name);
        else
            log_line("level=info event=config-changed flag=%s value=\"%s\"", flags[i].name, texts[i]);
        free(ctx->running[i]);
        ctx->running[i] = texts[i];
        texts[i] = NULL;
        nchanged++;
    }
    if (!jwt_kept) {
        o->jwt_secret_file = next->jwt_secret_file;
        o->jwt_keys = next->jwt_keys;
        o->jwt_jwks_url = next->jwt_jwks_url;
        o->jwt_jwks_refresh_ms = next->jwt_jwks_refresh_ms;
        o->jwt_issuer = next->jwt_issuer;
        o->jwt_audience = next->jwt_audience;
        o->jwt_user_claim = next->jwt_user_claim;
        o->jwt_admin_claim = next->jwt_admin_claim;
    }
    o->write_rule = next->write_rule;
    o->read_rule = next->read_rule;
    o->who_reacted = next->who_reacted;
    o->user_reactions = next->user_reactions;
    o->public_max_age_ms = next->public_max_age_ms;
    o->webhook_timeout_ms = next->webhook_timeout_ms;
    o->webhook_backoff_min_ms = next->webhook_backoff_min_ms;
    o->webhook_backoff_max_ms = next->webhook_backoff_max_ms;
    o->webhook_secret_overlap_ms = next->webhook_secret_overlap_ms;
    o->access_log = next->access_log;
    memcpy(o->cors, next->cors, sizeof o->cors);
    o->ncors = next->ncors;
    o->trusted_proxies = next->trusted_proxies;
    o->real_ip_header = next->real_ip_header;
    if (path) {
        /* The in-force strings now point into this file's text; the previous reload's is unused,
         * unless kept authentication settings still point into it: then it stays until exit. */
        if (jwt_kept) {
            retired_t *r = calloc(1, sizeof(retired_t) + sizeof(conf_t));
            if (r) {
                *(conf_t *)(r + 1) = *ctx->conf;
                r->holds_conf = true;
                retire(ctx, r);
            }
            *ctx->conf = (conf_t){0}; /* out of memory: left unfreed rather than freed in use */
        }
        conf_free(ctx->conf);
        *ctx->conf = conf;
        conf = (conf_t){0};
        log_line("level=info event=reloaded file=\"%s\" changed=%d", path, nchanged);
    }
    rc = 0;
out:
    conf_free(&conf);
    for (size_t i = 0; texts && i < fs->count; i++)
        free(texts[i]);
    free(texts);
    free(changed);
    free(from);
    free(next);
    return rc;
}

void tallyd_reload_free(reload_ctx_t *ctx)
{
    for (retired_t *r = ctx->retired, *next; r; r = next) {
        next = r->next;
        if (r->log)
            fclose(r->log);
        if (r->holds_conf)
            conf_free((conf_t *)(r + 1));
        free(r);
    }
    ctx->retired = NULL;
    for (size_t i = 0; ctx->running && i < tallyd_flagset.count; i++)
        free(ctx->running[i]);
    free(ctx->running);
    ctx->running = NULL;
    conf_free(ctx->conf);
}
