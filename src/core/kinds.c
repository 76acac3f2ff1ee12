/* kinds.c — parsing and lookup of the configured reaction kinds. */
#include "core/kinds.h"

#include <stdio.h>

static bool kind_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static int kind_name_check(span_t name, char *err, size_t errlen)
{
    if (name.len == 0 || name.len > KIND_NAME_MAX) {
        snprintf(err, errlen, "reaction kind names are 1-%d bytes", KIND_NAME_MAX);
        return -1;
    }
    for (size_t i = 0; i < name.len; i++) {
        if (!kind_char_ok((unsigned char)name.ptr[i])) {
            snprintf(err, errlen, "reaction kind '%.*s' may only use a-z 0-9 _", (int)name.len, name.ptr);
            return -1;
        }
    }
    if (span_eq_str(name, "none") || span_eq_str(name, "reaction") || span_eq_str(name, "reactions")) {
        snprintf(err, errlen, "'%.*s' is reserved and cannot be a reaction kind", (int)name.len, name.ptr);
        return -1;
    }
    return 0;
}

int kinds_parse(kinds_t *kinds, const char *list, char *err, size_t errlen)
{
    kinds_t out = {0};
    snprintf(out.names[KIND_NONE], sizeof out.names[KIND_NONE], "none");
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        span_t name = {p, comma ? (size_t)(comma - p) : strlen(p)};
        if (kind_name_check(name, err, errlen) != 0)
            return -1;
        if (kinds_find(&out, name, false) > 0) {
            snprintf(err, errlen, "reaction kind '%.*s' is listed twice", (int)name.len, name.ptr);
            return -1;
        }
        if (out.count == KINDS_MAX) {
            snprintf(err, errlen, "at most %d reaction kinds", KINDS_MAX);
            return -1;
        }
        out.count++;
        memcpy(out.names[out.count], name.ptr, name.len);
        out.names[out.count][name.len] = '\0';
        if (!comma)
            break;
        p = comma + 1;
    }
    *kinds = out;
    return 0;
}

int kinds_find(const kinds_t *kinds, span_t name, bool allow_none)
{
    if (span_eq_str(name, "none"))
        return allow_none ? KIND_NONE : -1;
    for (int code = 1; code <= kinds->count; code++)
        if (span_eq_str(name, kinds->names[code]))
            return code;
    return -1;
}
