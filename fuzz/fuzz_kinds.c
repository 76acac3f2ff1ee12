/* fuzz_kinds.c — libFuzzer target for kinds_parse and kinds_find (core/kinds.h). Input: the
 * --reactions list, then optionally '\n' and a name to look up. */
#include <stdbool.h>
#include <stdint.h>

#include "core/kinds.h"
#include "fuzz.h"

#define ERR_LEN 128     /* what the callers pass */
#define ERR_SHORT_LEN 7 /* a short buffer: the message must be cut, never overrun */

static bool kind_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || fuzz_is_digit(c) || c == '_';
}

/* A reference for kinds_parse's acceptance: the rules of API.md § Words. */
static bool ref_kinds_valid(const char *list)
{
    span_t names[KINDS_MAX];
    int count = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        span_t name = {p, comma ? (size_t)(comma - p) : strlen(p)};
        if (name.len == 0 || name.len > KIND_NAME_MAX || span_eq_str(name, "none") || span_eq_str(name, "reaction") ||
            span_eq_str(name, "reactions") || count == KINDS_MAX)
            return false;
        for (size_t i = 0; i < name.len; i++)
            if (!kind_char((unsigned char)name.ptr[i]))
                return false;
        for (int i = 0; i < count; i++)
            if (span_eq(names[i], name))
                return false;
        names[count++] = name;
        if (!comma)
            return true;
        p = comma + 1;
    }
}

static void check_parsed(const kinds_t *k, const char *list)
{
    FUZZ_ASSERT(k->count >= 1 && k->count <= KINDS_MAX);
    FUZZ_ASSERT(strcmp(kinds_name(k, KIND_NONE), "none") == 0);
    /* The names, joined by commas, are the list again, in order. */
    size_t off = 0;
    for (int code = 1; code <= k->count; code++) {
        const char *name = kinds_name(k, code);
        size_t len = strnlen(name, KIND_NAME_MAX + 1);
        FUZZ_ASSERT(len >= 1 && len <= KIND_NAME_MAX);
        FUZZ_ASSERT(strncmp(list + off, name, len) == 0);
        off += len;
        FUZZ_ASSERT(list[off] == (code == k->count ? '\0' : ','));
        off++;
        for (size_t i = 0; i < len; i++)
            FUZZ_ASSERT(kind_char((unsigned char)name[i]));
        FUZZ_ASSERT(kinds_find(k, span_of(name), false) == code);
        FUZZ_ASSERT(kinds_find(k, span_of(name), true) == code);
    }
    FUZZ_ASSERT(kinds_find(k, SPAN_LIT("none"), true) == KIND_NONE);
    FUZZ_ASSERT(kinds_find(k, SPAN_LIT("none"), false) == -1);
    FUZZ_ASSERT(kinds_find(k, SPAN_LIT("reaction"), true) == -1);
}

static void check_find(const kinds_t *k, span_t probe)
{
    for (int allow_none = 0; allow_none <= 1; allow_none++) {
        int code = kinds_find(k, probe, allow_none);
        int want = -1;
        if (span_eq_str(probe, "none"))
            want = allow_none ? KIND_NONE : -1;
        else
            for (int c = 1; c <= k->count && want < 0; c++)
                if (span_eq_str(probe, kinds_name(k, c)))
                    want = c;
        FUZZ_ASSERT(code == want);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t list_len = nl ? (size_t)(nl - data) : size;
    span_t probe = nl ? (span_t){(const char *)nl + 1, size - list_len - 1} : (span_t){0};
    char *list = fuzz_cstring(data, list_len);
    char *err = malloc(ERR_LEN), *err_short = malloc(ERR_SHORT_LEN);
    if (!err || !err_short)
        abort();
    err[0] = err_short[0] = '\0';

    kinds_t k, k_short;
    int rc = kinds_parse(&k, list, err, ERR_LEN);
    int rc_short = kinds_parse(&k_short, list, err_short, ERR_SHORT_LEN);
    FUZZ_ASSERT(rc == 0 || rc == -1);
    FUZZ_ASSERT(rc == rc_short);
    FUZZ_ASSERT((rc == 0) == ref_kinds_valid(list));
    if (rc == 0) {
        check_parsed(&k, list);
        FUZZ_ASSERT(memcmp(&k, &k_short, sizeof k) == 0);
    } else {
        FUZZ_ASSERT(strnlen(err, ERR_LEN) >= 1 && strnlen(err, ERR_LEN) < ERR_LEN);
        FUZZ_ASSERT(strnlen(err_short, ERR_SHORT_LEN) < ERR_SHORT_LEN);
        FUZZ_ASSERT(kinds_parse(&k, KINDS_DEFAULT, err, ERR_LEN) == 0);
    }
    check_find(&k, probe);

    free(err_short);
    free(err);
    free(list);
    return 0;
}
