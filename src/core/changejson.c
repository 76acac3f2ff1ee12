/* changejson.c — one change-feed entry as JSON (the change feed's and the webhooks' shape). */
#include "core/changejson.h"

#include "core/kindsjson.h"

#include <stdio.h>
#include <time.h>

void changejson_iso_time(uint64_t at_ms, char out[32])
{
    time_t secs = (time_t)(at_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03uZ", (unsigned)(at_ms % 1000));
}

json_t *changejson_entry(const kinds_t *kinds, uint64_t seq, const transition_t *t)
{
    char cursor[24], at[32];
    snprintf(cursor, sizeof cursor, "%llu", (unsigned long long)seq);
    changejson_iso_time(t->at_ms, at);
    return json_pack("{s:s,s:s%,s:s%,s:o?,s:o?,s:I,s:s}", "cursor", cursor, "item", t->item.ptr, t->item.len, "user",
                     t->user.ptr, t->user.len, "from", kindset_json(kinds, t->from), "to", kindset_json(kinds, t->to),
                     "version", (json_int_t)t->version, "at", at);
}
