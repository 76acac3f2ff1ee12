/* fuzz_kindset.c — libFuzzer target for the set parsers of many mode (core/kindsjson.h): a set from
 * a JSON array (write bodies, import lines) and from kinds joined by '|' (import CSV). Input: the
 * text, parsed both ways against the kinds "like,dislike,love". */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/kindsjson.h"
#include "fuzz.h"

/* A reference for kindset_from_text: each '|'-separated field a configured kind, none repeated. */
static bool ref_text(const kinds_t *k, span_t text, kindset_t *set)
{
    *set = KINDSET_EMPTY;
    if (text.len == 0)
        return true;
    size_t start = 0;
    for (size_t i = 0; i <= text.len; i++) {
        if (i < text.len && text.ptr[i] != '|')
            continue;
        int code = -1;
        for (int c = 1; c <= k->count; c++)
            if (i - start == strlen(kinds_name(k, c)) && memcmp(text.ptr + start, kinds_name(k, c), i - start) == 0)
                code = c;
        if (code < 0 || kindset_has(*set, code))
            return false;
        *set |= kindset_of(code);
        start = i + 1;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kinds_t k;
    char err[96];
    if (kinds_parse(&k, "like,dislike,love", err, sizeof err) != 0)
        abort();
    k.mode = REACTION_MODE_MANY;
    span_t text = {(const char *)data, size};
    kindset_t set, want;
    int rc = kindset_from_text(&k, text, '|', &set, err, sizeof err);
    bool ok = ref_text(&k, text, &want);
    FUZZ_ASSERT((rc == 0) == ok);
    if (rc == 0) {
        FUZZ_ASSERT(set == want && !(set & ~KINDSET_ALL(k.count)));
    } else {
        FUZZ_ASSERT(strnlen(err, sizeof err) >= 1 && strnlen(err, sizeof err) < sizeof err);
    }

    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (doc) {
        rc = kindset_from_json(&k, doc, &set, err, sizeof err);
        FUZZ_ASSERT(rc == 0 || rc == -1);
        if (rc == 0) { /* an array of distinct kinds: rendered back, it parses to the same set */
            FUZZ_ASSERT(json_is_array(doc) && (size_t)kindset_size(set) == json_array_size(doc));
            json_t *back = kindset_json(&k, set);
            kindset_t again;
            FUZZ_ASSERT(back && kindset_from_json(&k, back, &again, err, sizeof err) == 0 && again == set);
            json_decref(back);
        }
        json_decref(doc);
    }
    return 0;
}
