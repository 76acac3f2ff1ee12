/* parse.h — parsers for the small untrusted strings tally accepts: flags, headers, query lists. */
#ifndef TALLY_CORE_PARSE_H
#define TALLY_CORE_PARSE_H

#include <stdint.h>

#include "core/span.h"

#define IDEM_KEY_MAX 255
#define IF_MATCH_MAX_TAGS 8
#define LISTEN_HOST_MAX 255

/* "250ms", "90s", "15m", "24h", "7d" → milliseconds, at most 365 days; "0" alone is 0. A number
 * needs its unit. Returns 0, or -1 when malformed or out of range. */
int parse_duration_ms(const char *text, uint64_t *ms);

/* "4096", "64K", "256M", "4G", "1T" (binary multiples, optional trailing "iB"/"B") → bytes. */
int parse_size_bytes(const char *text, uint64_t *bytes);

/* "HOST:PORT" or "[V6]:PORT" → host (without brackets) and port 0..65535. Returns 0 or -1. */
int parse_listen(const char *text, char host[LISTEN_HOST_MAX + 1], uint16_t *port);

/* A whole decimal number without sign, leading '+' or trailing bytes, at most max. Returns 0 or -1. */
int parse_uint(span_t text, uint64_t max, uint64_t *value);

/* Idempotency-Key: a bare value, or a structured-field string in double quotes whose content is
 * meant. The key is 1..255 printable ASCII bytes. Writes it to key (NUL-terminated) and returns its
 * length, or -1 when invalid. */
int parse_idempotency_key(span_t header, char key[IDEM_KEY_MAX + 1]);

/* If-Match: "*" or a comma-separated list of strong entity-tags holding versions ("3", "0").
 * Returns 0 and fills the result, or -1 when malformed (weak tags never match and are refused). */
typedef struct {
    bool any; /* "*" */
    int count;
    uint64_t versions[IF_MATCH_MAX_TAGS];
} if_match_t;
int parse_if_match(span_t header, if_match_t *out);

/* True when the precondition holds for a row at version (version 0: no row). */
bool if_match_holds(const if_match_t *m, uint64_t version);

/* Splits a comma-separated list in place of iteration: returns the next element starting at *pos
 * (empty elements are returned as empty spans) and advances *pos; false at the end. */
bool parse_list_next(span_t list, size_t *pos, span_t *elem);

/* The value of query parameter name in a raw query string ("a=1&b=2"), undecoded. */
bool parse_query_param(span_t query, const char *name, span_t *value);

#endif
