/* policies.c — the policies' records, the table in force on this node, and following the version. */
#include "engine/policies.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/jsontext.h"
#include "core/log.h"
#include "engine/features.h"
#include "engine/thread.h"

#define PREFIX "policy/"
#define POLICY_PREFIX "policy/p/"
#define VERSION_KEY POLICIES_COUNTER_KEY

struct policies {
    store_t *store;
    const kinds_t *kinds;
    pthread_rwlock_t lock; /* guards table (swapped whole) */
    policy_table_t table;
    atomic_bool empty;         /* no policy in force: a write or read skips the lock */
    pthread_mutex_t load_lock; /* one load at a time; guards version */
    uint64_t version;          /* the version the table was loaded at (0: none yet) */
    policies_stats_t stats;
    /* the thread that follows the version (a shared store) */
    bool follow;
    pthread_t thread;
    pthread_mutex_t wait_lock;
    pthread_cond_t wake;
    bool stopping;
};

const policies_stats_t *policies_stats(const policies_t *p)
{
    return &p->stats;
}

void policies_count_refusal(policies_t *p, policy_verdict_t v)
{
    if (p && v < POLICY_VERDICTS)
        atomic_fetch_add_explicit(&p->stats.refused[v], 1, memory_order_relaxed);
}

bool policies_lookup(policies_t *p, span_t item, policy_t *out)
{
    if (!p || atomic_load_explicit(&p->empty, memory_order_acquire))
        return false;
    pthread_rwlock_rdlock(&p->lock);
    const policy_t *found = policy_resolve(&p->table, item);
    if (found)
        *out = *found;
    pthread_rwlock_unlock(&p->lock);
    return found != NULL;
}

/* --- loading --- */

typedef struct {
    const kinds_t *kinds;
    policy_entry_t *entries;
    size_t n, cap;
    uint64_t version;
    bool failed;
} load_t;

/* "<version> <count>" → both (0 0 when unreadable). */
static void parse_counter(span_t value, uint64_t *version, uint64_t *count)
{
    char text[48] = "";
    unsigned long long v = 0, n = 0;
    memcpy(text, value.ptr, value.len < sizeof text - 1 ? value.len : sizeof text - 1);
    if (sscanf(text, "%llu %llu", &v, &n) != 2)
        v = n = 0;
    *version = v;
    *count = n;
}

static int collect(void *arg, span_t key, span_t value)
{
    load_t *l = arg;
    size_t plen = strlen(POLICY_PREFIX);
    if (span_eq_str(key, VERSION_KEY)) {
        uint64_t count;
        parse_counter(value, &l->version, &count);
        return 0;
    }
    if (key.len <= plen || memcmp(key.ptr, POLICY_PREFIX, plen) != 0)
        return 0;
    span_t target = {key.ptr + plen, key.len - plen};
    policy_target_t type;
    if (target.len > POLICY_TARGET_MAX || policy_target_parse(target, &type) != 0)
        return 0;
    json_error_t jerr;
    json_t *doc = json_loadb(value.ptr, value.len, 0, &jerr);
    policy_t pol;
    char err[160];
    int rc = policy_from_json(l->kinds, doc, &pol, err, sizeof err);
    json_decref(doc);
    if (rc != 0) { /* a record this build cannot read: it is left out, and said so */
        log_line("level=warn event=policy-unreadable target=\"%.*s\" error=\"%s\"", (int)target.len, target.ptr, err);
        return 0;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        policy_entry_t *grown = realloc(l->entries, cap * sizeof *grown);
        if (!grown) {
            l->failed = true;
            return 1;
        }
        l->entries = grown;
        l->cap = cap;
    }
    policy_entry_t *e = &l->entries[l->n++];
    memcpy(e->target, target.ptr, target.len);
    e->target[target.len] = '\0';
    e->target_len = target.len;
    e->policy = pol;
    return 0;
}

/* Puts t in force (the old table is freed). */
static void install(policies_t *p, policy_table_t *t, uint64_t version)
{
    pthread_rwlock_wrlock(&p->lock);
    policy_table_t old = p->table;
    p->table = *t;
    atomic_store_explicit(&p->empty, t->n == 0, memory_order_release);
    pthread_rwlock_unlock(&p->lock);
    policy_table_free(&old);
    p->version = version;
    atomic_store_explicit(&p->stats.count, t->n, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->stats.epoch, 1, memory_order_release);
}

/* Reads the version alone (one question: a single snapshot). */
static int read_version(policies_t *p, uint64_t *version)
{
    store_read_t *snap;
    load_t l = {.kinds = p->kinds};
    int rc = store_read_begin_single(p->store, &snap);
    if (rc != STORE_OK)
        return rc;
    rc = store_read_aux(snap, SPAN_LIT(VERSION_KEY), collect, &l);
    store_read_end(snap);
    *version = l.version;
    return rc;
}

static int load(policies_t *p)
{
    store_read_t *snap;
    load_t l = {.kinds = p->kinds};
    int rc = store_read_begin(p->store, &snap);
    if (rc != STORE_OK)
        return rc;
    rc = store_read_aux(snap, SPAN_LIT(PREFIX), collect, &l);
    store_read_end(snap);
    if (rc == STORE_OK && l.failed)
        rc = STORE_ERROR;
    policy_table_t t;
    if (rc != STORE_OK || policy_table_build(&t, l.entries, l.n) != 0) {
        if (rc != STORE_OK)
            free(l.entries);
        atomic_fetch_add_explicit(&p->stats.load_failures, 1, memory_order_relaxed);
        return rc != STORE_OK ? rc : STORE_ERROR;
    }
    install(p, &t, l.version);
    atomic_fetch_add_explicit(&p->stats.loads, 1, memory_order_relaxed);
    return STORE_OK;
}

int policies_refresh(policies_t *p, bool force)
{
    pthread_mutex_lock(&p->load_lock);
    uint64_t version = 0;
    int rc = force ? STORE_OK : read_version(p, &version);
    if (rc == STORE_OK && (force || version != p->version))
        rc = load(p);
    pthread_mutex_unlock(&p->load_lock);
    return rc;
}

/* The table in force with w's change applied: a copy, one entry put in place or taken out (the
 * entries stay in target order). Returns 0, or -1 when out of memory. */
static int apply_change(policies_t *p, const policy_write_t *w, policy_table_t *out)
{
    const policy_table_t *t = &p->table;
    span_t target = {w->target, w->target_len};
    size_t at = 0;
    while (at < t->n && strcmp(t->entries[at].target, w->target) < 0)
        at++; /* targets hold no byte that sorts differently as text and as bytes */
    bool exists = at < t->n && span_eq((span_t){t->entries[at].target, t->entries[at].target_len}, target);
    size_t n = t->n + (w->put && !exists) - (!w->put && exists);
    policy_entry_t *entries = malloc((n ? n : 1) * sizeof *entries);
    if (!entries)
        return -1;
    if (at)
        memcpy(entries, t->entries, at * sizeof *entries);
    size_t k = at;
    if (w->put) {
        policy_entry_t *e = &entries[k++];
        memcpy(e->target, w->target, w->target_len);
        e->target[w->target_len] = '\0';
        e->target_len = w->target_len;
        e->policy = w->policy;
    }
    size_t rest = at + exists;
    if (t->n > rest)
        memcpy(entries + k, t->entries + rest, (t->n - rest) * sizeof *entries);
    return policy_table_build(out, entries, n);
}

void policies_changed(policies_t *p, const policy_write_t *w)
{
    atomic_fetch_add_explicit(&p->stats.changes, 1, memory_order_relaxed);
    pthread_mutex_lock(&p->load_lock);
    /* the table in force is the one just before this change: apply it (a large table is not read again
     * for every change); else read the whole table */
    policy_table_t t;
    int rc = STORE_ERROR;
    if (p->version + 1 == w->new_version && apply_change(p, w, &t) == 0) {
        install(p, &t, w->new_version);
        rc = STORE_OK;
    }
    pthread_mutex_unlock(&p->load_lock);
    if (rc != STORE_OK && policies_refresh(p, false) != STORE_OK) /* the follower (or the next change) tries again */
        log_line("level=warn event=policy-load error=\"reading the policies failed\"");
}

static void *follow_main(void *arg)
{
    policies_t *p = arg;
    thread_set_name("tally-policies");
    pthread_mutex_lock(&p->wait_lock);
    while (!p->stopping) {
        struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, POLICIES_POLL_MS);
        pthread_cond_timedwait(&p->wake, &p->wait_lock, &deadline);
        if (p->stopping)
            break;
        pthread_mutex_unlock(&p->wait_lock);
        policies_refresh(p, false); /* a failure keeps the table in force until the store answers */
        pthread_mutex_lock(&p->wait_lock);
    }
    pthread_mutex_unlock(&p->wait_lock);
    return NULL;
}

int policies_open(store_t *store, const kinds_t *kinds, policies_t **out, char *err, size_t errlen)
{
    policies_t *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->store = store;
    p->kinds = kinds;
    pthread_rwlock_init(&p->lock, NULL);
    pthread_mutex_init(&p->load_lock, NULL);
    pthread_mutex_init(&p->wait_lock, NULL);
    clock_cond_init_monotonic(&p->wake);
    atomic_store(&p->empty, true);
    if (policies_refresh(p, true) != STORE_OK) {
        snprintf(err, errlen, "reading the item policies from the store failed");
        policies_close(p);
        return -1;
    }
    if (store_shared(store)) {
        if (pthread_create(&p->thread, NULL, follow_main, p) != 0) {
            snprintf(err, errlen, "starting the policies thread failed");
            policies_close(p);
            return -1;
        }
        p->follow = true;
    }
    *out = p;
    return 0;
}

void policies_close(policies_t *p)
{
    if (!p)
        return;
    if (p->follow)
        thread_stop_join(&p->wait_lock, &p->wake, &p->stopping, p->thread);
    policy_table_free(&p->table);
    pthread_rwlock_destroy(&p->lock);
    pthread_mutex_destroy(&p->load_lock);
    pthread_mutex_destroy(&p->wait_lock);
    pthread_cond_destroy(&p->wake);
    free(p);
}

/* --- listing --- */

static json_t *entry_json(const kinds_t *kinds, const policy_entry_t *e)
{
    json_t *obj = policy_json(kinds, &e->policy, false);
    json_t *target = json_stringn(e->target, e->target_len);
    json_t *out = json_object();
    if (!obj || !target || !out || json_object_set_new(out, "target", target) != 0 || json_object_update(out, obj)) {
        json_decref(obj);
        json_decref(out);
        return NULL;
    }
    json_decref(obj);
    return out;
}

json_t *policies_list_json(policies_t *p)
{
    json_t *list = json_array();
    pthread_rwlock_rdlock(&p->lock);
    for (size_t i = 0; list && i < p->table.n; i++) {
        json_t *e = entry_json(p->kinds, &p->table.entries[i]);
        if (!e || json_array_append_new(list, e) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    pthread_rwlock_unlock(&p->lock);
    return list ? json_pack("{s:o}", "policies", list) : NULL;
}

json_t *policies_one_json(policies_t *p, span_t target)
{
    pthread_rwlock_rdlock(&p->lock);
    const policy_entry_t *e = policy_table_find(&p->table, target);
    json_t *out = e ? entry_json(p->kinds, e) : NULL;
    pthread_rwlock_unlock(&p->lock);
    return out;
}

/* --- a change, decided in the writer's transaction --- */

typedef struct {
    span_t key;
    uint64_t count;
    bool exists;
    uint64_t version;
} scan_t;

static int scan_counter(void *arg, span_t key, span_t value)
{
    scan_t *s = arg;
    if (span_eq_str(key, VERSION_KEY))
        parse_counter(value, &s->version, &s->count);
    return 0;
}

static int scan_target(void *arg, span_t key, span_t value)
{
    (void)value;
    scan_t *s = arg;
    if (span_eq(key, s->key))
        s->exists = true;
    return 0;
}

static int decide(store_write_t *tx, write_cmd_t *cmd, write_aux_t *aux)
{
    policy_write_t *w = (policy_write_t *)cmd;
    scan_t s = {.key = span_of(w->key)};
    aux->n = 0;
    aux->delete_from = aux->delete_to = (span_t){0};
    bool usable;
    int rc = features_require(tx, FEATURE_VERSION_POLICIES_VOIDS, "item policies", &cmd->answer, &usable);
    if (rc != STORE_OK || !usable)
        return rc; /* refused: nothing written */
    /* the counter first: its lock orders every change of every node; then the target's record */
    rc = store_aux_read_locked(tx, SPAN_LIT(VERSION_KEY), scan_counter, &s);
    if (rc == STORE_OK)
        rc = store_aux_read_locked(tx, span_of(w->key), scan_target, &s);
    if (rc != STORE_OK)
        return rc;
    if (w->put && !s.exists && s.count >= POLICY_MAX) {
        answer_problem(&cmd->answer, 400, "too-many-policies", "at most 10000 policies; delete one first");
        return STORE_OK;
    }
    if (!w->put && !s.exists) {
        answer_problem(&cmd->answer, 404, "not-found", "no policy for that target");
        return STORE_OK;
    }
    uint64_t count = s.count + (w->put && !s.exists) - (!w->put && s.exists);
    w->new_version = s.version + 1;
    snprintf(w->version, sizeof w->version, "%llu %llu", (unsigned long long)w->new_version, (unsigned long long)count);
    if (w->put) {
        aux->keys[aux->n] = span_of(w->key);
        aux->values[aux->n++] = span_of(w->value);
        json_t *body = policy_json(w->policies->kinds, &w->policy, false);
        json_t *out = json_pack("{s:s%}", "target", w->target, w->target_len);
        if (!body || !out || json_object_update(out, body) != 0) {
            json_decref(body);
            json_decref(out);
            return STORE_ERROR;
        }
        json_decref(body);
        answer_json(&cmd->answer, 200, out);
    } else {
        aux->delete_from = span_of(w->key);
        aux->delete_to = span_of(w->key_end);
        answer_set_body(&cmd->answer, 204, ANSWER_JSON, NULL, 0);
    }
    aux->keys[aux->n] = SPAN_LIT(VERSION_KEY);
    aux->values[aux->n++] = span_of(w->version);
    return STORE_OK;
}

void policy_write_init(policy_write_t *w, policies_t *p, span_t target, const policy_t *policy, bool put)
{
    memset(w, 0, sizeof *w);
    w->cmd.type = WRITE_AUX;
    w->cmd.aux = &w->aux;
    w->aux.decide = decide;
    w->policies = p;
    w->put = put;
    memcpy(w->target, target.ptr, target.len);
    w->target_len = target.len;
    snprintf(w->key, sizeof w->key, POLICY_PREFIX "%.*s", (int)target.len, target.ptr);
    /* the key and nothing after it: no target holds a byte below '*' */
    snprintf(w->key_end, sizeof w->key_end, POLICY_PREFIX "%.*s\x01", (int)target.len, target.ptr);
    if (put) {
        w->policy = *policy;
        json_t *stored = policy_json(p->kinds, policy, true);
        w->value = stored ? json_dumps(stored, JSON_COMPACT | JSON_REALS) : NULL;
        json_decref(stored);
    }
}

void policy_write_free(policy_write_t *w)
{
    free(w->value);
    w->value = NULL;
    answer_free(&w->cmd.answer);
}
