/* writer.c — the writer thread: group commit of reaction writes, with the fold and the sweep. On a
 * store that folds apart (store_folds_apart: a database server's) the fold has a thread of its own,
 * the fold thread, with transactions of its own beside the writer's batches. */
#include "engine/writer.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/itemmap.h"
#include "core/log.h"
#include "engine/features.h"
#include "engine/pipeline.h"
#include "engine/policies.h"
#include "engine/thread.h"
#include "engine/voids.h"

/* The writer this thread runs (writer_main), NULL on every other thread: writer-only functions assert
 * that they run on their writer's thread, as SQLite's do. Cheap, so kept in release builds. */
static _Thread_local const writer_t *writer_current;
#define WRITER_THREAD_ONLY(w) assert(writer_current == (w))

#define SWEEP_INTERVAL_MS 1000
#define IDLE_WAIT_MS 1000
#define COMMIT_RETRY_MS 100
#define SHARED_FOLD_POLL_MS 50 /* a shared store: how often the fold looks for other nodes' entries */
#define STOP_FAILURES_MAX 3    /* a store that keeps failing must not keep the process from exiting */
#define CONFLICT_RETRIES 8     /* a batch that lost a conflict with another node is run again */

struct writer {
    store_t *store;
    const kinds_t *kinds;
    writer_options_t opt;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    write_cmd_t *head, *tail; /* the queue, under lock */
    size_t queued;
    bool stopping;
    /* the fold thread (apart), under lock */
    bool apart; /* the fold runs on the fold thread (store_folds_apart), never in a batch */
    pthread_t fold_thread;
    pthread_cond_t fold_wake;
    bool fold_nudged;   /* a batch with transitions committed since the fold last looked */
    bool fold_stopping; /* the writer thread has ended: one last fold, then the fold thread ends */
    /* the thread that folds (writer thread, or the fold thread when apart) only */
    bool fold_backlog;                      /* entries remain after the last fold (or unknown, at start) */
    uint64_t last_fold_ms;                  /* monotonic */
    uint64_t fold_backoff_ms;               /* the fold thread: after a failed fold, none before then */
    uint64_t pending_folded, pending_items; /* folded in the open transaction: counted once it commits */
    bool fold_failing;                      /* the fold thread: the last fold failed */
    /* writer thread only */
    uint64_t last_sweep_ms;
    uint64_t backoff_until_ms; /* after a failed commit: no fold or sweep before then */
    unsigned stop_failures;
    bool unannounced; /* batches with transitions committed that readers may not see yet (store_pending) */
    bool failing; /* the last commit failed */ /* commits failed while stopping: past STOP_FAILURES_MAX, stop anyway */
    store_pair_t *prep_rows, *prep_keys, *prep_claims; /* batch_max each: what a batch names to store_write_prepare */
    uint32_t tx_appends;                               /* log entries appended in the current transaction */
    uint64_t last_seq;                                 /* the last one's position (0: taken at commit) */
    char (*resume_saved)[ID_MAX_LEN]; /* batch_max each: the commands' resume points before an attempt */
    size_t *resume_saved_len;
    /* The write answers' counts (writer thread; each attempt anew). own: per item, the deltas of the
     * entries this transaction appended so far. Where the counts are known in the transaction (the
     * embedded store, which folds in it), base: per item, the counts as of the transaction's start
     * (folded, plus the entries not folded yet), read before its first command; else asks, filled by
     * the commit (store_counts_at_commit). */
    bool counts_at_commit;
    itemmap_t own, base;
    /* Where the counts are known in the transaction: per item, the deltas of the committed entries
     * after the checkpoint, kept across transactions (so that a batch never scans the log for them,
     * however long --fold-window leaves them), while valid: from a commit whose fold left nothing
     * behind until one whose fold did not finish (then the log is scanned until the next). tx_*: what
     * the open transaction did. */
    itemmap_t unfolded;
    bool unfolded_valid;
    bool tx_folded, tx_fold_complete;
    uint32_t tx_appends_after_fold;
    store_counts_ask_t *asks; /* batch_max */
    size_t nasks;
    store_claim_t *claims; /* batch_max: the batch's claims, in order (writer_prepare) */
    size_t nclaims;
    bool tx_commit_sent; /* the attempt's commit was sent: a STORE_UNAVAILABLE leaves its outcome unknown */
    writer_stats_t stats;
};

const writer_stats_t *writer_stats(const writer_t *w)
{
    return &w->stats;
}

uint64_t writer_lag_ms(const writer_t *w)
{
    uint64_t oldest = atomic_load_explicit(&w->stats.oldest_unfolded_ms, memory_order_relaxed);
    uint64_t now = clock_ms(CLOCK_REALTIME);
    return oldest && now > oldest ? now - oldest : 0;
}

int writer_submit(writer_t *w, write_cmd_t *cmd)
{
    int rc = -1;
    cmd->next = NULL;
    cmd->submitted_ns = mono_ns();
    pthread_mutex_lock(&w->lock);
    if (!w->stopping && w->queued < w->opt.queue_max) {
        if (w->tail)
            w->tail->next = cmd;
        else
            w->head = cmd;
        w->tail = cmd;
        w->queued++;
        atomic_store_explicit(&w->stats.queue_depth, w->queued, memory_order_relaxed);
        pthread_cond_signal(&w->wake);
        rc = 0;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

/* --- one command, inside the batch's transaction --- */

/* Answers from a stored idempotency record when (user, key) is known and not expired.
 * Returns 1 when the command is answered (replay or mismatch), 0 to go on, <0 on a store error. */
static int idem_lookup(writer_t *w, store_write_t *tx, write_cmd_t *cmd, uint64_t now_ms)
{
    const write_react_t *r = &cmd->react;
    store_idem_t rec = {0};
    span_t user = {r->user, r->user_len}, key = {r->key, r->key_len};
    int rc = store_idem_get(tx, user, key, &rec);
    if (rc == STORE_NOTFOUND || (rc == STORE_OK && rec.expires_ms <= now_ms))
        return 0; /* unknown, or past its TTL: unknown from that moment on */
    if (rc != STORE_OK)
        return rc;
    if (memcmp(rec.fingerprint, r->fingerprint, FINGERPRINT_LEN) != 0) {
        answer_idem_mismatch(&cmd->answer);
        return 1;
    }
    char *body = malloc(rec.body.len ? rec.body.len : 1);
    if (body) {
        memcpy(body, rec.body.ptr, rec.body.len);
        answer_set_body(&cmd->answer, rec.status, (answer_type_t)rec.type, body, rec.body.len);
    }
    /* the first answer of this batch, its cursor still to come: spliced in after the commit, into
     * room held from now on (the splice after a commit must not allocate) */
    if (!body || (rec.cursor_ordinal && answer_reserve_cursor(&cmd->answer) != 0)) {
        answer_problem(&cmd->answer, 500, "internal", "out of memory");
        return 1;
    }
    cmd->answer.has_etag = rec.has_etag;
    cmd->answer.etag_version = rec.etag_version;
    cmd->answer.replayed = true;
    cmd->react.cursor_ordinal = rec.cursor_ordinal;
    cmd->react.counts_ask = rec.counts_ask; /* the first answer's counts, from the same ask */
    if (rec.counts_ask && answer_reserve(&cmd->answer, ANSWER_CURSOR_ROOM + answer_counts_room(w->kinds)) != 0) {
        answer_problem(&cmd->answer, 500, "internal", "out of memory");
        return 1;
    }
    atomic_fetch_add_explicit(&w->stats.replays, 1, memory_order_relaxed);
    return 1;
}

static int idem_store(writer_t *w, store_write_t *tx, const write_cmd_t *cmd, uint64_t now_ms)
{
    const answer_t *a = &cmd->answer;
    const write_react_t *r = &cmd->react;
    if (!((a->status >= 200 && a->status < 300) || a->status == 412))
        return STORE_OK; /* only answers of processing are stored */
    store_idem_t rec = {
        .expires_ms = now_ms + w->opt.idem_ttl_ms,
        .status = (uint16_t)a->status,
        .type = (uint8_t)a->type,
        .has_etag = a->has_etag,
        .etag_version = a->etag_version,
        .body = {a->body, a->body_len},
        .cursor_ordinal = r->cursor_ordinal,
        .counts_ask = r->counts_ask,
    };
    memcpy(rec.fingerprint, r->fingerprint, FINGERPRINT_LEN);
    return store_idem_put(tx, (span_t){r->user, r->user_len}, (span_t){r->key, r->key_len}, &rec);
}

/* Whether user is voided, read from the transaction once per command: *voided is -1 until then. */
static int user_voided_once(store_write_t *tx, span_t user, int *voided)
{
    if (*voided >= 0)
        return STORE_OK;
    bool v = false;
    int rc = store_user_voided(tx, user, &v);
    if (rc == STORE_OK)
        *voided = v;
    return rc;
}

/* Applies one real change: the row at version+1, its transition in the log. The caller decided
 * that target differs from the row's set (invariant 2: a transition is a real change). voided: the
 * command's user_voided_once. */
static int writer_transition(writer_t *w, store_write_t *tx, span_t item, span_t user, reaction_row_t *row,
                             kindset_t target, uint64_t now_ms, int *voided)
{
    assert(target != row->set && "a transition changes the set");
    assert(!(target & ~KINDSET_ALL(w->kinds->count)) && !(row->set & ~KINDSET_ALL(w->kinds->count)));
    assert((w->kinds->mode == REACTION_MODE_MANY || kindset_size(target) <= 1) && "one mode holds one kind");
    if (row->version == UINT64_MAX) { /* read from the disk: no row reaches it by counting */
        log_line("level=error event=store-corrupt table=rows item=\"%.*s\" error=\"version at its maximum\"",
                 (int)item.len, item.ptr);
        return STORE_ERROR;
    }
    reaction_row_t next = {target, row->version + 1};
    assert(next.version == row->version + 1 && next.version > row->version && "a version rises by exactly one");
    transition_t t = {item, user, row->set, target, next.version, now_ms, 0};
    int rc = user_voided_once(tx, user, voided); /* a voided user's rows count neither before nor after */
    if (rc != STORE_OK)
        return rc;
    t.uncounted = *voided ? TRANSITION_UNCOUNTED_BOTH : 0;
    uint64_t seq, none = 0;
    rc = store_row_put(tx, item, user, &next);
    if (rc == STORE_OK)
        rc = store_log_append(tx, &t, &seq);
    if (rc != STORE_OK)
        return rc;
    itemmap_entry_t *own = itemmap_get(&w->own, item);
    if (!own)
        return STORE_ERROR;                 /* out of memory: the batch is void */
    transition_deltas_add(&t, own->deltas); /* with its counted bits: a voided user's moves nothing */
    w->tx_appends_after_fold++;
    atomic_compare_exchange_strong(&w->stats.oldest_unfolded_ms, &none, now_ms);
    atomic_fetch_add_explicit(&w->stats.transitions, 1, memory_order_relaxed);
    w->tx_appends++;
    w->last_seq = seq;
    *row = next;
    return STORE_OK;
}

/* WRITE_CLEAR_*: one chunk of rows of an item (or of a user) set to none. */
typedef struct {
    writer_t *w;
    store_write_t *tx;
    write_cmd_t *cmd;
    uint64_t now_ms;
    int rc;
} clear_walk_t;

static int clear_one(void *arg, span_t name)
{
    clear_walk_t *c = arg;
    write_cmd_t *cmd = c->cmd;
    write_clear_t *cl = &cmd->clear;
    span_t fixed = {cl->name, cl->name_len};
    span_t item = cmd->type == WRITE_CLEAR_ITEM ? fixed : name, user = cmd->type == WRITE_CLEAR_ITEM ? name : fixed;
    reaction_row_t row;
    memcpy(cl->resume, name.ptr, name.len);
    cl->resume_len = name.len;
    if ((c->rc = store_row_get(c->tx, item, user, &row)) != STORE_OK)
        return 1;
    if (row.set == KINDSET_EMPTY)
        return 0;
    int voided = -1;
    if ((c->rc = writer_transition(c->w, c->tx, item, user, &row, KINDSET_EMPTY, c->now_ms, &voided)) != STORE_OK)
        return 1;
    cl->changed++;
    return 0;
}

static int writer_fold(writer_t *w, store_write_t *tx, uint64_t mono_now_ms, bool may_fold);

/* Before a user's walk on a store that walks the user's list (the embedded one): the whole log is
 * folded first, in this transaction, so the list holds the user's newest reactions and no longer
 * holds the rows earlier chunks cleared. A shared store walks its rows by user and needs nothing. */
static int writer_catch_up(writer_t *w, store_write_t *tx)
{
    if (store_shared(w->store))
        return STORE_OK;
    int rc = STORE_OK;
    do
        rc = writer_fold(w, tx, clock_ms(CLOCK_MONOTONIC), store_write_may_fold(tx));
    while (rc == STORE_OK && w->fold_backlog);
    return rc;
}

static int writer_clear(writer_t *w, store_write_t *tx, write_cmd_t *cmd, uint64_t now_ms)
{
    clear_walk_t c = {w, tx, cmd, now_ms, STORE_OK};
    if (cmd->type == WRITE_CLEAR_USER) {
        int rc = writer_catch_up(w, tx);
        if (rc != STORE_OK)
            return rc;
    }
    write_clear_t *cl = &cmd->clear;
    size_t visited = 0, deleted = 0;
    span_t after = {cl->resume, cl->resume_len}, fixed = {cl->name, cl->name_len};
    cl->changed = 0;
    char last[ID_MAX_LEN];
    size_t last_len = 0;
    int rc = cmd->type == WRITE_CLEAR_ITEM
                 ? store_item_users(tx, fixed, after, WRITER_CLEAR_CHUNK, clear_one, &c, &visited)
                 : store_user_items(tx, fixed, after, WRITER_CLEAR_CHUNK, clear_one, &c, &visited, last, &last_len);
    if (rc == STORE_OK)
        rc = c.rc;
    if (rc == STORE_OK && cmd->type == WRITE_CLEAR_USER) { /* where the next chunk goes on (or starts over) */
        memcpy(cl->resume, last, last_len);
        cl->resume_len = last_len;
    }
    if (rc == STORE_OK && cmd->type == WRITE_CLEAR_USER)
        rc = store_idem_delete_user(tx, fixed, WRITER_CLEAR_CHUNK, &deleted);
    if (rc != STORE_OK)
        return rc;
    assert(cl->changed <= visited && visited <= WRITER_CLEAR_CHUNK);
    cl->more = visited == WRITER_CLEAR_CHUNK || deleted == WRITER_CLEAR_CHUNK;
    answer_set_body(&cmd->answer, 200, ANSWER_JSON, NULL, 0);
    return STORE_OK;
}

/* WRITE_VOID: the walk over the user's rows. */
typedef struct {
    writer_t *w;
    store_write_t *tx;
    write_cmd_t *cmd;
    uint64_t now_ms;
    int rc;
} void_walk_t;

static int void_one(void *arg, span_t item)
{
    void_walk_t *v = arg;
    write_void_t *vu = &v->cmd->void_user;
    span_t user = {vu->user, vu->user_len};
    reaction_row_t row;
    if ((v->rc = store_row_get(v->tx, item, user, &row)) != STORE_OK)
        return 1;
    if (row.set == KINDSET_EMPTY)
        return 0; /* counts nothing either way */
    transition_t t = {item,
                      user,
                      row.set,
                      row.set,
                      row.version,
                      v->now_ms,
                      vu->restore ? TRANSITION_UNCOUNTED_BEFORE : TRANSITION_UNCOUNTED_AFTER};
    uint64_t seq, none = 0;
    if ((v->rc = store_log_append(v->tx, &t, &seq)) != STORE_OK)
        return 1;
    /* a void (restore) moves the counts: it is one of the entries after the checkpoint until folded */
    itemmap_entry_t *own = itemmap_get(&v->w->own, item);
    if (!own) {
        v->rc = STORE_ERROR; /* out of memory: the batch is void */
        return 1;
    }
    transition_deltas_add(&t, own->deltas);
    v->w->tx_appends_after_fold++;
    atomic_compare_exchange_strong(&v->w->stats.oldest_unfolded_ms, &none, v->now_ms);
    v->w->tx_appends++;
    v->w->last_seq = seq;
    vu->rows++;
    return 0;
}

typedef struct {
    span_t key;
    bool found;
    uint64_t version, count;
} void_flag_t;

static int void_flag_read(void *arg, span_t key, span_t value)
{
    void_flag_t *f = arg;
    if (span_eq(key, f->key))
        f->found = true;
    if (span_eq_str(key, VOIDS_COUNTER_KEY))
        voids_parse_counter(value, &f->version, &f->count);
    return 0;
}

/* Sets (or clears) the flag under the lock every write of the user reads it under, then writes one
 * entry per counted row: the same transaction, so no write of the user falls between. */
static int writer_void(writer_t *w, store_write_t *tx, write_cmd_t *cmd, uint64_t now_ms)
{
    write_void_t *vu = &cmd->void_user;
    span_t user = {vu->user, vu->user_len};
    char key[sizeof STORE_VOID_PREFIX + ID_MAX_LEN + 1], end[sizeof key + 1];
    int klen = snprintf(key, sizeof key, "%s%.*s", STORE_VOID_PREFIX, (int)user.len, user.ptr);
    memcpy(end, key, (size_t)klen);
    end[klen] = '\x01'; /* past the key, before any longer user id (ids hold no byte below '-') */
    vu->rows = 0;
    vu->version = 0;
    bool usable = true;
    int rc = vu->feature_checked
                 ? STORE_OK
                 : features_require(tx, FEATURE_VERSION_POLICIES_VOIDS,
                                    vu->restore ? "restoring users" : "voiding users", &cmd->answer, &usable);
    if (rc != STORE_OK || !usable)
        return rc; /* refused: nothing written */
    /* every void and restore decides from the counter first, then the user's flag: one order */
    void_flag_t flag = {.key = {key, (size_t)klen}};
    rc = store_aux_read_locked(tx, SPAN_LIT(VOIDS_COUNTER_KEY), void_flag_read, &flag);
    if (rc == STORE_OK)
        rc = store_aux_read_locked(tx, flag.key, void_flag_read, &flag);
    if (rc != STORE_OK)
        return rc;
    if (flag.found != vu->restore) { /* already as asked */
        char body[48];
        int n = snprintf(body, sizeof body, "{\"%s\":0}", vu->restore ? "restored" : "voided");
        char *copy = strndup(body, (size_t)n);
        if (!copy)
            return STORE_ERROR;
        answer_set_body(&cmd->answer, 200, ANSWER_JSON, copy, (size_t)n);
        return STORE_OK;
    }
    char value[48], counter[48];
    int vlen = snprintf(value, sizeof value, "%llu", (unsigned long long)now_ms);
    uint64_t count = flag.count + (vu->restore ? (flag.count > 0 ? (uint64_t)-1 : 0) : 1);
    vu->version = flag.version + 1;
    int clen =
        snprintf(counter, sizeof counter, "%llu %llu", (unsigned long long)vu->version, (unsigned long long)count);
    rc = vu->restore ? store_aux_delete_range(tx, flag.key, (span_t){end, (size_t)klen + 1})
                     : store_aux_put(tx, flag.key, (span_t){value, (size_t)vlen});
    if (rc == STORE_OK)
        rc = store_aux_put(tx, SPAN_LIT(VOIDS_COUNTER_KEY), (span_t){counter, (size_t)clen});
    if (rc == STORE_OK)
        rc = writer_catch_up(w, tx); /* the embedded store walks the user's list: exact once folded */
    void_walk_t walk = {w, tx, cmd, now_ms, STORE_OK};
    size_t visited = 0, last_len = 0;
    char last[ID_MAX_LEN];
    if (rc == STORE_OK)
        rc = store_user_items(tx, user, (span_t){"", 0}, (size_t)INT64_MAX, void_one, &walk, &visited, last, &last_len);
    if (rc == STORE_OK)
        rc = walk.rc;
    if (rc != STORE_OK)
        return rc;
    char body[64];
    int n = snprintf(body, sizeof body, "{\"%s\":%zu}", vu->restore ? "restored" : "voided", vu->rows);
    char *copy = strndup(body, (size_t)n);
    if (!copy)
        return STORE_ERROR;
    answer_set_body(&cmd->answer, 200, ANSWER_JSON, copy, (size_t)n);
    return STORE_OK;
}

static int writer_aux(store_write_t *tx, write_cmd_t *cmd)
{
    write_aux_t *aux = cmd->aux;
    int rc = STORE_OK;
    if (aux->decide) {
        answer_free(&cmd->answer);
        cmd->answer = (answer_t){0};
        if ((rc = aux->decide(tx, cmd, aux)) != STORE_OK)
            return rc;
        if (cmd->answer.status >= 300)
            return STORE_OK; /* refused: the precondition does not hold now */
    }
    if (aux->delete_to.len)
        rc = store_aux_delete_range(tx, aux->delete_from, aux->delete_to);
    for (size_t i = 0; rc == STORE_OK && i < aux->n; i++)
        rc = store_aux_put(tx, aux->keys[i], aux->values[i]);
    if (rc == STORE_OK && !cmd->answer.status)
        answer_set_body(&cmd->answer, 200, ANSWER_JSON, NULL, 0);
    return rc;
}

/* A recount's correction: the deltas it measured between rows and counts. */
static int writer_adjust(store_write_t *tx, write_cmd_t *cmd)
{
    const write_counts_adjust_t *adj = &cmd->counts_adjust;
    int rc = store_counts_add(tx, (span_t){adj->item, adj->item_len}, adj->deltas);
    if (rc == STORE_OK)
        answer_set_body(&cmd->answer, 200, ANSWER_JSON, NULL, 0);
    return rc;
}

/* A write result that changed something carries its transition's cursor: known now (spliced in, and
 * stored with it), or taken at commit (the store completes the stored record; writer_run_batch the
 * answer on the wire, into the room reserved here: nothing after the commit may fail). The
 * transition is the last one appended. Returns STORE_OK, or STORE_ERROR (out of memory: the batch
 * is void, so that a change is never committed under an error answer). */
static int writer_cursor(writer_t *w, write_cmd_t *cmd)
{
    if (!cmd->react.changed)
        return STORE_OK;
    if (w->last_seq)
        return answer_set_cursor(&cmd->answer, w->last_seq) == 0 ? STORE_OK : STORE_ERROR;
    cmd->react.cursor_ordinal = w->tx_appends;
    return answer_reserve_cursor(&cmd->answer) == 0 ? STORE_OK : STORE_ERROR;
}

/* The item's policy against the write from previous to target: false having answered a refusal (403;
 * nothing is written, nor stored under the Idempotency-Key: only 2xx and 412 answers are). */
static bool policy_allows(writer_t *w, write_cmd_t *cmd, const policy_t *p, kindset_t previous, kindset_t target)
{
    if (!p)
        return true;
    policy_verdict_t v = policy_check(w->kinds, p, previous, target);
    if (v == POLICY_OK)
        return true;
    policies_count_refusal(w->opt.policies, v);
    answer_policy_refusal(&cmd->answer, w->kinds, v, policy_allowed(w->kinds, p), p->max_kinds);
    return false;
}

/* The counts of the transaction's batch items as of its start (the embedded store): each item's
 * folded counts plus its entries after the checkpoint, read before any command of the batch. */
typedef struct {
    itemmap_t *base;
    int rc;
} base_scan_t;

static int base_scan_one(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    base_scan_t *b = arg;
    itemmap_entry_t *e = itemmap_find(b->base, t->item);
    if (e) /* not an item of this batch: not needed */
        transition_deltas_add(t, e->deltas);
    return 0;
}

static int writer_counts_base(writer_t *w, store_write_t *tx, const write_cmd_t *batch)
{
    bool any = false;
    for (const write_cmd_t *c = batch; c; c = c->next) {
        if (c->type != WRITE_REACT || c->react.no_counts)
            continue;
        span_t item = {c->react.item, c->react.item_len};
        if (itemmap_find(&w->base, item))
            continue;
        itemmap_entry_t *e = itemmap_get(&w->base, item);
        if (!e)
            return STORE_ERROR;
        int rc = store_counts_folded(tx, item, e->deltas);
        if (rc != STORE_OK)
            return rc;
        const itemmap_entry_t *u = w->unfolded_valid ? itemmap_find(&w->unfolded, item) : NULL;
        for (int c = 0; u && c <= w->kinds->count; c++)
            e->deltas[c] += u->deltas[c];
        any = true;
    }
    if (!any || w->unfolded_valid)
        return STORE_OK;
    uint64_t checkpoint;
    int rc = store_checkpoint_get(tx, &checkpoint);
    base_scan_t b = {&w->base, STORE_OK};
    if (rc == STORE_OK) /* usually nothing: the fold of the batch before caught up */
        rc = store_log_scan(tx, checkpoint, SIZE_MAX, base_scan_one, &b);
    return rc;
}

/* The write answer's counts: exactly the fold of the log up to its own entry (or, unchanged, to the
 * transaction's newest entry so far): the counts as of the transaction's start plus its own entries of
 * the item so far. Known now (spliced, and stored with the answer), or at commit (room reserved, and an
 * ask whose result the commit splices into the stored record and writer_run_batch into the answer).
 * hidden: the item's policy hides them from this writer (null). A voided writer is shown them as a read
 * where they are the viewer shows them: with their own reaction (set, the row now) added back. */
static int writer_counts(writer_t *w, store_write_t *tx, write_cmd_t *cmd, bool hidden, kindset_t set, int *voided)
{
    write_react_t *r = &cmd->react;
    span_t item = {r->item, r->item_len};
    if (hidden)
        return answer_set_counts(&cmd->answer, w->kinds, NULL) == 0 ? STORE_OK : STORE_ERROR;
    int rc = user_voided_once(tx, (span_t){r->user, r->user_len}, voided);
    if (rc != STORE_OK)
        return rc;
    int64_t back[KINDS_MAX + 1] = {0};
    if (*voided)
        reaction_deltas_add(KINDSET_EMPTY, set, back);
    const itemmap_entry_t *own = itemmap_find(&w->own, item);
    if (!w->counts_at_commit) {
        const itemmap_entry_t *base = itemmap_find(&w->base, item);
        if (!base)
            return STORE_ERROR; /* read before the batch for every item of it */
        int64_t counts[KINDS_MAX + 1];
        for (int c = 0; c <= w->kinds->count; c++)
            counts[c] = base->deltas[c] + (own ? own->deltas[c] : 0) + back[c];
        return answer_set_counts(&cmd->answer, w->kinds, counts) == 0 ? STORE_OK : STORE_ERROR;
    }
    assert(w->nasks < w->opt.batch_max && "one ask a command at most");
    store_counts_ask_t *a = &w->asks[w->nasks];
    *a = (store_counts_ask_t){.item = item, .user = {r->user, r->user_len}, .key = {r->key, r->key_len}};
    for (int c = 0; c <= w->kinds->count; c++)
        a->deltas[c] = (own ? own->deltas[c] : 0) + back[c];
    if (answer_reserve(&cmd->answer, ANSWER_CURSOR_ROOM + answer_counts_room(w->kinds)) != 0)
        return STORE_ERROR;
    r->counts_ask = (uint32_t)++w->nasks;
    return STORE_OK;
}

/* A reaction write: idempotency record, row, If-Match, policy, transition. */
static int writer_react(writer_t *w, store_write_t *tx, write_cmd_t *cmd, uint64_t now_ms)
{
    write_react_t *r = &cmd->react;
    span_t item = {r->item, r->item_len}, user = {r->user, r->user_len};
    if (r->claim && r->key_len && !r->claim_held) /* the key is bound to another request (writer_prepare) */
        return answer_idem_mismatch(&cmd->answer) == 0 ? STORE_OK : STORE_ERROR;
    if (r->key_len) {
        int rc = idem_lookup(w, tx, cmd, now_ms);
        if (rc != 0)
            return rc < 0 ? rc : STORE_OK;
    }
    reaction_row_t row;
    int rc = store_row_get(tx, item, user, &row);
    if (rc != STORE_OK)
        return rc;
    policy_t policy;
    bool has_policy = !r->no_policy && policies_lookup(w->opt.policies, item, &policy);
    if (r->has_if_match && !if_match_holds(&r->if_match, row.version)) {
        answer_version_mismatch(&cmd->answer, w->kinds, row.set, row.version);
    } else {
        kindset_t previous = row.set;
        uint64_t version_before = row.version;
        kindset_t target = reaction_target(w->kinds->mode, r->op, r->arg, previous);
        if (!policy_allows(w, cmd, has_policy ? &policy : NULL, previous, target))
            return STORE_OK;
        int voided = -1; /* read at most once, for the transition and the answer's counts */
        if (target != previous &&
            (rc = writer_transition(w, tx, item, user, &row, target, now_ms, &voided)) != STORE_OK)
            return rc;
        r->changed = target != previous;
        /* invariant 1: the version rises by exactly one on a real change and never otherwise */
        assert(r->changed ? row.version == version_before + 1 && row.set == target
                          : row.version == version_before && row.set == previous);
        /* a change whose answer cannot be rendered voids the batch: never committed under a 500 */
        if (answer_write_result(&cmd->answer, w->kinds, item, row.set, previous, row.version, r->changed) != 0 &&
            r->changed)
            return STORE_ERROR;
        if ((rc = writer_cursor(w, cmd)) != STORE_OK)
            return rc;
        if (!r->no_counts &&
            (rc = writer_counts(w, tx, cmd, has_policy && policy.hidden && !r->admin, row.set, &voided)) != STORE_OK)
            return rc;
    }
    return r->key_len ? idem_store(w, tx, cmd, now_ms) : STORE_OK;
}

/* WRITE_CLAIM: decided with the batch's other claims (writer_prepare); its answer. */
static int writer_claim(write_cmd_t *cmd)
{
    if (!cmd->claim.held && !cmd->claim.release)
        return answer_idem_mismatch(&cmd->answer) == 0 ? STORE_OK : STORE_ERROR;
    answer_set_body(&cmd->answer, 200, ANSWER_JSON, NULL, 0);
    return STORE_OK;
}

/* Decides and applies one command. Returns a STORE_ code; anything but STORE_OK voids the batch.
 * No default: -Wswitch names a new type that is not handled here. */
static int writer_apply(writer_t *w, store_write_t *tx, write_cmd_t *cmd, uint64_t now_ms)
{
    switch (cmd->type) {
    case WRITE_REACT:
        return writer_react(w, tx, cmd, now_ms);
    case WRITE_COUNTS_ADJUST:
        return writer_adjust(tx, cmd);
    case WRITE_CLEAR_ITEM:
    case WRITE_CLEAR_USER:
        return writer_clear(w, tx, cmd, now_ms);
    case WRITE_AUX:
        return writer_aux(tx, cmd);
    case WRITE_VOID:
        return writer_void(w, tx, cmd, now_ms);
    case WRITE_CLAIM:
        return writer_claim(cmd);
    }
    assert(!"unknown write command type"); /* a type outside the enum: the submitter's bug */
    return STORE_ERROR;
}

/* --- one transaction: a batch of commands, then the fold and the sweep when due --- */

static bool fold_due(const writer_t *w, uint64_t mono_now_ms)
{
    return w->opt.fold_window_ms == 0 || mono_now_ms - w->last_fold_ms >= w->opt.fold_window_ms;
}

/* may_fold: what store_write_may_fold said for this transaction. */
static int writer_fold(writer_t *w, store_write_t *tx, uint64_t mono_now_ms, bool may_fold)
{
    pipeline_result_t res;
    w->last_fold_ms = mono_now_ms;
    if (!may_fold) { /* another node folds: its lag is its own to report */
        w->fold_backlog = false;
        atomic_store_explicit(&w->stats.oldest_unfolded_ms, 0, memory_order_relaxed);
        atomic_store_explicit(&w->stats.fold_leader, false, memory_order_relaxed);
        return STORE_OK;
    }
    atomic_store_explicit(&w->stats.fold_leader, true, memory_order_relaxed);
    int rc = pipeline_fold(tx, w->opt.fold_max, &res);
    bool more = false;
    if (rc == STORE_OK && w->opt.fold_more)
        rc = w->opt.fold_more(w->opt.fold_more_arg, tx, &more);
    if (rc != STORE_OK)
        return rc;
    w->tx_folded = true;
    w->tx_fold_complete = !res.more;
    w->tx_appends_after_fold = 0;
    w->last_fold_ms = mono_now_ms;
    w->fold_backlog = res.more || more;
    atomic_store_explicit(&w->stats.oldest_unfolded_ms, res.more ? res.oldest_unfolded_ms : 0, memory_order_relaxed);
    w->pending_folded += res.folded;
    w->pending_items += res.items;
    return STORE_OK;
}

/* After the transaction that folded (the thread that folds): what it folded counted when it
 * committed, forgotten when it did not (a rerun folds it again). */
static void fold_publish(writer_t *w, bool committed)
{
    if (committed && w->pending_folded) {
        histogram_observe(&w->stats.fold_entries, (double)w->pending_folded);
        atomic_fetch_add_explicit(&w->stats.folds, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&w->stats.folded, w->pending_folded, memory_order_relaxed);
        atomic_fetch_add_explicit(&w->stats.fold_items, w->pending_items, memory_order_relaxed);
    }
    w->pending_folded = w->pending_items = 0;
}

/* Expired idempotency records, and log entries behind the checkpoint past their retention or
 * beyond the log's size limit: a bounded amount per commit, so that writes never stall. */
static int writer_sweep(writer_t *w, store_write_t *tx, uint64_t now_ms, uint64_t mono_now)
{
    WRITER_THREAD_ONLY(w);
    size_t swept = 0, claims = 0, pruned = 0;
    uint64_t checkpoint;
    int rc = store_idem_sweep(tx, now_ms, w->opt.sweep_max, &swept);
    if (rc == STORE_OK)
        rc = store_claims_sweep(tx, now_ms, w->opt.sweep_max, &claims);
    if (rc == STORE_OK)
        rc = store_checkpoint_get(tx, &checkpoint);
    if (rc == STORE_OK && w->opt.prune_floor) { /* other folds read this log too */
        uint64_t floor = w->opt.prune_floor(w->opt.fold_more_arg);
        checkpoint = floor < checkpoint ? floor : checkpoint;
    }
    if (rc == STORE_OK) {
        store_stats_t st;
        bool too_big =
            w->opt.log_max_bytes && store_stats(w->store, &st) == STORE_OK && st.log_bytes > w->opt.log_max_bytes;
        uint64_t before_ms = too_big                            ? UINT64_MAX
                             : now_ms > w->opt.log_retention_ms ? now_ms - w->opt.log_retention_ms
                                                                : 0;
        rc = store_log_prune(tx, checkpoint, before_ms, WRITER_PRUNE_MAX, &pruned);
    }
    atomic_fetch_add_explicit(&w->stats.swept, swept + claims, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->stats.pruned, pruned, memory_order_relaxed);
    if (swept < w->opt.sweep_max && claims < w->opt.sweep_max && pruned < WRITER_PRUNE_MAX)
        w->last_sweep_ms = mono_now; /* else more are due: sweep again with the next commit */
    return rc;
}

static const char *store_error_detail(int rc)
{
    switch (rc) {
    case STORE_FULL:
        return "the store is out of space; nothing was written";
    case STORE_UNAVAILABLE:
        return "the database cannot be reached; the write may or may not have been applied: retry with the same "
               "Idempotency-Key to learn its outcome";
    default:
        return "the store failed to commit; nothing was written";
    }
}

/* One claim of the batch, for store_claims_apply: it expires with the TTL of the records. */
static void writer_claim_add(writer_t *w, bool release, span_t user, span_t key, const uint8_t *fingerprint,
                             uint64_t now_ms)
{
    assert(w->nclaims < w->opt.batch_max);
    w->prep_claims[w->nclaims] = (store_pair_t){user, key};
    w->claims[w->nclaims++] = (store_claim_t){
        .release = release,
        .user = user,
        .key = key,
        .fingerprint = fingerprint,
        .expires_ms = now_ms + w->opt.idem_ttl_ms,
    };
}

/* Names the batch's rows, idempotency records and claims to the store before any is read, and whether
 * the transaction will fold (fold_scan: the log entries the fold will scan; 0: no fold): a shared store
 * reads them all in one round trip; then decides the batch's claims, all in one call. */
static int writer_prepare(writer_t *w, store_write_t *tx, write_cmd_t *batch, size_t fold_scan, uint64_t now_ms)
{
    size_t nrows = 0, nkeys = 0;
    w->nclaims = 0;
    for (write_cmd_t *c = batch; c; c = c->next) {
        if (c->type != WRITE_REACT) {
            if (c->type == WRITE_CLAIM)
                writer_claim_add(w, c->claim.release, (span_t){c->claim.user, c->claim.user_len},
                                 (span_t){c->claim.key, c->claim.key_len}, c->claim.fingerprint, now_ms);
            continue;
        }
        const write_react_t *r = &c->react;
        w->prep_rows[nrows++] = (store_pair_t){{r->item, r->item_len}, {r->user, r->user_len}};
        if (r->key_len)
            w->prep_keys[nkeys++] = (store_pair_t){{r->user, r->user_len}, {r->key, r->key_len}};
        if (r->claim && r->key_len)
            writer_claim_add(w, false, (span_t){r->user, r->user_len}, (span_t){r->key, r->key_len}, r->fingerprint,
                             now_ms);
    }
    int rc = store_write_prepare(tx, w->prep_rows, nrows, w->prep_keys, nkeys, w->prep_claims, w->nclaims, fold_scan);
    if (rc != STORE_OK || !w->nclaims)
        return rc;
    if ((rc = store_claims_apply(tx, w->claims, w->nclaims, now_ms)) != STORE_OK)
        return rc;
    size_t i = 0;
    for (write_cmd_t *c = batch; c; c = c->next) {
        if (c->type == WRITE_CLAIM)
            c->claim.held = w->claims[i++].held;
        else if (c->type == WRITE_REACT && c->react.claim && c->react.key_len)
            c->react.claim_held = w->claims[i++].held;
    }
    return STORE_OK;
}

/* Whether the batch is reactions (and claims, which only write transactions read) only. */
static bool only_reactions(const write_cmd_t *batch)
{
    for (const write_cmd_t *c = batch; c; c = c->next)
        if (c->type != WRITE_REACT && c->type != WRITE_CLAIM)
            return false;
    return batch != NULL;
}

/* Whether more commands wait behind this batch (store_write_defer asks once the batch is durable):
 * then the store may show it to readers with the next ones. When nothing waits, everything is seen
 * at once, as before: a client that reads after its write's answer sees it in the counts, the lists
 * and the change feed, unless others keep the writer busy. */
static bool more_waiting(void *arg)
{
    writer_t *w = arg;
    pthread_mutex_lock(&w->lock);
    bool more = w->head != NULL && !w->stopping;
    pthread_mutex_unlock(&w->lock);
    return more;
}

/* One attempt at the batch's transaction: the commands, then the fold and the sweep when due. Any
 * other command than a reaction begins from what readers see (store_flush). */
static int writer_attempt(writer_t *w, write_cmd_t *batch, bool force_fold, uint64_t now_ms, uint64_t mono_now,
                          bool *folded, uint64_t *log_base)
{
    WRITER_THREAD_ONLY(w);
    store_write_t *tx = NULL;
    w->tx_appends = 0;
    itemmap_clear(&w->own);
    itemmap_clear(&w->base);
    w->nasks = 0;
    w->tx_folded = w->tx_fold_complete = false;
    w->tx_appends_after_fold = 0;
    *log_base = 0;
    *folded = false;
    if (!w->apart) /* else the fold thread's */
        fold_publish(w, false);
    bool reactions = only_reactions(batch);
    int rc = !reactions && store_pending(w->store) ? store_flush(w->store) : STORE_OK;
    if (rc != STORE_OK)
        return rc;
    rc = store_write_begin(w->store, &tx);
    /* Whether this transaction folds is known before the batch is read, so that a shared store can
     * read the fold's checkpoint and log in the same round trip as the batch's rows. */
    bool fold = rc == STORE_OK && !w->apart && (force_fold || fold_due(w, mono_now));
    bool may_fold = fold && store_write_may_fold(tx);
    if (rc == STORE_OK)
        rc = writer_prepare(w, tx, batch, may_fold ? pipeline_fold_scan(w->opt.fold_max) : 0, now_ms);
    if (rc == STORE_OK && !w->counts_at_commit)
        rc = writer_counts_base(w, tx, batch);
    for (write_cmd_t *c = batch; rc == STORE_OK && c; c = c->next)
        rc = writer_apply(w, tx, c, now_ms);
    if (rc == STORE_OK && w->nasks)
        rc = store_counts_at_commit(tx, w->asks, w->nasks);
    if (rc == STORE_OK && fold) {
        rc = writer_fold(w, tx, mono_now, may_fold);
        *folded = true;
    }
    if (rc == STORE_OK && mono_now - w->last_sweep_ms >= SWEEP_INTERVAL_MS)
        rc = writer_sweep(w, tx, now_ms, mono_now);
    if (rc == STORE_OK && reactions) /* their rows are seen at once; the rest with the next batches' */
        store_write_defer(tx, more_waiting, w);
    w->tx_commit_sent = tx && rc == STORE_OK;
    if (tx)
        rc = rc == STORE_OK ? store_write_commit_at(tx, log_base) : (store_write_abort(tx), rc);
    return rc;
}

/* Saves what an attempt changes in the commands (a clear's resume point), and puts the commands
 * back as they were after an attempt that did not commit. */
static void writer_save(writer_t *w, const write_cmd_t *batch)
{
    WRITER_THREAD_ONLY(w);
    size_t i = 0;
    for (const write_cmd_t *c = batch; c; c = c->next, i++) {
        bool clear = c->type == WRITE_CLEAR_ITEM || c->type == WRITE_CLEAR_USER;
        w->resume_saved_len[i] = clear ? c->clear.resume_len : 0;
        if (clear)
            memcpy(w->resume_saved[i], c->clear.resume, c->clear.resume_len);
    }
}

static void writer_reset(writer_t *w, write_cmd_t *batch)
{
    WRITER_THREAD_ONLY(w);
    size_t i = 0;
    for (write_cmd_t *c = batch; c; c = c->next, i++) {
        answer_free(&c->answer);
        c->answer = (answer_t){0};
        switch (c->type) {
        case WRITE_REACT:
            c->react.changed = 0;
            c->react.claim_held = false;
            c->react.cursor_ordinal = 0;
            c->react.counts_ask = 0;
            break;
        case WRITE_CLEAR_ITEM:
        case WRITE_CLEAR_USER:
            c->clear.changed = 0;
            c->clear.more = false;
            memcpy(c->clear.resume, w->resume_saved[i], w->resume_saved_len[i]);
            c->clear.resume_len = w->resume_saved_len[i];
            break;
        case WRITE_VOID:
            c->void_user.rows = 0;
            c->void_user.version = 0;
            break;
        case WRITE_CLAIM:
            c->claim.held = false;
            break;
        case WRITE_COUNTS_ADJUST:
        case WRITE_AUX:
            break;
        }
    }
}

/* After a committed transaction (where the counts are known in it): the entries after the checkpoint
 * as it left them. A fold that finished with nothing appended after it leaves none; a transaction that
 * did not fold adds its own; a fold that did not finish leaves them unknown until the next that does. */
static void unfolded_commit(writer_t *w)
{
    if (w->tx_folded) {
        itemmap_clear(&w->unfolded);
        w->unfolded_valid = w->tx_fold_complete && w->tx_appends_after_fold == 0;
        return;
    }
    for (size_t i = 0; w->unfolded_valid && i < w->own.count; i++) {
        const itemmap_entry_t *o = &w->own.entries[i];
        itemmap_entry_t *u = itemmap_get(&w->unfolded, (span_t){o->item, o->item_len});
        if (!u) { /* out of memory: the log is scanned until the next fold that finishes */
            w->unfolded_valid = false;
            break;
        }
        for (int c = 0; c <= w->kinds->count; c++)
            u->deltas[c] += o->deltas[c];
    }
}

/* Tells the change feed's waiters (on_commit) of batches with transitions, once readers can see
 * them. */
static void writer_announce(writer_t *w)
{
    WRITER_THREAD_ONLY(w);
    if (!w->unannounced || store_pending(w->store))
        return;
    w->unannounced = false;
    if (w->opt.on_commit)
        w->opt.on_commit(w->opt.on_commit_arg);
}

/* Runs one transaction over batch (may be empty). Every command of the batch is answered: with its
 * result when the commit is durable, with 503 when it is not. */
static void writer_run_batch(writer_t *w, write_cmd_t *batch, size_t n, bool force_fold)
{
    WRITER_THREAD_ONLY(w);
    uint64_t now_ms = clock_ms(CLOCK_REALTIME), mono_now = clock_ms(CLOCK_MONOTONIC);
    uint64_t oldest_before = atomic_load_explicit(&w->stats.oldest_unfolded_ms, memory_order_relaxed);
    uint64_t transitions_before = atomic_load_explicit(&w->stats.transitions, memory_order_relaxed);
    bool folded = false;
    uint64_t log_base = 0;
    writer_save(w, batch);
    int rc = writer_attempt(w, batch, force_fold, now_ms, mono_now, &folded, &log_base);
    for (int attempt = 1; rc == STORE_RETRY && attempt < CONFLICT_RETRIES; attempt++) {
        /* lost a conflict with another node (nothing of it was applied): the same batch again */
        atomic_fetch_add_explicit(&w->stats.conflict_retries, 1, memory_order_relaxed);
        if (!w->apart) /* else the fold thread's own */
            atomic_store_explicit(&w->stats.oldest_unfolded_ms, oldest_before, memory_order_relaxed);
        atomic_store_explicit(&w->stats.transitions, transitions_before, memory_order_relaxed);
        writer_reset(w, batch);
        rc = writer_attempt(w, batch, force_fold, now_ms, mono_now, &folded, &log_base);
    }
    if (!w->apart)
        fold_publish(w, rc == STORE_OK);
    if (rc == STORE_OK && !w->counts_at_commit)
        unfolded_commit(w);
    if (rc != STORE_OK) {
        if (n || !w->failing) /* an empty batch (a fold, a poll) failing again says nothing new */
            log_line("level=error event=commit-failed commands=%zu error=\"%s\"", n, store_error_detail(rc));
        w->failing = true;
        if (!w->apart)
            atomic_store_explicit(&w->stats.oldest_unfolded_ms, oldest_before, memory_order_relaxed);
        if (folded)
            w->fold_backlog = true;
        atomic_fetch_add_explicit(&w->stats.failed_commands, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&w->stats.commit_failures, 1, memory_order_relaxed);
        atomic_store_explicit(&w->stats.transitions, transitions_before, memory_order_relaxed);
        w->backoff_until_ms = mono_now + COMMIT_RETRY_MS; /* a full disk must not become a busy loop */
        w->stop_failures += w->stopping;
    } else {
        w->failing = false;
        bool logged = atomic_load_explicit(&w->stats.transitions, memory_order_relaxed) != transitions_before;
        if (logged && w->apart) { /* the fold thread folds them next */
            pthread_mutex_lock(&w->lock);
            w->fold_nudged = true;
            pthread_cond_signal(&w->fold_wake);
            pthread_mutex_unlock(&w->lock);
        }
        w->unannounced |= logged;
    }
    writer_announce(w); /* a failed batch too: the store showed the batches deferred before it */
    if (n)
        histogram_observe(&w->stats.batch_commands, (double)n);
    uint64_t done_ns = mono_ns();
    atomic_fetch_add_explicit(&w->stats.batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->stats.commands, n, memory_order_relaxed);
    if (w->opt.release_begin)
        w->opt.release_begin(w->opt.release_arg);
    for (write_cmd_t *c = batch, *next; c; c = next) {
        next = c->next; /* done may free c */
        c->maybe_applied = rc == STORE_UNAVAILABLE && w->tx_commit_sent;
        if (rc != STORE_OK) {
            answer_problem(&c->answer, 503, "unavailable", store_error_detail(rc));
            c->answer.retry_after_s = 1;
        } else if (c->type == WRITE_REACT && c->react.cursor_ordinal &&
                   answer_set_cursor(&c->answer, log_base + c->react.cursor_ordinal) != 0) {
            /* the position came with the commit; the store spliced the same into the stored record.
             * The room was reserved before the commit, so this cannot fail; if it did, the committed
             * write is still answered as done, without its cursor, never as a failure. */
            log_line("level=error event=cursor-splice-failed");
        }
        if (rc == STORE_OK && c->type == WRITE_REACT && c->react.counts_ask) {
            /* the counts came with the commit, spliced into the stored record the same way; room
             * reserved before it, so this cannot fail either */
            const store_counts_ask_t *a = &w->asks[c->react.counts_ask - 1];
            if (!a->filled || answer_set_counts(&c->answer, w->kinds, a->out) != 0)
                log_line("level=error event=counts-splice-failed");
        }
        if (c->type == WRITE_REACT)
            histogram_observe(&w->stats.write_seconds, (double)(done_ns - c->submitted_ns) / 1e9);
        if (rc == STORE_OK && c->type == WRITE_VOID && c->void_user.version && w->opt.voids) /* in force here now */
            voids_changed(w->opt.voids, (span_t){c->void_user.user, c->void_user.user_len}, !c->void_user.restore,
                          c->void_user.version, c->void_user.rows);
        c->done(c);
    }
    if (w->opt.release_end)
        w->opt.release_end(w->opt.release_arg);
}

/* The stop gave up on its last fold (STOP_FAILURES_MAX failed tries): nothing is lost, the log keeps it. */
static void log_stop_without_fold(void)
{
    log_line("level=error event=stop-without-fold error=\"the last fold could not be committed; the next "
             "start folds what is left\"");
}

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    writer_current = w;
    thread_set_name("tally-writer");
    pthread_mutex_lock(&w->lock);
    for (;;) {
        uint64_t mono_now = clock_ms(CLOCK_MONOTONIC);
        bool unfolded = atomic_load_explicit(&w->stats.oldest_unfolded_ms, memory_order_relaxed) != 0;
        bool backing_off = mono_now < w->backoff_until_ms && !w->stopping;
        /* a shared store folds apart: its fold thread also looks for other nodes' entries */
        bool fold_now = !w->apart && !backing_off && (w->fold_backlog || (unfolded && fold_due(w, mono_now)));
        bool sweep_now = !backing_off && !w->stopping && mono_now - w->last_sweep_ms >= SWEEP_INTERVAL_MS;
        if (w->stopping && !w->head && w->stop_failures >= STOP_FAILURES_MAX) {
            log_stop_without_fold();
            break;
        }
        if (!w->head && !fold_now && !sweep_now && store_pending(w->store)) {
            /* nothing waits (a batch after a deferred one failed): what they left unseen is shown */
            pthread_mutex_unlock(&w->lock);
            if (store_flush(w->store) != STORE_OK)
                log_line("level=error event=flush-failed");
            writer_announce(w);
            pthread_mutex_lock(&w->lock);
            continue;
        }
        if (!w->head && !fold_now && !sweep_now) {
            if (w->stopping)
                break;
            uint64_t wait_ms = IDLE_WAIT_MS;
            if (backing_off)
                wait_ms = w->backoff_until_ms - mono_now;
            else if (!w->apart && unfolded && w->opt.fold_window_ms)
                wait_ms = w->last_fold_ms + w->opt.fold_window_ms - mono_now;
            struct timespec until = clock_deadline(CLOCK_MONOTONIC, wait_ms);
            pthread_cond_timedwait(&w->wake, &w->lock, &until);
            continue;
        }
        write_cmd_t *batch = w->head, *last = NULL;
        size_t n = 0;
        /* A void (or restore) has a batch of its own: it walks the user's rows as stored, and a shared
         * store writes a batch's rows only at its commit. */
        for (write_cmd_t *c = w->head; c && n < w->opt.batch_max && !(n && c->type == WRITE_VOID); c = c->next, n++) {
            last = c;
            if (c->type == WRITE_VOID) {
                n++;
                break;
            }
        }
        if (last) {
            w->head = last->next;
            if (!w->head)
                w->tail = NULL;
            last->next = NULL;
        } else {
            batch = NULL;
        }
        w->queued -= n;
        atomic_store_explicit(&w->stats.queue_depth, w->queued, memory_order_relaxed);
        bool final = w->stopping && !w->head;
        pthread_mutex_unlock(&w->lock);
        writer_run_batch(w, batch, n, fold_now || final);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* --- the fold thread (a store that folds apart) --- */

/* One fold in a transaction of its own, run again after a conflict with another node. */
static int fold_run(writer_t *w, uint64_t mono_now)
{
    uint64_t oldest_before = atomic_load_explicit(&w->stats.oldest_unfolded_ms, memory_order_relaxed);
    int rc = STORE_RETRY;
    for (int attempt = 0; rc == STORE_RETRY && attempt < CONFLICT_RETRIES; attempt++) {
        if (attempt)
            atomic_fetch_add_explicit(&w->stats.conflict_retries, 1, memory_order_relaxed);
        store_write_t *tx = NULL;
        fold_publish(w, false);
        rc = store_fold_begin(w->store, &tx);
        bool may_fold = rc == STORE_OK && store_write_may_fold(tx);
        if (rc == STORE_OK && may_fold)
            rc = store_write_prepare(tx, NULL, 0, NULL, 0, NULL, 0, pipeline_fold_scan(w->opt.fold_max));
        if (rc == STORE_OK)
            rc = writer_fold(w, tx, mono_now, may_fold);
        if (tx)
            rc = rc == STORE_OK ? store_write_commit(tx) : (store_write_abort(tx), rc);
    }
    fold_publish(w, rc == STORE_OK);
    if (rc != STORE_OK) {
        if (!w->fold_failing)
            log_line("level=error event=fold-failed error=\"%s\"", store_error_detail(rc));
        atomic_store_explicit(&w->stats.oldest_unfolded_ms, oldest_before, memory_order_relaxed);
        /* not the leader until a fold says so again: its session (and the lock) may be gone */
        atomic_store_explicit(&w->stats.fold_leader, false, memory_order_relaxed);
        w->fold_backlog = true;
        w->fold_backoff_ms = mono_now + COMMIT_RETRY_MS;
    }
    w->fold_failing = rc != STORE_OK;
    return rc;
}

/* Folds when a batch with transitions has committed (nudged), while a fold leaves entries behind,
 * and every SHARED_FOLD_POLL_MS (other nodes' entries, and taking over as the leader) — never more
 * often than --fold-window. Once the writer thread has ended: what is left, then it ends too. */
static void *fold_main(void *arg)
{
    writer_t *w = arg;
    thread_set_name("tally-fold");
    unsigned last_failures = 0;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        uint64_t now = clock_ms(CLOCK_MONOTONIC);
        bool last = w->fold_stopping;
        bool backing_off = now < w->fold_backoff_ms;
        bool looking = w->fold_backlog || w->fold_nudged || now - w->last_fold_ms >= SHARED_FOLD_POLL_MS;
        if (!last && (backing_off || !looking || !fold_due(w, now))) {
            uint64_t until_ms = backing_off ? w->fold_backoff_ms : w->last_fold_ms + SHARED_FOLD_POLL_MS;
            if (!backing_off && looking) /* waiting out the fold window */
                until_ms = w->last_fold_ms + w->opt.fold_window_ms;
            uint64_t wait_ms = until_ms > now ? until_ms - now : 1;
            struct timespec until = clock_deadline(CLOCK_MONOTONIC, wait_ms);
            pthread_cond_timedwait(&w->fold_wake, &w->lock, &until);
            continue;
        }
        w->fold_nudged = false;
        pthread_mutex_unlock(&w->lock);
        int rc = fold_run(w, now);
        pthread_mutex_lock(&w->lock);
        if (last && rc == STORE_OK && !w->fold_backlog)
            break;
        if (last && rc != STORE_OK && ++last_failures >= STOP_FAILURES_MAX) {
            log_stop_without_fold();
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void writer_free_buffers(writer_t *w)
{
    free(w->prep_rows);
    free(w->prep_keys);
    free(w->prep_claims);
    free(w->resume_saved);
    free(w->resume_saved_len);
    free(w->asks);
    free(w->claims);
    itemmap_free(&w->own);
    itemmap_free(&w->base);
    itemmap_free(&w->unfolded);
}

int writer_start(store_t *store, const kinds_t *kinds, const writer_options_t *opt, writer_t **out)
{
    writer_t *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    w->store = store;
    w->kinds = kinds;
    w->opt = *opt;
    w->fold_backlog = true; /* fold whatever a previous run left behind the checkpoint */
    w->apart = store_folds_apart(store);
    assert(w->apart || !store_shared(store)); /* store_folds_apart: required of a shared store */
    w->prep_rows = calloc(opt->batch_max, sizeof *w->prep_rows);
    w->prep_keys = calloc(opt->batch_max, sizeof *w->prep_keys);
    w->prep_claims = calloc(opt->batch_max, sizeof *w->prep_claims);
    w->resume_saved = calloc(opt->batch_max, sizeof *w->resume_saved);
    w->resume_saved_len = calloc(opt->batch_max, sizeof *w->resume_saved_len);
    w->asks = calloc(opt->batch_max, sizeof *w->asks);
    w->claims = calloc(opt->batch_max, sizeof *w->claims);
    /* a store that takes log positions at commit (one that folds apart) learns the counts there */
    w->counts_at_commit = w->apart;
    if (!w->prep_rows || !w->prep_keys || !w->prep_claims || !w->resume_saved || !w->resume_saved_len || !w->asks ||
        !w->claims) {
        writer_free_buffers(w);
        free(w);
        return -1;
    }
    pthread_mutex_init(&w->lock, NULL);
    clock_cond_init_monotonic(&w->wake);
    static const double write_bounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
    static const double batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
    static const double fold_bounds[] = {1, 4, 16, 64, 256, 1024, 4096, 16384, 65536};
    histogram_init(&w->stats.write_seconds, write_bounds, sizeof write_bounds / sizeof write_bounds[0]);
    histogram_init(&w->stats.batch_commands, batch_bounds, sizeof batch_bounds / sizeof batch_bounds[0]);
    histogram_init(&w->stats.fold_entries, fold_bounds, sizeof fold_bounds / sizeof fold_bounds[0]);
    clock_cond_init_monotonic(&w->fold_wake);
    atomic_store(&w->stats.running, true);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
        goto fail;
    if (w->apart && pthread_create(&w->fold_thread, NULL, fold_main, w) != 0) {
        thread_stop_join(&w->lock, &w->wake, &w->stopping, w->thread);
        goto fail;
    }
    *out = w;
    return 0;
fail:
    pthread_cond_destroy(&w->fold_wake);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    writer_free_buffers(w);
    free(w);
    return -1;
}

/* --- groups: commands submitted from a thread that may block, and waited for together --- */

#define SUBMIT_RETRY_MS 5
#define SUBMIT_RETRIES 2000 /* a full queue is waited out for at most ~10 s */

void writer_group_init(writer_group_t *g, bool owns_commands, void (*on_done)(write_cmd_t *, void *), void *arg)
{
    *g = (writer_group_t){.owns_commands = owns_commands, .on_done = on_done, .arg = arg};
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
}

void writer_group_destroy(writer_group_t *g)
{
    writer_group_wait(g, 0);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

/* Writer thread: one of the group's commands is final. */
static void group_done(write_cmd_t *cmd)
{
    writer_group_t *g = cmd->group;
    if (g->on_done)
        g->on_done(cmd, g->arg);
    pthread_mutex_lock(&g->lock);
    if (cmd->answer.status != 200)
        g->failed++;
    if (g->owns_commands) {
        answer_free(&cmd->answer);
        free(cmd);
    }
    g->outstanding--;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

int writer_group_submit(writer_t *w, writer_group_t *g, write_cmd_t *cmd)
{
    cmd->done = group_done;
    cmd->group = g;
    pthread_mutex_lock(&g->lock);
    g->outstanding++;
    pthread_mutex_unlock(&g->lock);
    const struct timespec pause = {0, SUBMIT_RETRY_MS * 1000000L};
    for (int i = 0; i < SUBMIT_RETRIES; i++) {
        if (writer_submit(w, cmd) == 0)
            return 0;
        nanosleep(&pause, NULL);
    }
    pthread_mutex_lock(&g->lock);
    g->outstanding--;
    g->failed++;
    pthread_mutex_unlock(&g->lock);
    return -1; /* cmd is still the caller's */
}

void writer_group_wait(writer_group_t *g, size_t at_most)
{
    pthread_mutex_lock(&g->lock);
    while (g->outstanding > at_most)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

int writer_call(writer_t *w, write_cmd_t *cmd)
{
    writer_group_t g;
    writer_group_init(&g, false, NULL, NULL);
    int rc = writer_group_submit(w, &g, cmd);
    writer_group_destroy(&g);
    return rc;
}

void writer_stop(writer_t *w)
{
    if (!w)
        return;
    thread_stop_join(&w->lock, &w->wake, &w->stopping, w->thread);
    if (w->apart) /* after the writer's last batch: the fold folds what is left */
        thread_stop_join(&w->lock, &w->fold_wake, &w->fold_stopping, w->fold_thread);
    atomic_store(&w->stats.running, false);
    pthread_cond_destroy(&w->fold_wake);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    writer_free_buffers(w);
    free(w);
}
