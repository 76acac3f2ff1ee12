/* fuzz_csv.c — libFuzzer target for CSV records (core/csv.h): csv_record against a reference parser
 * written the other way round (field by field rather than byte by byte), the round trip of what it
 * accepts (every field quoted again), and csv_scan_line's view of the quotes, line by line, against
 * csv_record's (a record it says goes on is one csv_record finds not closed). Input: one record's
 * text, its lines joined by '\n'. */
#include <stdbool.h>
#include <stdint.h>

#include "core/csv.h"
#include "fuzz.h"

#define FIELDS_MAX 8

/* The reference: RFC 4180 field by field. Returns true with the fields copied into out. */
static bool ref_record(const char *p, size_t len, span_t *fields, size_t *n, char *out)
{
    if (len && p[len - 1] == '\r')
        len--;
    size_t i = 0, o = 0;
    *n = 0;
    for (;;) {
        size_t start = o;
        if (i < len && p[i] == '"') {
            i++;
            for (;;) {
                if (i == len)
                    return false; /* not closed */
                if (p[i] == '"' && i + 1 < len && p[i + 1] == '"') {
                    out[o++] = '"';
                    i += 2;
                } else if (p[i] == '"') {
                    i++;
                    break;
                } else {
                    out[o++] = p[i++];
                }
            }
            if (i < len && p[i] != ',')
                return false; /* text after the closing quote */
        } else {
            while (i < len && p[i] != ',') {
                if (p[i] == '"')
                    return false;
                out[o++] = p[i++];
            }
        }
        if (*n == FIELDS_MAX)
            return false;
        fields[(*n)++] = (span_t){out + start, o - start};
        if (i == len)
            return true;
        i++; /* the comma */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    /* exact-size buffers: ASan sees a write past the end */
    char *out = malloc(size ? size : 1), *ref_out = malloc(size ? size : 1);
    if (!out || !ref_out)
        abort();
    span_t f[FIELDS_MAX], rf[FIELDS_MAX];
    size_t n = 0, rn = 0;
    const char *error = csv_record((span_t){text, size}, f, FIELDS_MAX, &n, out);
    bool ref_ok = ref_record(text, size, rf, &rn, ref_out);
    FUZZ_ASSERT((error == NULL) == ref_ok);
    FUZZ_ASSERT(n <= FIELDS_MAX);
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT(fuzz_span_within(f[i], out, size ? size : 1));
    if (!error) {
        FUZZ_ASSERT(n == rn);
        for (size_t i = 0; i < n; i++)
            FUZZ_ASSERT(span_eq(f[i], rf[i]));
        /* quoted again, every field: the same fields */
        size_t cap = 2 * size + 3 * n + 1, len = 0;
        char *again = malloc(cap), *out2 = malloc(cap);
        if (!again || !out2)
            abort();
        for (size_t i = 0; i < n; i++) {
            if (i)
                again[len++] = ',';
            again[len++] = '"';
            for (size_t k = 0; k < f[i].len; k++) {
                if (f[i].ptr[k] == '"')
                    again[len++] = '"';
                again[len++] = f[i].ptr[k];
            }
            again[len++] = '"';
        }
        span_t g[FIELDS_MAX];
        size_t gn = 0;
        FUZZ_ASSERT(csv_record((span_t){again, len}, g, FIELDS_MAX, &gn, out2) == NULL && gn == n);
        for (size_t i = 0; i < n; i++)
            FUZZ_ASSERT(span_eq(g[i], f[i]));
        free(again);
        free(out2);
    }
    /* line by line: open after the last line exactly when the text ends inside a quoted field,
     * which csv_record never accepts */
    csv_scan_t scan = {0};
    const char *p = text, *end = text + size;
    for (;;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        span_t line = {p, nl ? (size_t)(nl - p) : (size_t)(end - p)};
        csv_scan_line(&scan, line);
        if (!nl)
            break;
        if (!csv_scan_open(&scan)) { /* the record ended at this line: the rest is another one */
            scan = (csv_scan_t){0};
            text = nl + 1;
        }
        p = nl + 1;
    }
    if (csv_scan_open(&scan))
        FUZZ_ASSERT(csv_record((span_t){text, (size_t)(end - text)}, f, FIELDS_MAX, &n, out) != NULL);
    if (text == (const char *)data && !error)
        FUZZ_ASSERT(!csv_scan_open(&scan));
    FUZZ_ASSERT(csv_strip_bom((span_t){(const char *)data, size}).len +
                    3 * (size >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3)) ==
                size);
    free(out);
    free(ref_out);
    return 0;
}
