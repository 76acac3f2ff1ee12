/* webhooks.c — the delivery thread (tally-webhooks): follows the log, fixes batches, sends them with
 * libcurl, records what was delivered. See webhooks.h for the contract. */
#include "engine/webhooks.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/feedmerge.h"
#include "core/log.h"
#include "core/whsign.h"
#include "engine/thread.h"

#define SCAN_INTERVAL_MS 500 /* how often the webhooks' records are read again (new, deleted, resumed) */
#define FOLLOW_POLL_MS 100   /* a shared store: how often a caught-up webhook looks for others' entries */
#define FOLLOW_IDLE_MS 1000  /* the embedded store: commits notify; this is only a backstop */
#define RECORD_RETRY_MS 1000 /* a state that could not be recorded is tried again this much later */
#define USER_AGENT "tally-webhooks/1"
#define HEADER_MAX 160

typedef struct hook hook_t;

/* The delivery thread's view of one webhook. */
struct hook {
    const struct webhooks *owner;
    whstore_def_t def;
    whstore_state_t state; /* while leading: ahead of or equal to the store's; else the store's */
    bool loaded;           /* state was taken from the store since this node leads */
    bool dirty;            /* state has changes the store does not have yet */
    bool record_now;       /* scan_records: record the state once the snapshot is over */
    bool deleted;          /* its definition is gone: nothing more is sent (the next scan frees it) */
    uint64_t retry_record_ms;
    /* the batch, fixed (and recorded) before its first attempt */
    bool has_batch;
    char *body;
    size_t body_len;
    uint64_t next_attempt_ms; /* monotonic */
    unsigned attempts;
    /* a transfer */
    CURL *easy;
    struct curl_slist *headers;
    bool in_flight, refused;
    /* metrics, under owner->lock */
    uint64_t deliveries, failures, oldest_ms;
    bool expired_shown;
};

struct webhooks {
    store_t *store; /* shard 0's: the webhooks' records */
    store_t *stores[SHARD_MAX];
    uint32_t count;   /* shards: each one's log is followed */
    writer_t *writer; /* shard 0's */
    const kinds_t *kinds;
    webhooks_options_t opt;
    bool shared;
    pthread_t thread;
    CURLM *multi;
    atomic_bool stopping, notified;
    /* hooks[] and their metrics: the thread changes them, the metrics read; held for memory only,
     * never across a store read, a transfer or a wait on the writer */
    pthread_mutex_t lock;
    hook_t *hooks[WHSTORE_MAX];
    size_t nhooks;
    whstore_hook_t *scan;               /* the thread's buffer for reading every record */
    whstore_hook_t one;                 /* the thread's buffer for reading one webhook's records */
    whstore_write_t record;             /* the thread's command recording a state (large: it holds the records) */
    feedmerge_shard_t lists[SHARD_MAX]; /* the thread's: a batch's entries from each shard */
    bool leading;
};

const webhooks_options_t *webhooks_options(const webhooks_t *wh)
{
    return &wh->opt;
}

void webhooks_set_timings(webhooks_t *wh, uint64_t timeout_ms, uint64_t backoff_min_ms, uint64_t backoff_max_ms,
                          uint64_t secret_overlap_ms)
{
    __atomic_store_n(&wh->opt.timeout_ms, timeout_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&wh->opt.backoff_min_ms, backoff_min_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&wh->opt.backoff_max_ms, backoff_max_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&wh->opt.secret_overlap_ms, secret_overlap_ms, __ATOMIC_RELAXED);
}

void webhooks_notify(webhooks_t *wh)
{
    if (wh && !atomic_exchange_explicit(&wh->notified, true, memory_order_acq_rel))
        curl_multi_wakeup(wh->multi);
}

/* --- the URL rule --- */

int webhooks_check_url(const webhooks_t *wh, const char *url, size_t len, char *why, size_t whylen)
{
    int rc = -1;
    char *scheme = NULL, *host = NULL;
    if (len > WHSTORE_URL_MAX || memchr(url, '\0', len)) {
        snprintf(why, whylen, "url is at most %d bytes", WHSTORE_URL_MAX);
        return -1;
    }
    if (!(len > 7 && strncasecmp(url, "http://", 7) == 0) && !(len > 8 && strncasecmp(url, "https://", 8) == 0)) {
        snprintf(why, whylen, "url must start with http:// or https://");
        return -1;
    }
    /* Credentials in the URL would be listed back by GET /v1/admin/webhooks: the authority (up to
     * the first '/', '?' or '#' after the scheme) must hold no '@'. A receiver authenticates the
     * sender by the signature instead. */
    const char *auth = url + (url[4] == ':' ? 7 : 8);
    size_t auth_len = strcspn(auth, "/?#");
    if (memchr(auth, '@', auth_len)) {
        snprintf(why, whylen,
                 "url must not carry a user or password (user:password@host): the webhook list shows urls back; "
                 "a receiver checks the Tally-Signature instead");
        return -1;
    }
    CURLU *u = curl_url();
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
        snprintf(why, whylen, "url is not a valid http:// or https:// URL");
        goto done;
    }
    uint8_t addr[NETALLOW_ADDR_LEN];
    if (netallow_literal(host, strlen(host), addr) && !netallow_permits(&wh->opt.allow, addr)) {
        snprintf(why, whylen,
                 "url's address is in a range webhooks may not reach (loopback, link-local, private, unique-local); "
                 "--webhook-allow lets one");
        goto done;
    }
    rc = 0;
done:
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return rc;
}

/* --- metrics --- */

size_t webhooks_stats(webhooks_t *wh, webhooks_stat_t *out, size_t max)
{
    if (!wh)
        return 0;
    uint64_t now = wall_ms();
    pthread_mutex_lock(&wh->lock);
    size_t n = 0;
    for (size_t i = 0; i < wh->nhooks && n < max; i++, n++) {
        const hook_t *h = wh->hooks[i];
        out[n] = (webhooks_stat_t){.deliveries = h->deliveries, .failures = h->failures, .expired = h->expired_shown};
        snprintf(out[n].id, sizeof out[n].id, "%s", h->def.id);
        out[n].oldest_undelivered_s = h->oldest_ms && now > h->oldest_ms ? (double)(now - h->oldest_ms) / 1000.0 : 0;
    }
    pthread_mutex_unlock(&wh->lock);
    return n;
}

typedef struct {
    uint64_t at_ms;
} first_t;

static int first_one(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    ((first_t *)arg)->at_ms = t->at_ms;
    return 1;
}

int webhooks_lag_ms(store_read_t *r, uint64_t delivered, uint64_t now_ms, uint64_t *lag_ms)
{
    first_t f = {0};
    int rc = store_read_log(r, delivered, 1, first_one, &f);
    *lag_ms = rc == STORE_OK && f.at_ms && now_ms > f.at_ms ? now_ms - f.at_ms : 0;
    return rc;
}

/* --- records --- */

/* Writes h's state through the writer, only while its webhook still exists in the store at that
 * commit (a delete racing it is never undone by a state written after it): a webhook found gone is
 * marked deleted. Delivery thread; waits for the commit. Returns 0, or -1. */
static int record_state(webhooks_t *wh, hook_t *h)
{
    whstore_write_t *w = &wh->record;
    whstore_write_decided(w, WHSTORE_STATE, h->def.id);
    w->state = h->state;
    int rc = writer_call(wh->writer, &w->cmd) == 0 && w->cmd.answer.status == 200 ? 0 : -1;
    if (rc != 0 && w->cmd.answer.status == 404)
        h->deleted = true;
    whstore_write_free(w);
    h->dirty = rc != 0 && !h->deleted;
    if (rc != 0)
        h->retry_record_ms = mono_ms() + RECORD_RETRY_MS;
    if (rc == 0) { /* the listing reads the store: the metric says the same from now on */
        pthread_mutex_lock(&wh->lock);
        h->expired_shown = h->state.expired;
        pthread_mutex_unlock(&wh->lock);
    }
    return rc;
}

static void erase_records(webhooks_t *wh, const char *id)
{
    whstore_write_t w;
    if (whstore_write_init(&w, id, NULL, NULL, NULL, true) != 0)
        return;
    writer_call(wh->writer, &w.cmd);
    whstore_write_free(&w);
}

/* --- batches --- */

static void abort_transfer(webhooks_t *wh, hook_t *h)
{
    if (h->in_flight)
        curl_multi_remove_handle(wh->multi, h->easy);
    h->in_flight = false;
    curl_slist_free_all(h->headers);
    h->headers = NULL;
}

static void drop_batch(webhooks_t *wh, hook_t *h)
{
    abort_transfer(wh, h);
    free(h->body);
    h->body = NULL;
    h->has_batch = false;
    h->attempts = 0;
    h->next_attempt_ms = 0;
}

static void hook_free(webhooks_t *wh, hook_t *h)
{
    drop_batch(wh, h);
    if (h->easy)
        curl_easy_cleanup(h->easy);
    free(h);
}

/* Starts a batch's body: {"webhook":id,"mode":…,"transitions":[ — the entries follow, then "]}". */
static void batch_begin(const webhooks_t *wh, const hook_t *h, textbuf_t *body)
{
    textbuf_lit(body, "{\"webhook\":");
    textbuf_safe(body, span_of(h->def.id));
    textbuf_lit(body, ",\"mode\":");
    textbuf_safe(body, span_of(wh->opt.mode));
    textbuf_lit(body, ",\"transitions\":[");
}

/* Reads shard k's part of h's next batch into list: its pending range when resending (h's batch
 * was fixed before), else up to WEBHOOKS_BATCH_MAX entries after its delivered position. Returns 0;
 * 1 when its log no longer holds what follows that position (*oldest: what it holds); -1 when it
 * could not be read. Delivery thread; holds a snapshot of the shard only while reading. */
static int batch_read_shard(webhooks_t *wh, const hook_t *h, uint32_t k, bool resend, feedmerge_shard_t *list,
                            uint64_t *oldest)
{
    store_read_t *snap;
    if (store_read_begin(wh->stores[k], &snap) != STORE_OK)
        return -1;
    uint64_t newest = 0, delivered = h->state.delivered[k], to = h->state.pending_to[k];
    int rc = store_read_log_window(snap, oldest, &newest);
    if (rc == STORE_OK && delivered + 1 < *oldest) {
        store_read_end(snap);
        return 1;
    }
    size_t limit = WEBHOOKS_BATCH_MAX;
    if (resend) { /* exactly its range (a log that moved meanwhile gives less: fixed anew) */
        limit = to > delivered ? (to - delivered < limit ? (size_t)(to - delivered) : limit) : 0;
        list->stop_after = to;
    }
    if (rc == STORE_OK && limit)
        rc = store_read_log(snap, delivered, limit, feedmerge_read_fn, list);
    store_read_end(snap);
    return rc == STORE_OK && !list->failed ? 0 : -1;
}

/* h's webhook expired (its log retention passed what shard k still had to send): delivery stops. */
static void mark_expired(webhooks_t *wh, hook_t *h, uint32_t k, uint64_t oldest)
{
    h->state.expired = true;
    for (uint32_t i = 0; i < wh->count; i++)
        h->state.pending_to[i] = 0;
    if (wh->count > 1)
        log_line("level=warn event=webhook-expired webhook=%s shard=%u delivered=%llu oldest=%llu", h->def.id, k,
                 (unsigned long long)h->state.delivered[k], (unsigned long long)oldest);
    else
        log_line("level=warn event=webhook-expired webhook=%s delivered=%llu oldest=%llu", h->def.id,
                 (unsigned long long)h->state.delivered[k], (unsigned long long)oldest);
}

/* Fixes h's next batch (leader, nothing in flight): the pending one the store names, else up to
 * WEBHOOKS_BATCH_MAX new entries merged from every shard's log (core/feedmerge.h), recorded as
 * pending — each shard's last position in it — before any attempt. A shard that cannot be read
 * gives nothing to a new batch (its entries go in a later one); a pending batch waits for every
 * shard it covers. Marks the webhook expired when a log no longer holds what it has to send.
 * Delivery thread; holds a snapshot only while reading. */
static void fix_batch(webhooks_t *wh, hook_t *h)
{
    if (h->state.expired && h->dirty && h->loaded && mono_ms() >= h->retry_record_ms)
        record_state(wh, h); /* an expiry the store did not take the first time */
    if (h->has_batch || h->state.expired || !h->loaded || h->deleted || (h->dirty && mono_ms() < h->retry_record_ms))
        return;
    store_read_t *snap;
    if (store_read_begin(wh->store, &snap) != STORE_OK)
        return;
    /* Deleted or rotated since the last scan: seen before anything new is sent. */
    int found = whstore_read_one(snap, span_of(h->def.id), &wh->one);
    store_read_end(snap);
    if (found == STORE_OK) {
        pthread_mutex_lock(&wh->lock); /* the metrics read the id */
        h->def = wh->one.def;
        pthread_mutex_unlock(&wh->lock);
    }
    if (found != STORE_OK) {
        h->deleted = found == STORE_NOTFOUND;
        return;
    }
    bool resend = whstore_pending(&h->state), ok = true;
    uint32_t k = 0;
    int got = 0;
    uint64_t oldest = 0;
    for (; k < wh->count; k++) {
        feedmerge_shard_init(&wh->lists[k], wh->kinds, wh->count, k);
        got = batch_read_shard(wh, h, k, resend, &wh->lists[k], &oldest);
        if (got == 1 || (got < 0 && resend && h->state.pending_to[k] > h->state.delivered[k]))
            break; /* expired; or a pending batch cannot be read whole */
        if (got < 0)
            feedmerge_shard_free(&wh->lists[k]); /* nothing from this shard this time */
    }
    ok = k == wh->count;
    textbuf_t text = {0};
    uint64_t last[SHARD_MAX], first_at_ms = 0;
    size_t n = 0;
    memcpy(last, h->state.delivered, wh->count * sizeof last[0]);
    if (ok) {
        batch_begin(wh, h, &text);
        n = feedmerge_take(wh->lists, wh->count, WEBHOOKS_BATCH_MAX, &text, last, &first_at_ms);
        textbuf_lit(&text, "]}");
    }
    for (uint32_t i = 0; i < wh->count && i <= k; i++)
        feedmerge_shard_free(&wh->lists[i]);
    size_t body_len = 0;
    char *body = ok ? textbuf_finish(&text, &body_len) : NULL;
    if (!ok && got == 1) {
        mark_expired(wh, h, k, oldest);
        record_state(wh, h);
        return;
    }
    if (!body)
        return;
    pthread_mutex_lock(&wh->lock);
    h->oldest_ms = first_at_ms; /* 0: caught up */
    pthread_mutex_unlock(&wh->lock);
    if (n == 0) {
        free(body);
        if (h->dirty)
            record_state(wh, h);
        return;
    }
    bool same = resend; /* the pending batch read whole, as fixed */
    for (uint32_t i = 0; same && i < wh->count; i++)
        same = last[i] ==
               (h->state.pending_to[i] > h->state.delivered[i] ? h->state.pending_to[i] : h->state.delivered[i]);
    if (!same) {
        /* a new batch, or a pending one cut short by a move of the log: fixed anew */
        char id[WHSTORE_DELIVERY_ID_HEX + 1];
        if (whstore_random_hex(id, WHSTORE_DELIVERY_ID_HEX / 2) != 0) {
            free(body);
            return;
        }
        whstore_state_t *before = &wh->one.state; /* the thread's buffer, free again (read above) */
        *before = h->state;
        memcpy(h->state.pending_to, last, wh->count * sizeof last[0]);
        memcpy(h->state.delivery_id, id, sizeof id);
        if (record_state(wh, h) != 0) { /* never sent before its range is durable */
            h->state = *before;
            h->dirty = true;
            free(body);
            return;
        }
    }
    h->body = body;
    h->body_len = body_len;
    h->has_batch = true;
    h->attempts = 0;
    h->next_attempt_ms = 0;
}

/* --- transfers --- */

/* libcurl's socket-open callback: the address it is about to connect to, after resolution. */
static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    hook_t *h = clientp;
    const webhooks_t *wh = h->owner;
    uint8_t addr[NETALLOW_ADDR_LEN];
    (void)purpose;
    if (a->family == AF_INET && a->addrlen >= sizeof(struct sockaddr_in))
        netallow_from_v4((const uint8_t *)&((const struct sockaddr_in *)&a->addr)->sin_addr, addr);
    else if (a->family == AF_INET6 && a->addrlen >= sizeof(struct sockaddr_in6))
        memcpy(addr, &((const struct sockaddr_in6 *)&a->addr)->sin6_addr, NETALLOW_ADDR_LEN);
    else {
        h->refused = true;
        return CURL_SOCKET_BAD;
    }
    if (!netallow_permits(&wh->opt.allow, addr)) {
        h->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

static size_t discard(char *ptr, size_t size, size_t n, void *arg)
{
    (void)ptr;
    (void)arg;
    return size * n; /* the receiver's answer is never kept nor shown */
}

/* Appends a header line to *list; false (the list kept, to be freed) when out of memory. */
static bool header_add(struct curl_slist **list, const char *line)
{
    struct curl_slist *longer = curl_slist_append(*list, line);
    if (longer)
        *list = longer;
    return longer != NULL;
}

/* Starts one attempt of h's batch: fresh signature, same body and delivery id. */
static void start_attempt(webhooks_t *wh, hook_t *h)
{
    uint64_t t = wall_ms() / 1000;
    span_t keys[WHSIGN_KEYS_MAX] = {{h->def.secret, h->def.secret_len}};
    size_t nkeys = 1;
    uint64_t now = wall_ms();
    for (size_t i = 0; i < h->def.nprev && nkeys < WHSIGN_KEYS_MAX; i++) /* each until the time promised */
        if (now < h->def.prev[i].until_ms)
            keys[nkeys++] = (span_t){h->def.prev[i].secret, h->def.prev[i].len};
    char sig[WHSIGN_HEADER_MAX], line[HEADER_MAX + WHSIGN_HEADER_MAX];
    h->next_attempt_ms = mono_ms() + RECORD_RETRY_MS; /* when this attempt cannot even start */
    if (whsign_header(t, (span_t){h->body, h->body_len}, keys, nkeys, sig) != 0)
        return;
    if (!h->easy && !(h->easy = curl_easy_init()))
        return;
    curl_easy_reset(h->easy);
    struct curl_slist *hd = NULL;
    bool ok = header_add(&hd, "Content-Type: application/json");
    snprintf(line, sizeof line, "Tally-Webhook-Id: %s", h->def.id);
    ok = ok && header_add(&hd, line);
    snprintf(line, sizeof line, "Tally-Delivery-Id: %s", h->state.delivery_id);
    ok = ok && header_add(&hd, line);
    snprintf(line, sizeof line, "Tally-Signature: %s", sig);
    ok = ok && header_add(&hd, line);
    ok = ok && header_add(&hd, "Expect:"); /* no 100-continue round trip */
    if (!ok) {
        curl_slist_free_all(hd);
        return;
    }
    h->headers = hd;
    h->refused = false;
    CURL *e = h->easy;
    curl_easy_setopt(e, CURLOPT_URL, h->def.url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    long timeout_ms = (long)__atomic_load_n(&wh->opt.timeout_ms, __ATOMIC_RELAXED);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, h->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)h->body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(e, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, h);
    curl_easy_setopt(e, CURLOPT_PRIVATE, h);
    if (curl_multi_add_handle(wh->multi, e) != CURLM_OK) {
        curl_slist_free_all(hd);
        h->headers = NULL;
        return;
    }
    h->in_flight = true;
}

const char *webhooks_failure_category(bool refused, int curl_rc, long status)
{
    CURLcode rc = (CURLcode)curl_rc;
    /* refused only when no allowed address could be reached instead: curl goes on to the next one */
    if (refused && rc != CURLE_OK)
        return "refused-address";
    switch (rc) {
    case CURLE_OK:
        if (status >= 200 && status < 300)
            return NULL;
        if (status >= 500)
            return "status-5xx";
        if (status >= 400)
            return "status-4xx";
        return "status-3xx"; /* a redirect (never followed) or an informational answer */
    case CURLE_OPERATION_TIMEDOUT:
        return "timeout";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_USE_SSL_FAILED:
        return "tls";
    default:
        return "connect";
    }
}

/* One attempt ended: delivered (record it and fix the next batch) or failed (back off). */
static void attempt_done(webhooks_t *wh, hook_t *h, CURLcode rc)
{
    long status = 0;
    curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
    abort_transfer(wh, h);
    const char *category = webhooks_failure_category(h->refused, rc, status);
    if (!category) {
        pthread_mutex_lock(&wh->lock);
        h->deliveries++;
        pthread_mutex_unlock(&wh->lock);
        for (uint32_t k = 0; k < wh->count; k++) {
            if (h->state.pending_to[k] > h->state.delivered[k])
                h->state.delivered[k] = h->state.pending_to[k];
            h->state.pending_to[k] = 0;
        }
        h->state.delivery_id[0] = '\0';
        h->state.failing_since_ms = 0;
        h->state.last_error[0] = '\0';
        h->dirty = true;
        drop_batch(wh, h);
        fix_batch(wh, h); /* records the delivered cursor with the next batch, or alone */
        return;
    }
    pthread_mutex_lock(&wh->lock);
    h->failures++;
    pthread_mutex_unlock(&wh->lock);
    h->attempts++;
    uint64_t backoff = __atomic_load_n(&wh->opt.backoff_min_ms, __ATOMIC_RELAXED);
    uint64_t backoff_max = __atomic_load_n(&wh->opt.backoff_max_ms, __ATOMIC_RELAXED);
    for (unsigned i = 1; i < h->attempts && backoff < backoff_max; i++)
        backoff *= 2;
    if (backoff > backoff_max)
        backoff = backoff_max;
    h->next_attempt_ms = mono_ms() + backoff;
    bool news = !h->state.failing_since_ms || strcmp(h->state.last_error, category) != 0;
    if (!h->state.failing_since_ms)
        h->state.failing_since_ms = wall_ms();
    snprintf(h->state.last_error, sizeof h->state.last_error, "%s", category);
    if (news)
        record_state(wh, h); /* best effort: the listing says so; the batch is retried either way */
}

static void transfers_progress(webhooks_t *wh)
{
    int running = 0, left = 0;
    curl_multi_perform(wh->multi, &running);
    CURLMsg *m;
    while ((m = curl_multi_info_read(wh->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        hook_t *h = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&h);
        if (h && h->in_flight)
            attempt_done(wh, h, m->data.result);
    }
}

/* --- following the records --- */

static hook_t *find_hook(webhooks_t *wh, const char *id)
{
    for (size_t i = 0; i < wh->nhooks; i++)
        if (strcmp(wh->hooks[i]->def.id, id) == 0)
            return wh->hooks[i];
    return NULL;
}

/* A resume asked for on any node: from its cursor (on the shard it names; the others where they
 * stand), or every shard where it stands; failing and expired forgotten. */
static void apply_resume(webhooks_t *wh, hook_t *h, const whstore_resume_t *r)
{
    drop_batch(wh, h);
    if (r->has_after && r->shard < wh->count)
        h->state.delivered[r->shard] = r->after;
    for (uint32_t k = 0; k < wh->count; k++)
        h->state.pending_to[k] = 0;
    h->state.delivery_id[0] = '\0';
    h->state.failing_since_ms = 0;
    h->state.last_error[0] = '\0';
    h->state.expired = false;
    h->state.epoch = r->epoch;
    h->dirty = true;
    if (wh->count > 1 && !r->has_after)
        log_line("level=info event=webhook-resumed webhook=%s", h->def.id);
    else if (wh->count > 1)
        log_line("level=info event=webhook-resumed webhook=%s shard=%u after=%llu", h->def.id, r->shard,
                 (unsigned long long)r->after);
    else
        log_line("level=info event=webhook-resumed webhook=%s after=%llu", h->def.id, (unsigned long long)r->after);
}

/* Each shard's oldest retained log position (0 where it is not known: nothing is judged expired on
 * that shard this time), and the age of each hook's oldest undelivered transition over every shard
 * (lag_ms[i] for wh->hooks[i]). Delivery thread; a snapshot of one shard at a time. */
static void shard_windows_and_lags(webhooks_t *wh, uint64_t now, uint64_t *oldest, uint64_t *lag_ms, bool *lag_known)
{
    for (size_t i = 0; i < wh->nhooks; i++)
        lag_ms[i] = 0, lag_known[i] = true;
    for (uint32_t k = 0; k < wh->count; k++) {
        store_read_t *snap;
        uint64_t newest = 0;
        oldest[k] = 0;
        if (store_read_begin(wh->stores[k], &snap) != STORE_OK) {
            for (size_t i = 0; i < wh->nhooks; i++)
                lag_known[i] = false;
            continue;
        }
        if (store_read_log_window(snap, &oldest[k], &newest) != STORE_OK)
            oldest[k] = 0;
        for (size_t i = 0; i < wh->nhooks; i++) {
            uint64_t lag = 0;
            if (webhooks_lag_ms(snap, wh->hooks[i]->state.delivered[k], now, &lag) != STORE_OK)
                lag_known[i] = false;
            else if (lag > lag_ms[i])
                lag_ms[i] = lag;
        }
        store_read_end(snap);
    }
}

/* Reads every webhook's records and brings the thread's view in line: new ones, deleted ones,
 * rotated secrets, resumes, and (not leading) the store's state for the metrics. */
static void scan_records(webhooks_t *wh)
{
    store_read_t *snap;
    size_t n = 0;
    if (store_read_begin(wh->store, &snap) != STORE_OK)
        return;
    int rc = whstore_read_all(snap, wh->scan, 2 * WHSTORE_MAX, &n);
    store_read_end(snap);
    if (rc != STORE_OK)
        return;
    uint64_t now = wall_ms();
    bool orphans = false;
    pthread_mutex_lock(&wh->lock);
    for (size_t i = 0; i < wh->nhooks;) { /* deleted ones go */
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = wh->scan[j].has_def && strcmp(wh->scan[j].def.id, wh->hooks[i]->def.id) == 0;
        if (seen) {
            i++;
            continue;
        }
        hook_free(wh, wh->hooks[i]);
        wh->hooks[i] = wh->hooks[--wh->nhooks];
    }
    for (size_t j = 0; j < n; j++) {
        whstore_hook_t *s = &wh->scan[j];
        orphans |= !s->has_def;
        if (!s->has_def)
            continue;
        hook_t *h = find_hook(wh, s->def.id);
        if (!h && wh->nhooks < WHSTORE_MAX && (h = calloc(1, sizeof *h))) {
            h->owner = wh;
            wh->hooks[wh->nhooks++] = h;
        }
        if (!h)
            continue;
        h->def = s->def;
        if (!wh->leading || !h->loaded) {
            h->state = s->state;
            h->state.count = wh->count; /* every shard's positions (a record lacks none it was given) */
            h->loaded = wh->leading;
            h->dirty = false;
        }
        if (wh->leading && s->has_resume && s->resume.epoch > h->state.epoch)
            apply_resume(wh, h, &s->resume);
    }
    pthread_mutex_unlock(&wh->lock);
    /* The windows and lags are store reads: made with the lock released (this thread alone changes
     * the hooks and their states), each published under it, so /metrics never waits on a read. */
    uint64_t oldest[SHARD_MAX], lag_ms[WHSTORE_MAX];
    bool lag_known[WHSTORE_MAX];
    shard_windows_and_lags(wh, now, oldest, lag_ms, lag_known);
    pthread_mutex_lock(&wh->lock);
    for (size_t i = 0; i < wh->nhooks; i++) {
        hook_t *h = wh->hooks[i];
        for (uint32_t k = 0; wh->leading && h->loaded && !h->state.expired && k < wh->count; k++)
            if (h->state.delivered[k] + 1 < oldest[k]) {
                /* behind the retention: what it still had to send is gone (even a batch in memory) */
                drop_batch(wh, h);
                mark_expired(wh, h, k, oldest[k]);
                h->record_now = true;
            }
        h->expired_shown = h->state.expired;
        if (lag_known[i])
            h->oldest_ms = lag_ms[i] ? now - lag_ms[i] : 0;
    }
    pthread_mutex_unlock(&wh->lock);
    for (size_t i = 0; i < wh->nhooks; i++)
        if (wh->hooks[i]->record_now) {
            wh->hooks[i]->record_now = false;
            record_state(wh, wh->hooks[i]);
        }
    for (size_t j = 0; orphans && wh->leading && j < n; j++)
        if (!wh->scan[j].has_def)
            erase_records(wh, wh->scan[j].def.id); /* a state written while its webhook was deleted */
}

/* Leading changed (a shared store's fold leader): drop what this node had in flight. */
static void set_leading(webhooks_t *wh, bool leading)
{
    if (leading == wh->leading)
        return;
    wh->leading = leading;
    log_line("level=info event=webhooks-%s", leading ? "delivering" : "standby");
    for (size_t i = 0; i < wh->nhooks; i++) {
        drop_batch(wh, wh->hooks[i]);
        wh->hooks[i]->loaded = false;
    }
}

static void *webhooks_main(void *arg)
{
    webhooks_t *wh = arg;
    thread_set_name("tally-webhooks");
    uint64_t next_scan = 0, next_follow = 0;
    while (!atomic_load(&wh->stopping)) {
        uint64_t now = mono_ms();
        bool leading = !wh->shared || atomic_load(&writer_stats(wh->writer)->fold_leader);
        set_leading(wh, leading);
        if (now >= next_scan) {
            scan_records(wh);
            next_scan = now + SCAN_INTERVAL_MS;
        }
        bool follow = atomic_exchange(&wh->notified, false) || now >= next_follow;
        if (follow)
            next_follow = now + (wh->shared ? FOLLOW_POLL_MS : FOLLOW_IDLE_MS);
        uint64_t wait = next_scan - now < next_follow - now ? next_scan - now : next_follow - now;
        for (size_t i = 0; wh->leading && i < wh->nhooks; i++) {
            hook_t *h = wh->hooks[i];
            if (!h->has_batch && (follow || h->dirty))
                fix_batch(wh, h);
            now = mono_ms();
            if (h->has_batch && !h->in_flight && now >= h->next_attempt_ms)
                start_attempt(wh, h);
            if (h->has_batch && !h->in_flight && h->next_attempt_ms - now < wait)
                wait = h->next_attempt_ms - now;
        }
        transfers_progress(wh);
        if (wait > SCAN_INTERVAL_MS)
            wait = SCAN_INTERVAL_MS;
        curl_multi_poll(wh->multi, NULL, 0, (int)wait, NULL);
        transfers_progress(wh);
    }
    return NULL;
}

int webhooks_start(store_t *const *stores, size_t count, writer_t *writer, const kinds_t *kinds,
                   const webhooks_options_t *opt, webhooks_t **out)
{
    if (count < 1 || count > SHARD_MAX)
        return -1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -1;
    webhooks_t *wh = calloc(1, sizeof *wh);
    if (!wh)
        return -1;
    wh->store = stores[0];
    memcpy(wh->stores, stores, count * sizeof stores[0]);
    wh->count = (uint32_t)count;
    wh->writer = writer;
    wh->kinds = kinds;
    wh->opt = *opt;
    wh->shared = store_shared(stores[0]);
    wh->scan = calloc(2 * WHSTORE_MAX, sizeof *wh->scan);
    wh->multi = curl_multi_init();
    pthread_mutex_init(&wh->lock, NULL);
    if (!wh->scan || !wh->multi || pthread_create(&wh->thread, NULL, webhooks_main, wh) != 0) {
        if (wh->multi)
            curl_multi_cleanup(wh->multi);
        pthread_mutex_destroy(&wh->lock);
        free(wh->scan);
        free(wh);
        return -1;
    }
    *out = wh;
    return 0;
}

void webhooks_stop(webhooks_t *wh)
{
    if (!wh)
        return;
    atomic_store(&wh->stopping, true);
    curl_multi_wakeup(wh->multi);
    pthread_join(wh->thread, NULL);
    for (size_t i = 0; i < wh->nhooks; i++)
        hook_free(wh, wh->hooks[i]);
    curl_multi_cleanup(wh->multi);
    pthread_mutex_destroy(&wh->lock);
    free(wh->scan);
    free(wh);
    curl_global_cleanup();
}
