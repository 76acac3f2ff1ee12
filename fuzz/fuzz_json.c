/* fuzz_json.c — libFuzzer target for the JSON request bodies: json_loadb with JSON_REJECT_DUPLICATES, then
 * what the handlers read: "reaction" among the kinds (items.c body_reaction_or_reply) and "items" as
 * item ids (admin.c recount_body_or_reply). */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/ids.h"
#include "core/kinds.h"
#include "fuzz.h"

#define BODY_MAX 4096 /* API.md: request bodies over 4 KiB are refused before parsing */
#define KINDS_WIDE "like,love,haha,wow,sad,angry"

static kinds_t kinds_default, kinds_wide;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[128];
    if (kinds_parse(&kinds_default, KINDS_DEFAULT, err, sizeof err) != 0 ||
        kinds_parse(&kinds_wide, KINDS_WIDE, err, sizeof err) != 0)
        abort();
    return 0;
}

/* What body_reaction_or_reply decides: the kind code, or -1 (a 400 answer). */
static int body_reaction(const kinds_t *kinds, json_t *doc, bool allow_none)
{
    json_t *reaction = json_object_get(doc, "reaction");
    if (!json_is_string(reaction))
        return -1;
    span_t name = {json_string_value(reaction), json_string_length(reaction)};
    int code = kinds_find(kinds, name, allow_none);
    FUZZ_ASSERT(code >= -1 && code <= kinds->count);
    if (code >= 0) {
        FUZZ_ASSERT(code > KIND_NONE || allow_none);
        FUZZ_ASSERT(span_eq_str(name, kinds_name(kinds, code))); /* no NUL or other bytes beyond the name */
    } else {
        FUZZ_ASSERT(!(allow_none && span_eq_str(name, "none")));
    }
    return code;
}

/* What recount_body_or_reply accepts: {} or {"items":[ids…]}; each id is copied into an ID_MAX_LEN slot. */
static void recount_items(json_t *doc)
{
    json_t *items = json_object_get(doc, "items");
    if (!items || !json_is_array(items))
        return;
    for (size_t i = 0; i < json_array_size(items); i++) {
        json_t *v = json_array_get(items, i);
        if (!json_is_string(v))
            return;
        span_t id = {json_string_value(v), json_string_length(v)};
        if (!id_valid(id))
            return;
        FUZZ_ASSERT(id.len >= 1 && id.len <= ID_MAX_LEN);
        FUZZ_ASSERT(strlen(id.ptr) == id.len);
    }
}

/* What the parser accepted survives being written out and read back, duplicates still refused. */
static void check_round_trip(json_t *doc)
{
    size_t need = json_dumpb(doc, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
    FUZZ_ASSERT(need > 0);
    char *buf = malloc(need);
    if (!buf)
        abort();
    FUZZ_ASSERT(json_dumpb(doc, buf, need, JSON_COMPACT | JSON_ENCODE_ANY) == need);
    json_error_t err;
    json_t *again = json_loadb(buf, need, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    FUZZ_ASSERT(again != NULL);
    FUZZ_ASSERT(json_equal(doc, again));
    json_decref(again);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > BODY_MAX)
        return 0;
    json_error_t err;
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &err);
    if (!doc) {
        /* The error text goes into the problem body as a C string. */
        FUZZ_ASSERT(strnlen(err.text, JSON_ERROR_TEXT_LENGTH - 1) < JSON_ERROR_TEXT_LENGTH - 1);
        FUZZ_ASSERT(err.text[0] != '\0');
        FUZZ_ASSERT(err.position >= 0 && (size_t)err.position <= size);
        return 0;
    }
    FUZZ_ASSERT(json_is_object(doc) || json_is_array(doc)); /* without JSON_DECODE_ANY */
    if (json_is_object(doc)) {
        int put = body_reaction(&kinds_default, doc, true);
        int toggle = body_reaction(&kinds_default, doc, false);
        FUZZ_ASSERT(toggle == put || (put == KIND_NONE && toggle == -1));
        body_reaction(&kinds_wide, doc, true);
        body_reaction(&kinds_wide, doc, false);
        recount_items(doc);
    }
    check_round_trip(doc);
    json_decref(doc);
    return 0;
}
