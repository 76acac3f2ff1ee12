/* log.c — logfmt lines, or the same lines as JSON objects. */
#include "core/log.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/jsontext.h"

#define LOG_LINE_MAX 8192

static atomic_int current_format = LOG_FORMAT_LOGFMT;

int log_format_parse(const char *text, log_format_t *out)
{
    if (strcmp(text, "logfmt") == 0)
        *out = LOG_FORMAT_LOGFMT;
    else if (strcmp(text, "json") == 0)
        *out = LOG_FORMAT_JSON;
    else
        return -1;
    return 0;
}

void log_set_format(log_format_t format)
{
    atomic_store(&current_format, (int)format);
}

log_format_t log_get_format(void)
{
    return (log_format_t)atomic_load(&current_format);
}

/* A value that reads as a whole number stays one in JSON (counts, milliseconds). */
static json_t *json_value(const char *v, size_t len)
{
    bool number = len > 0 && len <= 15 && (v[0] != '0' || len == 1);
    for (size_t i = 0; i < len && number; i++)
        number = v[i] >= '0' && v[i] <= '9';
    if (number)
        return json_integer(strtoll(v, NULL, 10));
    return json_stringn_nocheck(v, len);
}

/* Words that are not key=value pairs (free text after the pairs) join the msg. */
static void add_text(json_t *obj, const char *text, size_t len)
{
    json_t *old = json_object_get(obj, "msg");
    if (!old) {
        json_object_set_new(obj, "msg", json_stringn_nocheck(text, len));
        return;
    }
    size_t olen = json_string_length(old);
    char *joined = malloc(olen + 1 + len);
    if (!joined)
        return;
    memcpy(joined, json_string_value(old), olen);
    joined[olen] = ' ';
    memcpy(joined + olen + 1, text, len);
    json_object_set_new(obj, "msg", json_stringn_nocheck(joined, olen + 1 + len));
    free(joined);
}

/* Whether p starts a key=value pair (or is the end of the line). */
static bool pair_follows(const char *p)
{
    while (*p == ' ')
        p++;
    if (!*p)
        return true;
    const char *k = p;
    while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-')
        p++;
    return p > k && *p == '=';
}

/* A quoted value's closing quote: values are written by printf with %s, so a quote inside one is
 * not escaped. The close is the first quote followed by the end or by another key=value; failing
 * that, the last quote followed by a blank (free text after the pairs). A backslash escapes the
 * next byte. Copies the value into out; returns where the text goes on. */
static const char *quoted_end(const char *p, char *out, size_t *outlen)
{
    const char *close = NULL;
    for (const char *q = p; *q; q++) {
        if (*q == '\\' && q[1]) {
            q++;
            continue;
        }
        if (*q == '"' && (q[1] == ' ' || q[1] == '\0')) {
            close = q;
            if (pair_follows(q + 1))
                break;
        }
    }
    const char *end = close ? close : p + strlen(p);
    size_t n = 0;
    for (const char *q = p; q < end; q++) {
        if (*q == '\\' && q + 1 < end)
            q++;
        out[n++] = *q;
    }
    *outlen = n;
    return close ? close + 1 : end;
}

/* The length of the UTF-8 sequence at p (1-4), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t n = (p[0] & 0xE0) == 0xC0 ? 2 : (p[0] & 0xF0) == 0xE0 ? 3 : (p[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (n == 2 && p[0] < 0xC2) || (n == 4 && p[0] > 0xF4))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((n == 3 && p[0] == 0xE0 && p[1] < 0xA0) || (n == 3 && p[0] == 0xED && p[1] >= 0xA0) ||
        (n == 4 && p[0] == 0xF0 && p[1] < 0x90) || (n == 4 && p[0] == 0xF4 && p[1] >= 0x90))
        return 0; /* overlong, a surrogate, past U+10FFFF */
    return n;
}

static json_t *logfmt_to_json(const char *raw, const char *default_event, unsigned long long now_ms)
{
    json_t *obj = json_object();
    size_t tlen = strlen(raw);
    char *value = malloc(tlen + 1), *text = malloc(tlen + 1);
    if (!obj || !value || !text) {
        free(value);
        free(text);
        json_decref(obj);
        return NULL;
    }
    /* JSON is UTF-8: a byte that is not (a header's, a file name's) becomes '?' */
    for (size_t i = 0; i < tlen;) {
        size_t n = utf8_len((const unsigned char *)raw + i);
        if (n == 0) {
            text[i++] = '?';
            continue;
        }
        memcpy(text + i, raw + i, n);
        i += n;
    }
    text[tlen] = '\0';
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && *p != ' ' && *p != '=' && *p != '"')
            p++;
        if (*p == '=' && p > start) {
            char key[64];
            size_t klen = (size_t)(p - start) < sizeof key - 1 ? (size_t)(p - start) : sizeof key - 1;
            memcpy(key, start, klen);
            key[klen] = '\0';
            p++;
            size_t vlen = 0;
            if (*p == '"') {
                p = quoted_end(p + 1, value, &vlen);
                json_object_set_new(obj, key, json_stringn_nocheck(value, vlen));
            } else {
                const char *v = p;
                while (*p && *p != ' ')
                    p++;
                json_object_set_new(obj, key, json_value(v, (size_t)(p - v)));
            }
            continue;
        }
        /* free text: up to the next space, or a whole quoted phrase */
        p = start;
        if (*p == '"') {
            size_t vlen;
            p = quoted_end(p + 1, value, &vlen);
            add_text(obj, value, vlen);
        } else {
            while (*p && *p != ' ')
                p++;
            add_text(obj, start, (size_t)(p - start));
        }
    }
    free(value);
    free(text);
    json_t *out = json_object();
    if (!out) {
        json_decref(obj);
        return NULL;
    }
    /* ts, level, event and msg first, whatever the line's order */
    char ts[32];
    json_t *t = json_object_get(obj, "ts");
    if (!t) {
        changejson_iso_time(now_ms, ts);
        json_object_set_new(out, "ts", json_string(ts));
    } else
        json_object_set(out, "ts", t);
    json_t *level = json_object_get(obj, "level");
    json_object_set_new(out, "level", level ? json_incref(level) : json_string("info"));
    json_t *event = json_object_get(obj, "event");
    json_object_set_new(out, "event", event ? json_incref(event) : json_string(default_event));
    json_t *msg = json_object_get(obj, "msg");
    json_object_set_new(out, "msg", msg ? json_incref(msg) : json_incref(json_object_get(out, "event")));
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        if (!json_object_get(out, key))
            json_object_set(out, key, v);
    }
    json_decref(obj);
    return out;
}

size_t log_render(log_format_t format, const char *text, const char *default_event, unsigned long long now_ms,
                  char *out, size_t cap)
{
    if (cap < 2) {
        if (cap)
            out[0] = '\0';
        return 0;
    }
    size_t n = 0;
    if (format == LOG_FORMAT_JSON) {
        json_t *obj = logfmt_to_json(text, default_event, now_ms);
        char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII | JSON_REALS) : NULL;
        json_decref(obj);
        if (s && strlen(s) <= cap - 2) {
            n = strlen(s);
            memcpy(out, s, n);
        } else { /* too long (or out of memory): a line that still parses, saying so */
            n = (size_t)snprintf(out, cap - 1,
                                 "{\"level\":\"error\",\"event\":\"log-line-unrenderable\",\"msg\":\"\"}");
            if (n > cap - 2)
                n = cap - 2;
        }
        free(s);
    } else {
        n = strlen(text);
        if (n > cap - 2)
            n = cap - 2;
        memcpy(out, text, n);
        /* one line, always: a newline inside a value would split it */
        for (size_t i = 0; i < n; i++)
            if (out[i] == '\n')
                out[i] = ' ';
    }
    out[n++] = '\n';
    out[n] = '\0';
    return n;
}

static void vline(FILE *out, const char *default_event, const char *fmt, va_list ap)
{
    char text[LOG_LINE_MAX], line[LOG_LINE_MAX * 2];
    vsnprintf(text, sizeof text, fmt, ap);
    size_t n = log_render(log_get_format(), text, default_event, wall_ms(), line, sizeof line);
    /* one write per line: lines of different threads never interleave */
    flockfile(out);
    fwrite(line, 1, n, out);
    fflush(out);
    funlockfile(out);
}

void log_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(stderr, "log", fmt, ap);
    va_end(ap);
}

void log_line_to(FILE *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(out, "access", fmt, ap);
    va_end(ap);
}
