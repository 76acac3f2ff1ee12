/* features.c — the feature version in force: the rule, this node's record and heartbeat, the check a
 * write of a gated feature makes in its transaction. */
#include "engine/features.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/ids.h"
#include "core/log.h"
#include "engine/policies.h"
#include "engine/thread.h"
#include "engine/voids.h"

#define NODE_ID_MAX 96

/* --- the rule --- */

uint64_t features_rule(uint64_t in_force, const feature_node_t *nodes, size_t n, uint64_t now_ms, uint64_t alive_ms)
{
    uint64_t lowest = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        bool alive = nodes[i].seen_ms >= now_ms || now_ms - nodes[i].seen_ms <= alive_ms;
        if (alive && nodes[i].supported < lowest)
            lowest = nodes[i].supported;
    }
    return lowest != UINT64_MAX && lowest > in_force ? lowest : in_force;
}

bool features_may_raise(bool others, uint64_t steady_ms, uint64_t alive_ms)
{
    return !others || steady_ms >= alive_ms;
}

uint64_t features_initial(bool used_before)
{
    return used_before ? FEATURE_VERSION_POLICIES_VOIDS : FEATURE_VERSION_BASE;
}

int features_parse_node(span_t value, feature_node_t *out)
{
    char text[64] = "";
    if (value.len >= sizeof text)
        return -1;
    memcpy(text, value.ptr, value.len);
    unsigned long long v = 0, seen = 0;
    char extra;
    if (sscanf(text, "%llu %llu %c", &v, &seen, &extra) != 2 || v == 0)
        return -1;
    out->supported = v;
    out->seen_ms = seen;
    return 0;
}

/* "<version>" → version (0: unreadable). */
static uint64_t parse_version(span_t value)
{
    char text[32] = "";
    if (value.len >= sizeof text)
        return 0;
    memcpy(text, value.ptr, value.len);
    unsigned long long v = 0;
    char extra;
    return sscanf(text, "%llu %c", &v, &extra) == 1 ? v : 0;
}

/* --- the check of a gated write --- */

typedef struct {
    bool present;
    uint64_t version;
} version_read_t;

static int version_one(void *arg, span_t key, span_t value)
{
    version_read_t *r = arg;
    if (span_eq_str(key, FEATURES_VERSION_KEY)) {
        r->present = true;
        r->version = parse_version(value);
    }
    return 0;
}

int features_require(store_write_t *tx, uint64_t need, const char *what, answer_t *answer, bool *ok)
{
    version_read_t r = {0};
    /* The version only rises: what the transaction reads now holds at its commit too. */
    int rc = store_aux_read_locked(tx, SPAN_LIT(FEATURES_VERSION_KEY), version_one, &r);
    if (rc != STORE_OK)
        return rc;
    uint64_t in_force = r.present ? r.version : FEATURE_VERSION_BASE;
    *ok = in_force >= need;
    if (!*ok) {
        char detail[320];
        snprintf(detail, sizeof detail,
                 "%s needs feature version %llu; the version in force is %llu. It rises by itself once every node "
                 "seen in the last %d s supports %llu (the metric tally_feature_version)",
                 what, (unsigned long long)need, (unsigned long long)in_force, FEATURES_ALIVE_MS / 1000,
                 (unsigned long long)need);
        answer_problem(answer, 409, "feature-unavailable", detail);
    }
    return STORE_OK;
}

/* --- this node's record --- */

typedef struct {
    write_cmd_t cmd; /* first: a write_cmd_t * is a beat_t * */
    write_aux_t aux;
    features_t *f;
    /* read in the transaction (reset by each run of decide) */
    bool present;
    uint64_t stored;
    feature_node_t *nodes;
    size_t n, cap;
    bool failed;
    char (*forget)[sizeof FEATURES_NODE_PREFIX + NODE_ID_MAX + 2];
    size_t nforget, forget_cap;
    /* results */
    bool passed;
    uint64_t in_force, raised_from, alive, behind;
    char version_text[24], node_text[48];
} beat_t;

struct features {
    store_t *store;
    writer_t *writer;
    bool shared;
    bool announce; /* log what changes (tallyd); the offline tool keeps quiet */
    char node_key[sizeof FEATURES_NODE_PREFIX + NODE_ID_MAX];
    beat_t beat;
    features_stats_t stats;
    atomic_bool passed;
    uint64_t held_logged;  /* the version in force last said to be held back (0: none) */
    uint64_t steady_since; /* monotonic ms of the first of the heartbeats that succeeded since the last
                            * failure (0: the last failed, or none yet); the heartbeat's thread's */
    bool follow;
    pthread_t thread;
    pthread_mutex_t wait_lock;
    pthread_cond_t wake;
    bool stopping;
};

const features_stats_t *features_stats(const features_t *f)
{
    return &f->stats;
}

bool features_passed(const features_t *f)
{
    return f && atomic_load(&f->passed);
}

static int collect(void *arg, span_t key, span_t value)
{
    beat_t *b = arg;
    features_t *f = b->f;
    size_t plen = strlen(FEATURES_NODE_PREFIX);
    if (span_eq_str(key, FEATURES_VERSION_KEY)) {
        b->present = true;
        b->stored = parse_version(value);
        return 0;
    }
    if (key.len <= plen || memcmp(key.ptr, FEATURES_NODE_PREFIX, plen) != 0 || span_eq_str(key, f->node_key))
        return 0;
    feature_node_t node;
    bool readable = features_parse_node(value, &node) == 0;
    uint64_t now = wall_ms();
    /* on the embedded store this process is the only node: every other record is an earlier run's */
    if (f->shared && !readable)
        return 0; /* not this build's format (a newer build's?): neither counted nor deleted */
    bool forget = !f->shared || (node.seen_ms < now && now - node.seen_ms > FEATURES_FORGET_MS);
    if (forget) {
        if (key.len > NODE_ID_MAX + plen)
            return 0; /* not a key this module writes: left alone */
        if (b->nforget == b->forget_cap) {
            size_t cap = b->forget_cap ? 2 * b->forget_cap : 8;
            void *grown = realloc(b->forget, cap * sizeof *b->forget);
            if (!grown) {
                b->failed = true;
                return 1;
            }
            b->forget = grown;
            b->forget_cap = cap;
        }
        snprintf(b->forget[b->nforget++], sizeof b->forget[0], "%.*s", (int)key.len, key.ptr);
        return 0;
    }
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 8;
        feature_node_t *grown = realloc(b->nodes, cap * sizeof *grown);
        if (!grown) {
            b->failed = true;
            return 1;
        }
        b->nodes = grown;
        b->cap = cap;
    }
    b->nodes[b->n++] = node;
    return 0;
}

/* Whether the store was used with policies or voids before it held a version (their counters exist). */
typedef struct {
    bool found;
} used_t;

static int used_one(void *arg, span_t key, span_t value)
{
    (void)key;
    (void)value;
    ((used_t *)arg)->found = true;
    return 0;
}

/* In the writer's transaction: this node's record, the version in force raised when the rule says so,
 * forgotten records deleted. Every record is read under one lock (the prefix's), so two nodes'
 * heartbeats and a start run one after the other: a node cannot register below a version raised
 * meanwhile, and the version is not raised past a node that registered meanwhile. */
static int decide(store_write_t *tx, write_cmd_t *cmd, write_aux_t *aux)
{
    beat_t *b = (beat_t *)cmd;
    features_t *f = b->f;
    b->present = b->failed = b->passed = false;
    b->stored = b->n = b->nforget = 0;
    b->raised_from = 0;
    aux->n = 0;
    aux->delete_from = aux->delete_to = (span_t){0};
    int rc = store_aux_read_locked(tx, SPAN_LIT(FEATURES_KEY_PREFIX), collect, b);
    if (rc == STORE_OK && b->failed)
        rc = STORE_ERROR;
    if (rc != STORE_OK)
        return rc;
    uint64_t in_force = b->stored;
    if (b->present && in_force == 0) { /* unreadable: never overwritten (it could only be lowered) */
        b->passed = true;
        b->in_force = 0;
        answer_problem(&cmd->answer, 409, "feature-version-passed", "the version in force cannot be read");
        return STORE_OK;
    }
    if (!b->present) {
        used_t used = {false};
        rc = store_aux_read_locked(tx, SPAN_LIT(POLICIES_COUNTER_KEY), used_one, &used);
        if (rc == STORE_OK)
            rc = store_aux_read_locked(tx, SPAN_LIT(VOIDS_COUNTER_KEY), used_one, &used);
        if (rc != STORE_OK)
            return rc;
        in_force = features_initial(used.found);
    }
    if (in_force > FEATURE_VERSION_SUPPORTED) {
        b->passed = true;
        b->in_force = in_force;
        answer_problem(&cmd->answer, 409, "feature-version-passed", "the version in force is above this build's");
        return STORE_OK;
    }
    uint64_t now = wall_ms();
    b->alive = 1;
    b->behind = 0;
    for (size_t i = 0; i < b->n; i++) {
        const feature_node_t *nd = &b->nodes[i];
        if (nd->seen_ms >= now || now - nd->seen_ms <= FEATURES_ALIVE_MS) {
            b->alive++;
            b->behind += nd->supported < FEATURE_VERSION_SUPPORTED;
        }
    }
    if (b->n == b->cap) { /* room for this node's own record in the rule's list */
        feature_node_t *grown = realloc(b->nodes, (b->cap + 1) * sizeof *grown);
        if (!grown)
            return STORE_ERROR;
        b->nodes = grown;
        b->cap++;
    }
    b->nodes[b->n] = (feature_node_t){FEATURE_VERSION_SUPPORTED, now};
    uint64_t next = features_rule(in_force, b->nodes, b->n + 1, now, FEATURES_ALIVE_MS);
    uint64_t mono = mono_ns() / 1000000;
    uint64_t steady = f->steady_since ? mono - f->steady_since : 0;
    if (!features_may_raise(b->n > 0, steady, FEATURES_ALIVE_MS))
        next = in_force; /* raised by a later heartbeat, once every node had time to be seen */
    for (size_t i = 0; i < b->nforget && rc == STORE_OK; i++) {
        char end[sizeof b->forget[0] + 1];
        size_t len = strlen(b->forget[i]);
        memcpy(end, b->forget[i], len);
        end[len] = '\x01'; /* the key and nothing after it: node ids hold no byte below '-' */
        rc = store_aux_delete_range(tx, (span_t){b->forget[i], len}, (span_t){end, len + 1});
    }
    if (rc != STORE_OK)
        return rc;
    snprintf(b->node_text, sizeof b->node_text, "%d %llu", FEATURE_VERSION_SUPPORTED, (unsigned long long)now);
    aux->keys[aux->n] = span_of(f->node_key);
    aux->values[aux->n++] = span_of(b->node_text);
    if (!b->present || next != b->stored) {
        if (b->present && next != b->stored)
            b->raised_from = b->stored;
        snprintf(b->version_text, sizeof b->version_text, "%llu", (unsigned long long)next);
        aux->keys[aux->n] = SPAN_LIT(FEATURES_VERSION_KEY);
        aux->values[aux->n++] = span_of(b->version_text);
    }
    b->in_force = next;
    answer_set_body(&cmd->answer, 200, ANSWER_JSON, NULL, 0);
    return STORE_OK;
}

/* One heartbeat through the writer. Returns 0, 1 when this node has been passed, -1 when it failed. */
static int beat(features_t *f)
{
    beat_t *b = &f->beat;
    answer_free(&b->cmd.answer);
    memset(&b->cmd, 0, sizeof b->cmd);
    b->cmd.type = WRITE_AUX;
    b->cmd.aux = &b->aux;
    b->aux.decide = decide;
    b->f = f;
    int status = writer_call(f->writer, &b->cmd) == 0 ? b->cmd.answer.status : -1;
    if (b->passed)
        return 1;
    if (status != 200) {
        f->steady_since = 0;
        atomic_fetch_add_explicit(&f->stats.heartbeat_failures, 1, memory_order_relaxed);
        return -1;
    }
    if (!f->steady_since)
        f->steady_since = mono_ns() / 1000000;
    atomic_fetch_add_explicit(&f->stats.heartbeats, 1, memory_order_relaxed);
    atomic_store_explicit(&f->stats.in_force, b->in_force, memory_order_relaxed);
    atomic_store_explicit(&f->stats.nodes_alive, b->alive, memory_order_relaxed);
    atomic_store_explicit(&f->stats.nodes_behind, b->behind, memory_order_relaxed);
    if (b->raised_from && f->announce)
        log_line("level=info event=feature-version-raised from=%llu to=%llu nodes=%llu",
                 (unsigned long long)b->raised_from, (unsigned long long)b->in_force, (unsigned long long)b->alive);
    if (b->in_force < FEATURE_VERSION_SUPPORTED && f->held_logged != b->in_force && f->announce) {
        f->held_logged = b->in_force;
        log_line("level=warn event=feature-version-held in_force=%llu supported=%d nodes_behind=%llu "
                 "msg=\"a node seen in the last %d s supports less than this build: features above the version in "
                 "force are refused until it is gone or upgraded\"",
                 (unsigned long long)b->in_force, FEATURE_VERSION_SUPPORTED, (unsigned long long)b->behind,
                 FEATURES_ALIVE_MS / 1000);
    }
    return 0;
}

static void *follow_main(void *arg)
{
    features_t *f = arg;
    thread_set_name("tally-features");
    uint64_t took_ms = 0; /* the last heartbeat's time through the writer: one starts every interval */
    pthread_mutex_lock(&f->wait_lock);
    while (!f->stopping) {
        /* a store of one node follows only to register late, after a full disk at start: every 5 s */
        uint64_t every_ms = f->shared ? FEATURES_HEARTBEAT_MS : 5000;
        uint64_t wait_ms = took_ms < every_ms ? every_ms - took_ms : 0;
        struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, wait_ms);
        pthread_cond_timedwait(&f->wake, &f->wait_lock, &deadline);
        if (f->stopping)
            break;
        pthread_mutex_unlock(&f->wait_lock);
        uint64_t started = mono_ns();
        int rc = beat(f); /* a failure (the store away) is tried again next time */
        took_ms = (mono_ns() - started) / 1000000;
        pthread_mutex_lock(&f->wait_lock);
        if (rc == 0 && !f->shared) {
            if (f->announce)
                log_line("level=info event=feature-version in_force=%llu supported=%d nodes=%llu",
                         (unsigned long long)f->beat.in_force, FEATURE_VERSION_SUPPORTED,
                         (unsigned long long)f->beat.alive);
            break; /* registered late (the store took no writes at start); one node: nothing to follow */
        }
        if (rc == 1) {
            /* Taken for gone, the others raised the version past this build: what this node would
             * write or fold may no longer be understood. Stop the process, as SIGTERM does. */
            log_line("level=error event=feature-version-passed in_force=%llu supported=%d msg=\"the version in "
                     "force is above what this build supports (this node was not seen for %d s): stopping\"",
                     (unsigned long long)f->beat.in_force, FEATURE_VERSION_SUPPORTED, FEATURES_ALIVE_MS / 1000);
            atomic_store(&f->passed, true);
            kill(getpid(), SIGTERM);
            break;
        }
    }
    pthread_mutex_unlock(&f->wait_lock);
    return NULL;
}

/* The version in force as a snapshot shows it (0: unreadable); the base when there is no record.
 * Returns 0, or -1 when the store could not be read. */
static int read_in_force(store_t *store, uint64_t *out)
{
    store_read_t *snap = NULL;
    if (store_read_begin_single(store, &snap) != STORE_OK)
        return -1;
    version_read_t r = {0};
    int rc = store_read_aux(snap, SPAN_LIT(FEATURES_VERSION_KEY), version_one, &r);
    store_read_end(snap);
    if (rc != STORE_OK)
        return -1;
    *out = r.present ? r.version : FEATURE_VERSION_BASE;
    return 0;
}

/* host name (id characters only), process id, random bits: new for each start. */
static void node_id(char *out, size_t len)
{
    char host[64] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    for (char *c = host; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '-' || *c == '_'))
            *c = '_';
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (uint32_t)mono_ns();
    snprintf(out, len, "%s%s-%ld-%08x", FEATURES_NODE_PREFIX, host[0] ? host : "node", (long)getpid(), r);
}

int features_open(store_t *store, writer_t *w, bool announce, features_t **out, char *err, size_t errlen)
{
    features_t *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    f->store = store;
    f->writer = w;
    f->shared = store_shared(store);
    f->announce = announce;
    node_id(f->node_key, sizeof f->node_key);
    pthread_mutex_init(&f->wait_lock, NULL);
    clock_cond_init_monotonic(&f->wake);
    int rc = beat(f);
    bool deferred = false;
    char why[160] = "";
    if (rc == -1 && store_writes_refused(store, why, sizeof why)) {
        /* A full disk at start: reads are served and writes refused until space frees (the embedded
         * store's rule), so this node registers later, from its thread. Until then what is in force
         * is read, so a build that was passed still refuses to start. */
        uint64_t in_force = 0;
        if (read_in_force(store, &in_force) != 0) {
            snprintf(err, errlen, "reading the store's feature version in force failed");
            features_close(f);
            return -1;
        }
        if (in_force == 0 || in_force > FEATURE_VERSION_SUPPORTED) {
            f->beat.in_force = in_force;
            rc = 1;
        } else {
            deferred = true;
            rc = 0;
            atomic_store_explicit(&f->stats.in_force, in_force, memory_order_relaxed);
            if (announce)
                log_line("level=warn event=feature-version-deferred in_force=%llu supported=%d reason=\"%s\" "
                         "msg=\"this node registers once the store takes writes again\"",
                         (unsigned long long)in_force, FEATURE_VERSION_SUPPORTED, why);
        }
    }
    if (rc != 0) {
        if (rc == 1 && f->beat.in_force == 0)
            snprintf(err, errlen,
                     "the store's feature version in force (the record " FEATURES_VERSION_KEY
                     ") cannot be read by this "
                     "build, which supports %d at most: it was written by a newer tally (see docs/operations.md "
                     "\"Feature versions\")",
                     FEATURE_VERSION_SUPPORTED);
        else if (rc == 1)
            snprintf(err, errlen,
                     "the store's feature version in force is %llu and this build supports %d at most: it was "
                     "used by a newer tally (see docs/operations.md \"Feature versions\")",
                     (unsigned long long)f->beat.in_force, FEATURE_VERSION_SUPPORTED);
        else
            snprintf(err, errlen, "registering this node's feature version in the store failed");
        features_close(f);
        return -1;
    }
    if (announce && !deferred)
        log_line("level=info event=feature-version in_force=%llu supported=%d nodes=%llu",
                 (unsigned long long)f->beat.in_force, FEATURE_VERSION_SUPPORTED, (unsigned long long)f->beat.alive);
    if (f->shared || deferred) {
        if (pthread_create(&f->thread, NULL, follow_main, f) != 0) {
            snprintf(err, errlen, "starting the feature version's thread failed");
            features_close(f);
            return -1;
        }
        f->follow = true;
    }
    *out = f;
    return 0;
}

void features_close(features_t *f)
{
    if (!f)
        return;
    if (f->follow)
        thread_stop_join(&f->wait_lock, &f->wake, &f->stopping, f->thread);
    answer_free(&f->beat.cmd.answer);
    free(f->beat.nodes);
    free(f->beat.forget);
    pthread_mutex_destroy(&f->wait_lock);
    pthread_cond_destroy(&f->wake);
    free(f);
}
