/* answer.c — rendering of write answers and problem details with jansson. */
#include "core/answer.h"
#include "core/jsontext.h"

#include "core/kindsjson.h"

#include <assert.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *code;
    const char *title;
} problem_titles[] = {
    {"invalid-item-id", "Invalid item id"},
    {"invalid-user-id", "Invalid user id"},
    {"invalid-json", "Malformed JSON body"},
    {"invalid-reaction", "Unknown reaction"},
    {"invalid-parameter", "Invalid parameter"},
    {"invalid-if-match", "Malformed If-Match header"},
    {"invalid-request", "Malformed request"},
    {"too-many-ids", "Too many ids"},
    {"import-rejected", "Import rejected"},
    {"cursor-expired", "Cursor expired"},
    {"too-many-secrets", "Too many secrets alive"},
    {"idempotency-key-required", "Idempotency-Key required"},
    {"invalid-idempotency-key", "Invalid Idempotency-Key"},
    {"idempotency-key-mismatch", "Idempotency-Key reused with another request"},
    {"idempotency-key-in-use", "Idempotency-Key in use"},
    {"version-mismatch", "Version mismatch"},
    {"item-closed", "Item closed"},
    {"reaction-not-allowed", "Reaction not allowed on this item"},
    {"too-many-reactions", "Too many reactions on this item"},
    {"too-many-policies", "Too many policies"},
    {"feature-unavailable", "Feature not in force yet"},
    {"unauthenticated", "Authentication required"},
    {"forbidden", "Forbidden"},
    {"not-found", "Not found"},
    {"method-not-allowed", "Method not allowed"},
    {"body-too-large", "Request body too large"},
    {"unsupported-media-type", "Unsupported media type"},
    {"rate-limited", "Too many requests"},
    {"headers-too-large", "Request headers too large"},
    {"overloaded", "Server overloaded"},
    {"unavailable", "Service unavailable"},
    {"internal", "Internal error"},
};

static const char *problem_title(const char *code)
{
    for (size_t i = 0; i < sizeof problem_titles / sizeof problem_titles[0]; i++)
        if (strcmp(problem_titles[i].code, code) == 0)
            return problem_titles[i].title;
    return "Error";
}

static const char fallback_body[] =
    "{\"type\":\"urn:tally:error:internal\",\"title\":\"Internal error\",\"status\":500}";

void answer_free(answer_t *a)
{
    if (a->body != fallback_body)
        free(a->body);
    a->body = NULL;
    a->body_len = 0;
    a->body_cap = 0;
}

void answer_set_body(answer_t *a, int status, answer_type_t type, char *body, size_t len)
{
    answer_free(a);
    *a = (answer_t){.status = status, .type = type, .body = body, .body_len = len};
}

/* Takes the reference to obj; the body is compact JSON in insertion order. */
static int answer_from_json(answer_t *a, int status, answer_type_t type, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_REALS) : NULL;
    json_decref(obj);
    if (!text) {
        answer_free(a);
        *a = (answer_t){
            .status = 500, .type = ANSWER_PROBLEM, .body = (char *)fallback_body, .body_len = sizeof fallback_body - 1};
        return -1;
    }
    answer_set_body(a, status, type, text, strlen(text));
    return 0;
}

int answer_write_result(answer_t *a, const kinds_t *kinds, span_t item, kindset_t reaction, kindset_t previous,
                        uint64_t version, bool changed)
{
    json_t *obj = json_pack("{s:s%,s:o?,s:o?,s:I,s:b}", "item", item.ptr, item.len, kindset_member(kinds),
                            kindset_json(kinds, reaction), "previous", kindset_json(kinds, previous), "version",
                            (json_int_t)version, "changed", changed);
    int rc = answer_from_json(a, 200, ANSWER_JSON, obj);
    if (rc == 0) {
        a->has_etag = true;
        a->etag_version = version;
    }
    return rc;
}

/* Bytes held at a's body. */
static size_t body_room(const answer_t *a)
{
    return a->body_cap > a->body_len ? a->body_cap : a->body_len;
}

static bool spliceable(const answer_t *a)
{
    return a->body && a->body != fallback_body && a->body_len && a->body[a->body_len - 1] == '}';
}

int answer_reserve(answer_t *a, size_t extra)
{
    if (!spliceable(a))
        return -1;
    size_t need = a->body_len - 1 + extra;
    if (body_room(a) >= need)
        return 0;
    char *body = realloc(a->body, need);
    if (!body)
        return -1;
    a->body = body;
    a->body_cap = need;
    return 0;
}

int answer_reserve_cursor(answer_t *a)
{
    return answer_reserve(a, ANSWER_CURSOR_ROOM);
}

/* Where the counts splice puts each number: ,"counts":{"like":N,…}[,"reactors":N]} with its numbers
 * left out; the writer of the pieces (the splice, or the SQL format) puts them back. */
#define COUNT_DIGITS_MAX 20 /* -9223372036854775808 */

size_t answer_counts_room(const kinds_t *kinds)
{
    size_t room = sizeof ",\"counts\":{}}" - 1;
    for (int c = 1; c <= kinds->count; c++)
        room += strlen(kinds_name(kinds, c)) + sizeof "\"\":," - 1 + COUNT_DIGITS_MAX;
    if (kinds->mode == REACTION_MODE_MANY)
        room += sizeof ",\"reactors\":" - 1 + COUNT_DIGITS_MAX;
    return room;
}

/* Appends text to out at *n. */
static void put_text(char *out, size_t *n, const char *text, size_t len)
{
    memcpy(out + *n, text, len);
    *n += len;
}

/* Appends v in decimal (the writer does this for every answer: no printf). */
static void put_int(char *out, size_t *n, int64_t v)
{
    char digits[COUNT_DIGITS_MAX];
    size_t d = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do
        digits[d++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        out[(*n)++] = '-';
    while (d)
        out[(*n)++] = digits[--d];
}

#define PUT(out, n, lit) put_text(out, n, lit, sizeof lit - 1)

/* Appends the splice to out (room answer_counts_room(kinds) + 1), numbers from counts or, with
 * counts NULL and fmt false, null; with fmt, %s for each number. Returns its length. */
static size_t counts_splice(const kinds_t *kinds, const int64_t *counts, bool fmt, char *out)
{
    size_t n = 0;
    bool many = kinds->mode == REACTION_MODE_MANY;
    if (!counts && !fmt) {
        PUT(out, &n, ",\"counts\":null");
        if (many)
            PUT(out, &n, ",\"reactors\":null");
        out[n++] = '}';
        out[n] = '\0';
        return n;
    }
    PUT(out, &n, ",\"counts\":{");
    for (int c = 1; c <= kinds->count; c++) {
        if (c > 1)
            out[n++] = ',';
        out[n++] = '"';
        put_text(out, &n, kinds_name(kinds, c), strlen(kinds_name(kinds, c)));
        PUT(out, &n, "\":");
        if (fmt)
            PUT(out, &n, "%s");
        else
            put_int(out, &n, counts[c]);
    }
    out[n++] = '}';
    if (many) {
        PUT(out, &n, ",\"reactors\":");
        if (fmt)
            PUT(out, &n, "%s");
        else
            put_int(out, &n, counts[KIND_NONE]);
    }
    out[n++] = '}';
    out[n] = '\0';
    return n;
}

int answer_set_counts(answer_t *a, const kinds_t *kinds, const int64_t *counts)
{
    if (!spliceable(a))
        return -1;
    char tail[1024]; /* 16 kinds of 32 bytes: well under */
    assert(answer_counts_room(kinds) < sizeof tail);
    size_t n = counts_splice(kinds, counts, false, tail);
    assert(n <= answer_counts_room(kinds));
    size_t len = a->body_len - 1 + n;
    if (body_room(a) < len) { /* nothing reserved: grow now (before a commit only) */
        char *body = realloc(a->body, len);
        if (!body)
            return -1;
        a->body = body;
        a->body_cap = len;
    }
    memcpy(a->body + a->body_len - 1, tail, n);
    a->body_len = len;
    return 0;
}

size_t answer_counts_format(const kinds_t *kinds, char *buf, size_t len)
{
    if (len <= answer_counts_room(kinds))
        return 0;
    return counts_splice(kinds, NULL, true, buf);
}

int answer_set_cursor(answer_t *a, uint64_t cursor)
{
    if (!spliceable(a))
        return -1;
    char tail[ANSWER_CURSOR_ROOM + 1];
    int n = snprintf(tail, sizeof tail, ",\"cursor\":\"%llu\"}", (unsigned long long)cursor);
    assert(n > 0 && (size_t)n <= ANSWER_CURSOR_ROOM);
    size_t len = a->body_len - 1 + (size_t)n;
    if (body_room(a) < len) { /* nothing reserved: grow now (before a commit only) */
        char *body = realloc(a->body, len);
        if (!body)
            return -1;
        a->body = body;
        a->body_cap = len;
    }
    memcpy(a->body + a->body_len - 1, tail, (size_t)n);
    a->body_len = len;
    return 0;
}

/* The write result's ,"cursor":" member: a top-level one, as no ," occurs inside a JSON string (a
 * quote there is escaped) and a write result has no nested object with a cursor. */
#define CURSOR_MEMBER ",\"cursor\":\""

int answer_cursor_shard(answer_t *a, uint32_t count, uint32_t shard)
{
    if (count <= 1 || !a->body || a->body == fallback_body)
        return 0;
    const char *found = memmem(a->body, a->body_len, CURSOR_MEMBER, sizeof CURSOR_MEMBER - 1);
    if (!found)
        return 0;
    size_t name = (size_t)(found - a->body), at = name + sizeof CURSOR_MEMBER - 1; /* at: the first digit */
    char prefix[16];
    int n = snprintf(prefix, sizeof prefix, "%" PRIu32 ".", shard);
    assert(n > 0 && (size_t)n < sizeof prefix);
    size_t len = a->body_len + (size_t)n;
    if (body_room(a) < len) {
        char *body = realloc(a->body, len);
        if (!body) { /* the member out: ,"cursor":"P" up to its closing quote */
            const char *end = memchr(a->body + at, '"', a->body_len - at);
            size_t cut = end ? (size_t)(end + 1 - a->body) - name : 0;
            memmove(a->body + name, a->body + name + cut, a->body_len - name - cut);
            a->body_len -= cut;
            return -1;
        }
        a->body = body;
        a->body_cap = len;
    }
    memmove(a->body + at + n, a->body + at, a->body_len - at);
    memcpy(a->body + at, prefix, (size_t)n);
    a->body_len = len;
    return 0;
}

static json_t *problem_object(int status, const char *code, const char *detail)
{
    char type[96];
    snprintf(type, sizeof type, "urn:tally:error:%s", code);
    return json_pack("{s:s,s:s,s:i,s:s}", "type", type, "title", problem_title(code), "status", status, "detail",
                     detail ? detail : problem_title(code));
}

int answer_json(answer_t *a, int status, json_t *body)
{
    return answer_from_json(a, status, ANSWER_JSON, body);
}

int answer_problem(answer_t *a, int status, const char *code, const char *detail)
{
    return answer_from_json(a, status, ANSWER_PROBLEM, problem_object(status, code, detail));
}

int answer_policy_refusal(answer_t *a, const kinds_t *kinds, policy_verdict_t v, kindset_t allowed, unsigned max_kinds)
{
    const char *detail = v == POLICY_CLOSED        ? "the item is closed to reactions"
                         : v == POLICY_NOT_ALLOWED ? "the item's policy does not allow that reaction"
                                                   : "the item's policy allows fewer reactions per user";
    json_t *obj = problem_object(403, policy_verdict_code(v), detail);
    if (obj && v == POLICY_NOT_ALLOWED) {
        kinds_t as_set = *kinds; /* an array in either mode */
        as_set.mode = REACTION_MODE_MANY;
        json_object_set_new(obj, "allowed", kindset_json(&as_set, allowed));
    }
    if (obj && v == POLICY_TOO_MANY)
        json_object_set_new(obj, "max_kinds", json_integer((json_int_t)max_kinds));
    return answer_from_json(a, 403, ANSWER_PROBLEM, obj);
}

int answer_idem_mismatch(answer_t *a)
{
    return answer_problem(a, 409, "idempotency-key-mismatch", "this Idempotency-Key was used with a different request");
}

int answer_version_mismatch(answer_t *a, const kinds_t *kinds, kindset_t reaction, uint64_t version)
{
    char detail[96];
    snprintf(detail, sizeof detail, "the reaction is at version %llu", (unsigned long long)version);
    json_t *obj = problem_object(412, "version-mismatch", detail);
    if (obj) {
        json_object_set_new(obj, kindset_member(kinds), kindset_json(kinds, reaction));
        json_object_set_new(obj, "version", json_integer((json_int_t)version));
    }
    return answer_from_json(a, 412, ANSWER_PROBLEM, obj);
}
