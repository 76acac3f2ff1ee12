#include "core/shardmap.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/b64url.h"
#include "core/jsontext.h"
#include "core/parse.h"

#define IDENTITY_VERSION 1
#define TOKEN_VERSION 1

uint32_t shard_virtual_of(span_t id)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    /* crc32 takes a uInt length: ids are short, but keep it right for any span */
    const unsigned char *p = (const unsigned char *)id.ptr;
    size_t left = id.len;
    while (left > 0) {
        uInt n = left > (1u << 30) ? (1u << 30) : (uInt)left;
        crc = crc32(crc, p, n);
        p += n;
        left -= n;
    }
    return (uint32_t)(crc % SHARD_VIRTUAL);
}

int shard_map_even(shard_map_t *map, uint32_t count)
{
    if (count < 1 || count > SHARD_MAX)
        return -1;
    map->count = count;
    for (uint32_t v = 0; v < SHARD_VIRTUAL; v++)
        map->of[v] = (uint16_t)((uint64_t)v * count / SHARD_VIRTUAL);
    return 0;
}

int shard_map_diff(const shard_map_t *a, const shard_map_t *b)
{
    for (uint32_t v = 0; v < SHARD_VIRTUAL; v++)
        if (a->of[v] != b->of[v])
            return (int)v;
    return -1;
}

bool shard_cluster_id_valid(span_t text)
{
    if (text.len != SHARD_CLUSTER_HEX)
        return false;
    for (size_t i = 0; i < text.len; i++) {
        char c = text.ptr[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

char *shard_identity_format(const shard_identity_t *id)
{
    json_t *ranges = json_array();
    bool ok = ranges != NULL;
    for (uint32_t first = 0; ok && first < SHARD_VIRTUAL;) {
        uint32_t last = first;
        while (last + 1 < SHARD_VIRTUAL && id->map.of[last + 1] == id->map.of[first])
            last++;
        json_t *r = json_pack("[III]", (json_int_t)first, (json_int_t)last, (json_int_t)id->map.of[first]);
        ok = r && json_array_append_new(ranges, r) == 0;
        first = last + 1;
    }
    if (!ok) {
        json_decref(ranges);
        return NULL;
    }
    json_t *obj = json_pack("{sIsssIsIso}", "version", (json_int_t)IDENTITY_VERSION, "cluster", id->cluster, "shard",
                            (json_int_t)id->shard, "shards", (json_int_t)id->map.count, "map", ranges);
    if (!obj)
        return NULL;
    char *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REALS); /* (no reals: the rule) */
    json_decref(obj);
    return text;
}

/* An integer member's value in [min, max], or -1 with err filled. */
static int member_uint(json_t *obj, const char *name, uint64_t min, uint64_t max, uint64_t *out, char *err,
                       size_t errlen)
{
    json_t *v = json_object_get(obj, name);
    if (!v) {
        snprintf(err, errlen, "no \"%s\"", name);
        return -1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min || (uint64_t)json_integer_value(v) > max) {
        snprintf(err, errlen, "\"%s\" must be an integer from %" PRIu64 " to %" PRIu64, name, min, max);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_ranges(json_t *ranges, shard_map_t *map, char *err, size_t errlen)
{
    if (!json_is_array(ranges) || json_array_size(ranges) == 0) {
        snprintf(err, errlen, "\"map\" must be a non-empty array of [first,last,shard] ranges");
        return -1;
    }
    uint32_t next = 0; /* the first virtual shard not covered yet */
    size_t i;
    json_t *r;
    json_array_foreach(ranges, i, r)
    {
        json_t *f = json_array_get(r, 0), *l = json_array_get(r, 1), *s = json_array_get(r, 2);
        if (!json_is_array(r) || json_array_size(r) != 3 || !json_is_integer(f) || !json_is_integer(l) ||
            !json_is_integer(s)) {
            snprintf(err, errlen, "map: range %zu is not [first,last,shard] of three integers", i);
            return -1;
        }
        json_int_t first = json_integer_value(f), last = json_integer_value(l), shard = json_integer_value(s);
        if (first < 0 || last < first || last >= SHARD_VIRTUAL) {
            snprintf(err, errlen,
                     "map: range %zu [%" JSON_INTEGER_FORMAT ",%" JSON_INTEGER_FORMAT
                     "] is not a range of virtual shards 0..%d",
                     i, first, last, SHARD_VIRTUAL - 1);
            return -1;
        }
        if (first < (json_int_t)next) {
            snprintf(err, errlen,
                     "map: range %zu starts at virtual shard %" JSON_INTEGER_FORMAT
                     ", which the range before it already covers (ranges overlap or are out of order)",
                     i, first);
            return -1;
        }
        if (first > (json_int_t)next) {
            snprintf(err, errlen, "map: virtual shards %u..%" JSON_INTEGER_FORMAT " are in no range", next, first - 1);
            return -1;
        }
        if (shard < 0 || shard >= (json_int_t)map->count) {
            snprintf(err, errlen, "map: range %zu names shard %" JSON_INTEGER_FORMAT " of a cluster of %u shards", i,
                     shard, map->count);
            return -1;
        }
        for (json_int_t v = first; v <= last; v++)
            map->of[v] = (uint16_t)shard;
        next = (uint32_t)last + 1;
    }
    if (next != SHARD_VIRTUAL) {
        snprintf(err, errlen, "map: virtual shards %u..%d are in no range", next, SHARD_VIRTUAL - 1);
        return -1;
    }
    return 0;
}

int shard_identity_parse(span_t text, shard_identity_t *id, char *err, size_t errlen)
{
    if (text.len > SHARD_IDENTITY_TEXT_MAX) {
        snprintf(err, errlen, "longer than %u bytes", SHARD_IDENTITY_TEXT_MAX);
        return -1;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(text.ptr ? text.ptr : "", text.len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj) {
        snprintf(err, errlen, "not JSON: %s", jerr.text);
        return -1;
    }
    int rc = -1;
    const char *key;
    json_t *v;
    uint64_t version, shard, count;
    if (!json_is_object(obj)) {
        snprintf(err, errlen, "not a JSON object");
        goto done;
    }
    json_object_foreach(obj, key, v)
    {
        static const char *const known[] = {"version", "cluster", "shard", "shards", "map"};
        bool found = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            found = found || strcmp(key, known[i]) == 0;
        if (!found) {
            snprintf(err, errlen, "unknown member \"%.40s\"", key);
            goto done;
        }
    }
    if (member_uint(obj, "version", 0, UINT32_MAX, &version, err, errlen) != 0)
        goto done;
    if (version != IDENTITY_VERSION) {
        snprintf(err, errlen, "version %" PRIu64 " is not known to this build (it reads version %d)", version,
                 IDENTITY_VERSION);
        goto done;
    }
    json_t *cluster = json_object_get(obj, "cluster");
    if (!json_is_string(cluster) ||
        !shard_cluster_id_valid((span_t){json_string_value(cluster), json_string_length(cluster)})) {
        snprintf(err, errlen, "\"cluster\" must be %d lowercase hex digits", SHARD_CLUSTER_HEX);
        goto done;
    }
    if (member_uint(obj, "shards", 1, SHARD_MAX, &count, err, errlen) != 0 ||
        member_uint(obj, "shard", 0, UINT32_MAX, &shard, err, errlen) != 0)
        goto done;
    if (shard >= count) {
        snprintf(err, errlen, "\"shard\" %" PRIu64 " is not below \"shards\" %" PRIu64, shard, count);
        goto done;
    }
    memcpy(id->cluster, json_string_value(cluster), SHARD_CLUSTER_HEX + 1);
    id->shard = (uint32_t)shard;
    id->map.count = (uint32_t)count;
    json_t *map = json_object_get(obj, "map");
    if (!map) {
        snprintf(err, errlen, "no \"map\"");
        goto done;
    }
    rc = parse_ranges(map, &id->map, err, errlen);
done:
    json_decref(obj);
    return rc;
}

int shard_identity_check(const shard_identity_t *want, uint32_t position, const shard_identity_t *got, char *msg,
                         size_t len)
{
    if (strcmp(want->cluster, got->cluster) != 0) {
        snprintf(msg, len, "database at position %u is shard %u of cluster %s, not of cluster %s", position, got->shard,
                 got->cluster, want->cluster);
        return -1;
    }
    if (got->map.count != want->map.count) {
        snprintf(msg, len, "cluster %s has %u shards, this node lists %u (the database at position %u says so)",
                 got->cluster, got->map.count, want->map.count, position);
        return -1;
    }
    if (got->shard != position) {
        snprintf(msg, len, "database at position %u is shard %u of cluster %s", position, got->shard, got->cluster);
        return -1;
    }
    int v = shard_map_diff(&want->map, &got->map);
    if (v >= 0) {
        snprintf(msg, len,
                 "map differs at virtual shard %d: the database at position %u gives it to shard %u, the cluster's "
                 "map to shard %u",
                 v, position, got->map.of[v], want->map.of[v]);
        return -1;
    }
    return 0;
}

int shard_cursor_format(uint32_t count, uint32_t shard, uint64_t position, char *out, size_t cap)
{
    if (shard >= count)
        return -1;
    int n = count == 1 ? snprintf(out, cap, "%" PRIu64, position)
                       : snprintf(out, cap, "%" PRIu32 ".%" PRIu64, shard, position);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* Decimal digits with no sign and no leading zero (but "0"), at most max. */
static int strict_uint(span_t text, uint64_t max, uint64_t *value)
{
    if (text.len > 1 && text.ptr[0] == '0')
        return -1;
    return parse_uint(text, max, value);
}

int shard_cursor_parse(span_t text, uint32_t count, uint32_t *shard, uint64_t *position)
{
    if (count == 1) {
        if (parse_uint(text, SHARD_POSITION_MAX, position) != 0)
            return -1;
        *shard = 0;
        return 0;
    }
    const char *dot = text.len ? memchr(text.ptr, '.', text.len) : NULL;
    if (!dot)
        return -1;
    span_t s = {text.ptr, (size_t)(dot - text.ptr)}, p = {dot + 1, text.len - s.len - 1};
    uint64_t sv, pv;
    if (count == 0 || strict_uint(s, count - 1, &sv) != 0 || strict_uint(p, SHARD_POSITION_MAX, &pv) != 0)
        return -1;
    *shard = (uint32_t)sv;
    *position = pv;
    return 0;
}

static size_t put_varint(unsigned char *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

/* Reads one varint in its shortest form from in[*at..len): 0, or -1. */
static int get_varint(const unsigned char *in, size_t len, size_t *at, uint64_t *v)
{
    uint64_t value = 0;
    for (unsigned shift = 0, i = 0; *at < len; shift += 7, i++) {
        unsigned char b = in[(*at)++];
        if (i == 9 && b > 1) /* the tenth byte holds the 64th bit only */
            return -1;
        value |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (b == 0 && i > 0) /* a longer form than needed: not canonical */
                return -1;
            *v = value;
            return 0;
        }
    }
    return -1;
}

#define TOKEN_BYTES_MAX (1 + 10 + 10 * SHARD_MAX)

int shard_token_format(const uint64_t *positions, uint32_t count, char *out, size_t cap)
{
    if (count < 1 || count > SHARD_MAX)
        return -1;
    if (count == 1) {
        int n = snprintf(out, cap, "%" PRIu64, positions[0]);
        return n < 0 || (size_t)n >= cap ? -1 : n;
    }
    unsigned char bytes[TOKEN_BYTES_MAX];
    size_t n = 0;
    bytes[n++] = TOKEN_VERSION;
    n += put_varint(bytes + n, count);
    for (uint32_t i = 0; i < count; i++)
        n += put_varint(bytes + n, positions[i]);
    return b64url_encode(bytes, n, out, cap);
}

int shard_token_parse(span_t text, uint32_t count, uint64_t *positions)
{
    if (count < 1 || count > SHARD_MAX)
        return -1;
    if (count == 1)
        return parse_uint(text, SHARD_POSITION_MAX, &positions[0]);
    unsigned char bytes[TOKEN_BYTES_MAX];
    int n = b64url_decode(text, bytes, sizeof bytes);
    if (n < 2 || bytes[0] != TOKEN_VERSION)
        return -1;
    size_t at = 1;
    uint64_t c;
    if (get_varint(bytes, (size_t)n, &at, &c) != 0 || c != count)
        return -1;
    for (uint32_t i = 0; i < count; i++)
        if (get_varint(bytes, (size_t)n, &at, &positions[i]) != 0 || positions[i] > SHARD_POSITION_MAX)
            return -1;
    return at == (size_t)n ? 0 : -1;
}
