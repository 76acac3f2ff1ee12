/* jwks.c — the JWK Set fetcher: libcurl on a thread of its own. See jwks.h for the contract. */
#include "engine/jwks.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/netallow.h"
#include "engine/thread.h"

#define USER_AGENT "tally-jwks"
#define NOTES_MAX 1024

struct jwks_fetcher {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stopping;
    bool poked;       /* a token named an unknown kid */
    bool loaded;      /* a set was delivered */
    bool url_changed; /* fetch at once */
    char url[JWKS_URL_MAX + 1];
    uint64_t generation; /* of url: a set fetched from an older URL is dropped */
    uint64_t refresh_ms;
    uint64_t next_due; /* mono ms of the next scheduled fetch */
    uint64_t fetches;
    jwks_on_set_fn on_set;
    void *arg;
};

/* The transfer's state: the body so far, and whether the address was refused. */
typedef struct {
    char *body;
    size_t len;
    bool too_large;
    bool plain_http; /* http://: only a loopback address may be connected to */
    bool refused;
} transfer_t;

static bool is_loopback(const uint8_t addr[NETALLOW_ADDR_LEN])
{
    static const char *const ranges[] = {"127.0.0.0/8", "::1/128"};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        netallow_cidr_t c;
        if (netallow_parse_cidr(ranges[i], strlen(ranges[i]), &c) == 0 && netallow_contains(&c, addr))
            return true;
    }
    return false;
}

int jwks_url_check(const char *url, char *why, size_t whylen)
{
    int rc = -1;
    char *scheme = NULL, *host = NULL;
    CURLU *u = NULL;
    if (!url || strlen(url) > JWKS_URL_MAX) {
        snprintf(why, whylen, "a URL of at most %d bytes is needed", JWKS_URL_MAX);
        return -1;
    }
    bool https = strncasecmp(url, "https://", 8) == 0, http = strncasecmp(url, "http://", 7) == 0;
    if (!https && !http) {
        snprintf(why, whylen, "expected an https:// URL");
        return -1;
    }
    u = curl_url();
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
        snprintf(why, whylen, "not a valid URL");
        goto done;
    }
    uint8_t addr[NETALLOW_ADDR_LEN];
    if (http && strcasecmp(host, "localhost") != 0 &&
        !(netallow_literal(host, strlen(host), addr) && is_loopback(addr))) {
        snprintf(why, whylen, "must be https:// (http:// only to a loopback address such as 127.0.0.1)");
        goto done;
    }
    rc = 0;
done:
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return rc;
}

/* libcurl's socket-open callback: an http:// fetch connects to loopback addresses only, judged on
 * the address resolved, not on the name. */
static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    transfer_t *t = clientp;
    uint8_t addr[NETALLOW_ADDR_LEN];
    (void)purpose;
    if (a->family == AF_INET && a->addrlen >= sizeof(struct sockaddr_in))
        netallow_from_v4((const uint8_t *)&((const struct sockaddr_in *)&a->addr)->sin_addr, addr);
    else if (a->family == AF_INET6 && a->addrlen >= sizeof(struct sockaddr_in6))
        memcpy(addr, &((const struct sockaddr_in6 *)&a->addr)->sin6_addr, NETALLOW_ADDR_LEN);
    else {
        t->refused = true;
        return CURL_SOCKET_BAD;
    }
    if (t->plain_http && !is_loopback(addr)) {
        t->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

static size_t collect(char *ptr, size_t size, size_t n, void *arg)
{
    transfer_t *t = arg;
    size_t len = size * n;
    if (t->len + len > JWK_SET_MAX_BYTES) {
        t->too_large = true;
        return 0; /* aborts the transfer */
    }
    char *body = realloc(t->body, t->len + len + 1);
    if (!body)
        return 0;
    memcpy(body + t->len, ptr, len);
    t->body = body;
    t->len += len;
    return len;
}

jwk_set_t *jwks_fetch(const char *url, char *notes, size_t noteslen, char *err, size_t errlen)
{
    if (jwks_url_check(url, err, errlen) != 0)
        return NULL;
    CURL *e = curl_easy_init();
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    transfer_t t = {.plain_http = strncasecmp(url, "http://", 7) == 0};
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, t.plain_http ? "http" : "https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)JWKS_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)JWKS_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)JWK_SET_MAX_BYTES);
    curl_easy_setopt(e, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, &t);
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    jwk_set_t *set = NULL;
    if (t.refused)
        snprintf(err, errlen, "an http:// URL resolved to an address that is not loopback (use https://)");
    else if (t.too_large || rc == CURLE_FILESIZE_EXCEEDED)
        snprintf(err, errlen, "the answer is larger than 1 MiB");
    else if (rc != CURLE_OK)
        snprintf(err, errlen, "%s", curl_easy_strerror(rc));
    else if (status != 200)
        snprintf(err, errlen, "answered %ld (redirects are not followed)", status);
    else
        set = jwk_set_parse((span_t){t.body ? t.body : "", t.len}, notes, noteslen, err, errlen);
    free(t.body);
    return set;
}

static void *fetcher_main(void *arg)
{
    jwks_fetcher_t *f = arg;
    thread_set_name("tally-jwks");
    uint64_t last_start = 0, retry_ms = JWKS_RETRY_FIRST_MS;
    bool fetched_once = false;
    pthread_mutex_lock(&f->lock);
    while (!f->stopping) {
        uint64_t now = mono_ms();
        uint64_t due = f->next_due;
        if (f->url_changed)
            due = now;
        else if (f->poked) {
            uint64_t kid_due = fetched_once ? last_start + JWKS_KID_FETCH_MIN_MS : now;
            due = kid_due < due ? kid_due : due;
        }
        if (fetched_once && due > now) {
            struct timespec until = clock_deadline(CLOCK_MONOTONIC, due - now);
            pthread_cond_timedwait(&f->cond, &f->lock, &until);
            continue;
        }
        char url[JWKS_URL_MAX + 1];
        snprintf(url, sizeof url, "%s", f->url);
        uint64_t generation = f->generation;
        bool poked = f->poked;
        f->poked = f->url_changed = false;
        f->fetches++;
        pthread_mutex_unlock(&f->lock);

        last_start = mono_ms();
        fetched_once = true;
        char err[256] = "", notes[NOTES_MAX] = "";
        jwk_set_t *set = jwks_fetch(url, notes, sizeof notes, err, sizeof err);

        pthread_mutex_lock(&f->lock);
        if (set && generation != f->generation) {
            jwk_set_free(set); /* the URL changed meanwhile: its own fetch comes next */
            continue;
        }
        if (set) {
            f->loaded = true;
            retry_ms = JWKS_RETRY_FIRST_MS;
            f->next_due = mono_ms() + f->refresh_ms;
            pthread_mutex_unlock(&f->lock);
            log_line("level=info event=jwks-fetched keys=%zu reason=%s%s%s%s", jwk_set_count(set),
                     poked ? "unknown-kid" : "schedule", notes[0] ? " skipped=\"" : "", notes, notes[0] ? "\"" : "");
            f->on_set(f->arg, set);
            pthread_mutex_lock(&f->lock);
        } else {
            /* before a first set, retry sooner; after, the last good set stays until the next turn */
            uint64_t wait = f->loaded || retry_ms > f->refresh_ms ? f->refresh_ms : retry_ms;
            retry_ms *= 2;
            f->next_due = mono_ms() + wait;
            log_line("level=error event=jwks-fetch-failed error=\"%s\" retry_in_ms=%llu msg=\"%s\"", err,
                     (unsigned long long)wait,
                     f->loaded ? "keeping the last good key set" : "no key set yet: requests that need a user get 503");
        }
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

int jwks_fetcher_start(const char *url, uint64_t refresh_ms, jwks_on_set_fn on_set, void *arg, jwks_fetcher_t **out)
{
    char why[160];
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || jwks_url_check(url, why, sizeof why) != 0)
        return -1;
    jwks_fetcher_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->url, sizeof f->url, "%s", url);
    f->refresh_ms = refresh_ms ? refresh_ms : 1;
    f->on_set = on_set;
    f->arg = arg;
    pthread_mutex_init(&f->lock, NULL);
    clock_cond_init_monotonic(&f->cond);
    if (pthread_create(&f->thread, NULL, fetcher_main, f) != 0) {
        free(f);
        return -1;
    }
    *out = f;
    return 0;
}

void jwks_fetcher_poke(jwks_fetcher_t *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    if (!f->poked) {
        f->poked = true;
        pthread_cond_signal(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
}

int jwks_fetcher_set(jwks_fetcher_t *f, const char *url, uint64_t refresh_ms)
{
    char why[160];
    if (jwks_url_check(url, why, sizeof why) != 0)
        return -1;
    pthread_mutex_lock(&f->lock);
    if (strcmp(f->url, url) != 0) {
        snprintf(f->url, sizeof f->url, "%s", url);
        f->generation++;
        f->url_changed = true;
    }
    f->refresh_ms = refresh_ms ? refresh_ms : 1;
    uint64_t sooner = mono_ms() + f->refresh_ms; /* a shorter interval applies from now */
    if (sooner < f->next_due)
        f->next_due = sooner;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

uint64_t jwks_fetcher_fetches(jwks_fetcher_t *f)
{
    pthread_mutex_lock(&f->lock);
    uint64_t n = f->fetches;
    pthread_mutex_unlock(&f->lock);
    return n;
}

void jwks_fetcher_stop(jwks_fetcher_t *f)
{
    if (!f)
        return;
    thread_stop_join(&f->lock, &f->cond, &f->stopping, f->thread);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    free(f);
}
