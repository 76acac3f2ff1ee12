/* jwks.h — fetching an identity provider's JWK Set (--jwt-jwks-url) with libcurl, on a thread of
 * its own: at start, every refresh interval, and when a token names an unknown kid (at most once per
 * JWKS_KID_FETCH_MIN_MS). A fetch that fails keeps the last good set; until a first set is loaded,
 * failed fetches are retried sooner (1 s, doubling, up to the refresh interval). HTTP threads never
 * wait on it: jwks_fetcher_poke only asks. */
#ifndef TALLY_ENGINE_JWKS_H
#define TALLY_ENGINE_JWKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/jwk.h"

#define JWKS_KID_FETCH_MIN_MS 30000 /* unknown-kid fetches at most this often */
#define JWKS_TIMEOUT_MS 5000
#define JWKS_RETRY_FIRST_MS 1000 /* before a first set is loaded: first retry after this, doubling */
#define JWKS_URL_MAX 2048

typedef struct jwks_fetcher jwks_fetcher_t;

/* A set was fetched and parsed: the callee owns it (and frees it). Runs on the fetcher's thread. */
typedef void (*jwks_on_set_fn)(void *arg, jwk_set_t *set);

/* A URL the fetcher may use: https://, or http:// to a loopback address (127.0.0.0/8, ::1, or the
 * name localhost — the address connected to is checked again at each fetch). Returns 0, or -1 with
 * why. */
int jwks_url_check(const char *url, char *why, size_t whylen);

/* One fetch, on the calling thread: no redirects, no proxy, at most JWK_SET_MAX_BYTES, status 200,
 * JWKS_TIMEOUT_MS in all; an http:// URL must connect to a loopback address. Returns the parsed set
 * (notes: the keys skipped), or NULL with err filled. */
jwk_set_t *jwks_fetch(const char *url, char *notes, size_t noteslen, char *err, size_t errlen);

/* Starts the thread; its first fetch begins at once. Returns 0, or -1. */
int jwks_fetcher_start(const char *url, uint64_t refresh_ms, jwks_on_set_fn on_set, void *arg, jwks_fetcher_t **out);

/* A token named an unknown kid: fetch again in the background, at once when the last fetch began
 * JWKS_KID_FETCH_MIN_MS ago or more, else when it is that old. Never blocks on a fetch. */
void jwks_fetcher_poke(jwks_fetcher_t *f);

/* A new URL or interval (reload): a changed URL is fetched at once. Returns 0, or -1 (bad URL). */
int jwks_fetcher_set(jwks_fetcher_t *f, const char *url, uint64_t refresh_ms);

/* Fetches begun since start (a test's and the metrics' view). */
uint64_t jwks_fetcher_fetches(jwks_fetcher_t *f);

/* Stops the thread (waits for a fetch in flight, at most JWKS_TIMEOUT_MS) and frees f. NULL: no-op. */
void jwks_fetcher_stop(jwks_fetcher_t *f);

#endif
