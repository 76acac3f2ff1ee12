/* answer.h — a response as tally stores and sends it: status, a few headers, and the body bytes.
 * Rendered here (not in http/) because the writer must store the exact bytes of an answer in the
 * same commit as the effect it reports (idempotency records). */
#ifndef TALLY_CORE_ANSWER_H
#define TALLY_CORE_ANSWER_H

#include <jansson.h>
#include <stdint.h>

#include "core/etag.h"
#include "core/kinds.h"
#include "core/policy.h"
#include "core/reaction.h"
#include "core/span.h"

typedef enum {
    ANSWER_JSON,    /* application/json */
    ANSWER_PROBLEM, /* application/problem+json (RFC 9457) */
    ANSWER_TEXT,    /* text/plain (metrics and the like) */
} answer_type_t;

/* Cache-Control of an answer. */
typedef enum {
    ANSWER_CACHE_NONE,    /* no Cache-Control */
    ANSWER_CACHE_PUBLIC,  /* public, max-age=<max_age_s>; no-cache when max_age_s is 0 */
    ANSWER_CACHE_PRIVATE, /* private, no-store: the answer holds the viewer's own state */
} answer_cache_t;

typedef struct {
    int status;
    answer_type_t type;
    bool has_etag; /* ETag: "<etag_version>" */
    uint64_t etag_version;
    char weak_etag[ETAG_WEAK_SIZE]; /* ETag: W/"…" of the body, when not empty (core/etag.h) */
    answer_cache_t cache;
    unsigned max_age_s;
    bool replayed;            /* Idempotent-Replayed: true */
    unsigned retry_after_s;   /* Retry-After, when non-zero */
    const char *allow;        /* Allow, when set (a static string) */
    bool www_authenticate;    /* WWW-Authenticate: Bearer */
    const char *content_type; /* overrides type's Content-Type when set (a static string: /ui/ files) */
    char *body;               /* owned, malloc'd */
    size_t body_len;
    size_t body_cap; /* bytes held at body (0: exactly body_len); room answer_set_cursor may use */
} answer_t;

/* The most a cursor splice adds to a body: ,"cursor":"<20 digits>"} in place of its closing brace. */
#define ANSWER_CURSOR_ROOM (sizeof ",\"cursor\":\"18446744073709551615\"}" - 1)

/* Each render function fills a (previous body freed) and returns 0, or -1 when out of memory, in
 * which case a holds a 500 problem with a static body-less fallback. */

/* {"item":…,"reaction":…,"previous":…,"version":…,"changed":…} with ETag ("reactions" and arrays in
 * many mode). */
int answer_write_result(answer_t *a, const kinds_t *kinds, span_t item, kindset_t reaction, kindset_t previous,
                        uint64_t version, bool changed);

/* The most a counts splice adds to a write result's body for kinds (see answer_set_counts). */
size_t answer_counts_room(const kinds_t *kinds);

/* Makes room for later splices of extra bytes in all, so that they never allocate. Returns 0, or -1
 * (out of memory, or a body that cannot be spliced; a unchanged). */
int answer_reserve(answer_t *a, size_t extra);

/* A write result carries the item's counts: appends ,"counts":{"<kind>":N,…} (every configured kind,
 * in the configured order) and in many mode ,"reactors":N before the body's closing brace; with
 * counts NULL (hidden from the asker) "counts":null and "reactors":null. counts[code] for codes
 * 1..count, [0] the reactors. Writes into reserved room without allocating; else allocates. Returns
 * 0, or -1 (a unchanged). */
int answer_set_counts(answer_t *a, const kinds_t *kinds, const int64_t *counts);

/* The same splice as a format for a store that learns the counts at commit and completes a stored
 * body in SQL: the text answer_set_counts appends, closing brace included, with %s in place of each
 * number (the kinds in order, then the reactors in many mode): PostgreSQL's format() of the numbers
 * gives answer_set_counts's bytes. Returns its length, or 0 when len is too small. */
size_t answer_counts_format(const kinds_t *kinds, char *buf, size_t len);

/* Makes room for a later answer_set_cursor, so that the splice itself never allocates: the writer
 * reserves before the commit what it splices after. Returns 0, or -1 (out of memory; a unchanged). */
int answer_reserve_cursor(answer_t *a);

/* A write result that changed something carries its transition's change-feed cursor: appends
 * ,"cursor":"<cursor>" before the body's closing brace. With the room reserved it writes into the
 * memory already held and cannot fail; else it allocates. Returns 0, or -1 (no closing brace, or out
 * of memory; a is then unchanged, never replaced by an error). The same splice is done in SQL by a
 * store that learns the position at commit. */
int answer_set_cursor(answer_t *a, uint64_t cursor);

/* With several shards, a write result's cursor names its shard: its "cursor":"P" (the position in
 * the shard's log, as the shard's store spliced and keeps it) becomes the entry cursor "S.P" of
 * shard `shard` of `count` (core/shardmap.h), done as the answer leaves the writer, so that a
 * replay (the stored bytes) is qualified the same way. With one shard, or no cursor in the body,
 * nothing changes. Returns 0, or -1 when out of memory: the cursor member is then taken out (the
 * answer stands without it, as a write whose splice failed), never left naming the wrong entry. */
int answer_cursor_shard(answer_t *a, uint32_t count, uint32_t shard);

/* A JSON body (compact, in insertion order) with status; takes the reference to body (NULL: out of
 * memory, a 500). */
int answer_json(answer_t *a, int status, json_t *body);

/* RFC 9457 problem: {"type":"urn:tally:error:<code>","title":…,"status":…,"detail":…}. */
int answer_problem(answer_t *a, int status, const char *code, const char *detail);

/* 409 idempotency-key-mismatch: the key is bound to another request's fingerprint (its record on the
 * item's shard, or its claim on the user's: engine/claims.h). */
int answer_idem_mismatch(answer_t *a);

/* 412 version-mismatch, with the row's current reaction and version as members. */
int answer_version_mismatch(answer_t *a, const kinds_t *kinds, kindset_t reaction, uint64_t version);

/* 403 for a write the item's policy refuses (v not POLICY_OK): item-closed, reaction-not-allowed
 * (with "allowed", the kinds a write may add, as an array) or too-many-reactions (with "max_kinds"). */
int answer_policy_refusal(answer_t *a, const kinds_t *kinds, policy_verdict_t v, kindset_t allowed, unsigned max_kinds);

/* Takes ownership of a malloc'd JSON body. */
void answer_set_body(answer_t *a, int status, answer_type_t type, char *body, size_t len);

void answer_free(answer_t *a);

#endif
