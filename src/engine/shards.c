#include "engine/shards.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* What a store opened unreachable checks at its first connection: that it is shard k of s. */
typedef struct {
    struct shards *s;
    uint32_t k;
} later_check_t;

struct shards {
    size_t n;
    store_t *stores[SHARD_MAX];
    shard_identity_t identity; /* the cluster's: its id and map (shard: 0) */
    store_options_t opts[SHARD_MAX];
    later_check_t later[SHARD_MAX];
};

/* What one database held when the node started. */
typedef struct {
    bool found;    /* it holds an identity */
    bool has_data; /* it holds tally data (rows, counts, log, records of other modules) */
    bool later;    /* it could not be reached: checked when it connects (shard_check_later) */
    shard_identity_t id;
} found_t;

typedef struct {
    char *text;
    size_t len;
    bool found, other; /* found: the identity record; other: any other auxiliary record */
} aux_scan_t;

static int aux_one(void *arg, span_t key, span_t value)
{
    aux_scan_t *a = arg;
    if (!span_eq_str(key, SHARDS_IDENTITY_KEY)) {
        a->other = true;
        return 1; /* one is enough to know */
    }
    free(a->text);
    a->text = malloc(value.len + 1);
    if (!a->text)
        return 1;
    memcpy(a->text, value.ptr, value.len);
    a->text[value.len] = '\0';
    a->len = value.len;
    a->found = true;
    return 0;
}

static int any_item(void *arg, span_t item)
{
    (void)item;
    *(bool *)arg = true;
    return 1;
}

/* Parses the identity record a scan found: STORE_OK, or STORE_ERROR with err filled. */
static int scanned_identity(const aux_scan_t *a, shard_identity_t *id, char *err, size_t errlen)
{
    char why[256];
    if (shard_identity_parse((span_t){a->text, a->len}, id, why, sizeof why) != 0) {
        snprintf(err, errlen, "its record %s is not a cluster identity: %s", SHARDS_IDENTITY_KEY, why);
        return STORE_ERROR;
    }
    return STORE_OK;
}

/* Reads one store's identity, and whether it holds any tally data besides. */
static int read_found(store_t *store, found_t *f, char *err, size_t errlen)
{
    store_read_t *snap;
    int rc = store_read_begin(store, &snap);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "cannot read it");
        return rc;
    }
    aux_scan_t a = {0};
    uint64_t first = 0, last = 0, checkpoint = 0;
    bool item = false;
    size_t visited = 0;
    if ((rc = store_read_aux(snap, SPAN_LIT(SHARDS_IDENTITY_KEY), aux_one, &a)) == STORE_OK && a.text == NULL &&
        a.found)
        rc = STORE_ERROR; /* out of memory */
    /* the records a store holds before any write (the settings an operator makes first); what
     * the writes leave (trending's summaries) comes with rows and log entries, looked for below */
    static const char *const settings[] = {"policy/", "webhook/", STORE_VOID_PREFIX};
    for (size_t i = 0; rc == STORE_OK && !a.other && i < sizeof settings / sizeof settings[0]; i++)
        rc = store_read_aux(snap, span_of(settings[i]), aux_one, &a);
    if (rc == STORE_OK)
        rc = store_read_log_bounds(snap, &first, &last);
    if (rc == STORE_OK)
        rc = store_read_checkpoint(snap, &checkpoint);
    if (rc == STORE_OK)
        rc = store_read_items(snap, (span_t){"", 0}, 1, any_item, &item, &visited);
    store_read_end(snap);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "cannot read it");
    } else {
        f->found = a.found;
        f->has_data = a.other || last > 0 || checkpoint > 0 || item;
        if (a.found)
            rc = scanned_identity(&a, &f->id, err, errlen);
    }
    free(a.text);
    return rc;
}

int shards_read_identity(store_t *store, shard_identity_t *id, bool *found, char *err, size_t errlen)
{
    store_read_t *snap;
    int rc = store_read_begin(store, &snap);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "cannot read the store");
        return rc;
    }
    aux_scan_t a = {0};
    rc = store_read_aux(snap, SPAN_LIT(SHARDS_IDENTITY_KEY), aux_one, &a);
    store_read_end(snap);
    if (rc == STORE_OK && a.found && !a.text)
        rc = STORE_ERROR;
    if (rc != STORE_OK)
        snprintf(err, errlen, "cannot read the store");
    else if ((*found = a.found))
        rc = scanned_identity(&a, id, err, errlen);
    free(a.text);
    return rc;
}

static int new_cluster_id(char out[SHARD_CLUSTER_HEX + 1])
{
    unsigned char raw[SHARD_CLUSTER_HEX / 2];
    if (RAND_bytes(raw, (int)sizeof raw) != 1)
        return -1;
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

/* The identity the cluster's shard k must hold. */
static void identity_of(const shard_identity_t *cluster, uint32_t k, shard_identity_t *out)
{
    *out = *cluster;
    out->shard = k;
}

/* Writes shard k's identity into its store, unless a node starting at the same time wrote one
 * meanwhile: that one is then read back into *found (under the record's lock, so exactly one
 * identity is ever written into a database). STORE_OK, or an error with err filled. */
static int write_identity(store_t *store, const shard_identity_t *id, found_t *found, char *err, size_t errlen)
{
    char *text = shard_identity_format(id);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return STORE_ERROR;
    }
    store_write_t *w;
    aux_scan_t a = {0};
    int rc = store_write_begin(store, &w);
    if (rc == STORE_OK) {
        rc = store_aux_read_locked(w, SPAN_LIT(SHARDS_IDENTITY_KEY), aux_one, &a);
        if (rc == STORE_OK && a.found && !a.text)
            rc = STORE_ERROR;
        if (rc == STORE_OK && !a.found)
            rc = store_aux_put(w, SPAN_LIT(SHARDS_IDENTITY_KEY), span_of(text));
        if (rc == STORE_OK && !a.found)
            rc = store_write_commit(w);
        else
            store_write_abort(w);
    }
    free(text);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "cannot write its cluster identity");
    } else if (a.found) {
        found->found = true;
        rc = scanned_identity(&a, &found->id, err, errlen);
    }
    free(a.text);
    return rc;
}

/* A shard that could not be reached at start, reached now (its writer's thread): served only when it
 * holds the identity of its position. The cluster's identity is settled by then (writers start
 * after shards_open). */
static int shard_check_later(void *arg, const span_t *value, char *err, size_t errlen)
{
    later_check_t *c = arg;
    shard_identity_t want, found;
    char why[256];
    identity_of(&c->s->identity, c->k, &want);
    want.map.count = (uint32_t)c->s->n;
    if (!value) {
        snprintf(err, errlen,
                 "database at position %u holds no cluster identity, where shard %u of cluster %s is expected; it "
                 "is not served",
                 c->k, c->k, want.cluster);
        return -1;
    }
    if (shard_identity_parse(*value, &found, why, sizeof why) != 0) {
        snprintf(err, errlen, "database at position %u: its record %s is not a cluster identity: %s; it is not served",
                 c->k, SHARDS_IDENTITY_KEY, why);
        return -1;
    }
    if (shard_identity_check(&want, c->k, &found, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s; it is not served", why);
        return -1;
    }
    log_line("level=info event=cluster-identity-checked shard=%u cluster=%s", c->k, want.cluster);
    return 0;
}

/* Settles the identities of the n open stores (see shards_open): 0, or -1 with err filled. */
static int settle(shards_t *s, found_t *f, char *err, size_t errlen)
{
    size_t n = s->n;
    char why[512];
    const found_t *ref = NULL; /* the first database holding an identity */
    bool any_data = false;
    for (size_t k = 0; k < n; k++) {
        any_data = any_data || f[k].has_data;
        if (f[k].found && !ref)
            ref = &f[k];
    }
    bool fresh = ref == NULL;
    size_t later = 0;
    for (size_t k = 0; k < n; k++)
        later += f[k].later;
    if (fresh && later) {
        snprintf(err, errlen,
                 "no database reached holds a cluster identity, and %zu could not be reached: a first start needs "
                 "every database",
                 later);
        return -1;
    }
    if (ref) {
        s->identity = ref->id;
        s->identity.shard = 0;
    } else {
        if (new_cluster_id(s->identity.cluster) != 0 || shard_map_even(&s->identity.map, (uint32_t)n) != 0) {
            snprintf(err, errlen, "cannot make a cluster id (no random bytes)");
            return -1;
        }
    }
    /* What the node's list says: its count, whatever the found identity's is. */
    shard_identity_t want = s->identity;
    want.map.count = (uint32_t)n;
    for (size_t k = 0; k < n; k++) {
        if (f[k].later)
            continue;
        if (f[k].found) {
            if (shard_identity_check(&want, (uint32_t)k, &f[k].id, why, sizeof why) != 0) {
                snprintf(err, errlen, "%s", why);
                return -1;
            }
            continue;
        }
        if (f[k].has_data && n > 1) {
            snprintf(err, errlen,
                     "database at position %zu holds tally data but no cluster identity: a store used before "
                     "sharding can only be shard 0 of 1 (moving its data between shards is not built)",
                     k);
            return -1;
        }
        if (!fresh && any_data && n > 1) {
            snprintf(err, errlen,
                     "database at position %zu holds no cluster identity, where shard %zu of cluster %s is expected "
                     "(an empty database in place of a shard that holds data)",
                     k, k, s->identity.cluster);
            return -1;
        }
    }
    /* Write what is missing, shard 0 first, so that nodes starting at once meet on shard 0's record. */
    size_t written = 0, deferred = 0;
    for (size_t k = 0; k < n; k++) {
        if (f[k].found || f[k].later)
            continue;
        shard_identity_t id;
        identity_of(&want, (uint32_t)k, &id);
        int rc = write_identity(s->stores[k], &id, &f[k], why, sizeof why);
        char refused[256];
        if (rc != STORE_OK && n == 1 &&
            (rc == STORE_FULL || store_writes_refused(s->stores[k], refused, sizeof refused))) {
            /* One store that refuses writes for now (a full disk): it serves reads as before, and the
             * identity is written at a later start. No other shard can disagree with it meanwhile. */
            log_line("level=warn event=cluster-identity-deferred msg=\"the store refuses writes for now; its "
                     "cluster identity is written at a later start\"");
            deferred++;
            continue;
        }
        if (rc != STORE_OK) {
            snprintf(err, errlen, "database at position %zu: %s", k, why);
            return -1;
        }
        if (!f[k].found) {
            written++;
            continue;
        }
        /* another node wrote it first: take its cluster if it was the first identity seen at all */
        if (fresh && written == 0) {
            fresh = false;
            s->identity = f[k].id;
            s->identity.shard = 0;
            want = s->identity;
            want.map.count = (uint32_t)n;
        }
        if (shard_identity_check(&want, (uint32_t)k, &f[k].id, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s", why);
            return -1;
        }
    }
    s->identity.map.count = (uint32_t)n;
    log_line("level=info event=cluster-identity cluster=%s shards=%zu written=%zu checked=%zu deferred=%zu "
             "unreachable=%zu",
             s->identity.cluster, n, written, n - written - deferred - later, deferred, later);
    for (size_t k = 0; k < n; k++)
        if (f[k].later)
            log_line("level=warn event=shard-unreachable shard=%zu msg=\"started without it: its items answer 503 "
                     "until it is reached and its identity checked\"",
                     k);
    return 0;
}

int shards_open(const char *const *locations, size_t n, const kinds_t *kinds, const store_options_t *opt,
                shards_t **out, char *err, size_t errlen)
{
    if (n < 1 || n > SHARD_MAX) {
        snprintf(err, errlen, "between 1 and %d stores, not %zu", SHARD_MAX, n);
        return -1;
    }
    shards_t *s = calloc(1, sizeof *s);
    found_t *f = calloc(n, sizeof *f);
    if (!s || !f) {
        free(s);
        free(f);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char why[512];
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        /* Shards past the first may be down at a later start: opened anyway, checked when reached
         * (shard 0, which holds the cluster-wide records, must answer). */
        s->opts[k] = *opt;
        s->later[k] = (later_check_t){.s = s, .k = (uint32_t)k};
        if (k > 0) {
            s->opts[k].open_unreachable = true;
            s->opts[k].check_key = SHARDS_IDENTITY_KEY;
            s->opts[k].check_aux = shard_check_later;
            s->opts[k].check_arg = &s->later[k];
        }
        if (store_open(locations[k], kinds, &s->opts[k], &s->stores[k], why, sizeof why) != STORE_OK) {
            /* one store: its own message, as before shards */
            if (n == 1)
                snprintf(err, errlen, "%s", why);
            else
                snprintf(err, errlen, "database at position %zu: %s", k, why);
            rc = -1;
            break;
        }
        s->n = k + 1;
        if (!store_ready(s->stores[k])) {
            f[k].later = true; /* opened unreachable */
            continue;
        }
        if (read_found(s->stores[k], &f[k], why, sizeof why) != STORE_OK) {
            snprintf(err, errlen, "database at position %zu: %s", k, why);
            rc = -1;
        }
    }
    if (rc == 0)
        rc = settle(s, f, err, errlen);
    free(f);
    if (rc != 0) {
        shards_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

size_t shards_count(const shards_t *s)
{
    return s->n;
}

store_t *shards_store(const shards_t *s, size_t k)
{
    return k < s->n ? s->stores[k] : NULL;
}

uint32_t shards_of_item(const shards_t *s, span_t item)
{
    return shard_map_of_id(&s->identity.map, item);
}

uint32_t shards_of_user(const shards_t *s, span_t user)
{
    return shard_map_of_id(&s->identity.map, user);
}

void shards_identity(const shards_t *s, size_t k, shard_identity_t *id)
{
    identity_of(&s->identity, (uint32_t)k, id);
}

void shards_close(shards_t *s)
{
    if (!s)
        return;
    for (size_t k = 0; k < s->n; k++)
        store_close(s->stores[k]);
    free(s);
}
