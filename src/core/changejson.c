/* changejson.c — one change-feed entry as JSON (the change feed's and the webhooks' shape). */
#include "core/changejson.h"

#include "core/kindsjson.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Two digits of v (0..99) at p. */
static void two_digits(char *p, unsigned v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

/* Rendered by hand rather than with gmtime_r and strftime: pages and webhook batches write one per
 * entry, and the library calls were most of an entry's cost. Civil date from days since the epoch
 * (proleptic Gregorian, eras of 400 years); years 0000-9999. */
void changejson_iso_time(uint64_t at_ms, char out[32])
{
    uint64_t secs = at_ms / 1000, days = secs / 86400, sod = secs % 86400;
    int64_t z = (int64_t)days + 719468;
    int64_t era = z / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    unsigned day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
    uint64_t year = (uint64_t)((int64_t)yoe + era * 400) + (month <= 2);
    if (year > 9999) { /* beyond what a commit time can be; the library's rendering */
        time_t t = (time_t)secs;
        struct tm tm;
        gmtime_r(&t, &tm);
        size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out + n, 32 - n, ".%03uZ", (unsigned)(at_ms % 1000));
        return;
    }
    memcpy(out, "0000-00-00T00:00:00.000Z", 25);
    two_digits(out, (unsigned)(year / 100));
    two_digits(out + 2, (unsigned)(year % 100));
    two_digits(out + 5, month);
    two_digits(out + 8, day);
    two_digits(out + 11, (unsigned)(sod / 3600));
    two_digits(out + 14, (unsigned)(sod / 60 % 60));
    two_digits(out + 17, (unsigned)(sod % 60));
    unsigned ms = (unsigned)(at_ms % 1000);
    out[20] = (char)('0' + ms / 100);
    two_digits(out + 21, ms % 100);
}

json_t *changejson_time_json(uint64_t ms)
{
    char at[32];
    if (!ms)
        return json_null();
    changejson_iso_time(ms, at);
    return json_string(at);
}

json_t *changejson_entry(const kinds_t *kinds, uint64_t seq, const transition_t *t)
{
    char cursor[24], at[32];
    snprintf(cursor, sizeof cursor, "%llu", (unsigned long long)seq);
    changejson_iso_time(t->at_ms, at);
    json_t *e = json_pack("{s:s,s:s%,s:s%,s:o?,s:o?,s:I,s:s}", "cursor", cursor, "item", t->item.ptr, t->item.len,
                          "user", t->user.ptr, t->user.len, "from", kindset_json(kinds, t->from), "to",
                          kindset_json(kinds, t->to), "version", (json_int_t)t->version, "at", at);
    if (e && t->uncounted &&
        json_object_set_new(e, "counted",
                            json_pack("[bb]", !(t->uncounted & TRANSITION_UNCOUNTED_BEFORE),
                                      !(t->uncounted & TRANSITION_UNCOUNTED_AFTER))) != 0) {
        json_decref(e);
        return NULL;
    }
    return e;
}

void changejson_append(textbuf_t *b, const kinds_t *kinds, uint64_t seq, const transition_t *t)
{
    changejson_append_shard(b, kinds, 1, 0, seq, t);
}

void changejson_append_shard(textbuf_t *b, const kinds_t *kinds, uint32_t count, uint32_t shard, uint64_t seq,
                             const transition_t *t)
{
    char at[32];
    changejson_iso_time(t->at_ms, at);
    textbuf_lit(b, "{\"cursor\":\"");
    if (count > 1) { /* "S.P": the shard first (one shard: the position alone, as it has always been) */
        textbuf_uint(b, shard);
        textbuf_lit(b, ".");
    }
    textbuf_uint(b, seq);
    textbuf_lit(b, "\",\"item\":");
    textbuf_safe(b, t->item);
    textbuf_lit(b, ",\"user\":");
    textbuf_safe(b, t->user);
    textbuf_lit(b, ",\"from\":");
    kindset_append(b, kinds, t->from);
    textbuf_lit(b, ",\"to\":");
    kindset_append(b, kinds, t->to);
    textbuf_lit(b, ",\"version\":");
    textbuf_uint(b, t->version);
    textbuf_lit(b, ",\"at\":");
    textbuf_safe(b, span_of(at));
    if (t->uncounted) { /* absent means [true,true] */
        textbuf_printf(b, ",\"counted\":[%s,%s]", t->uncounted & TRANSITION_UNCOUNTED_BEFORE ? "false" : "true",
                       t->uncounted & TRANSITION_UNCOUNTED_AFTER ? "false" : "true");
    }
    textbuf_lit(b, "}");
}
