/* csv.c — RFC 4180 records (csv.h). */
#include "core/csv.h"

#include <string.h>

enum {
    CSV_FIELD_START = 1, /* 0 is a record not begun: the same as a field's start */
    CSV_UNQUOTED,
    CSV_QUOTED,
    CSV_QUOTE, /* a quote inside a quoted field: the field's end, or the first of a doubled quote */
    CSV_AFTER, /* after a quoted field's closing quote */
};

/* One byte's step; a line break between two lines is '\n'. */
static int step(int state, char c)
{
    switch (state) {
    case CSV_QUOTED:
        return c == '"' ? CSV_QUOTE : CSV_QUOTED;
    case CSV_QUOTE:
        return c == '"' ? CSV_QUOTED : c == ',' ? CSV_FIELD_START : CSV_AFTER;
    case CSV_UNQUOTED:
    case CSV_AFTER:
        return c == ',' ? CSV_FIELD_START : state;
    default: /* a field's start */
        return c == '"' ? CSV_QUOTED : c == ',' ? CSV_FIELD_START : CSV_UNQUOTED;
    }
}

void csv_scan_line(csv_scan_t *scan, span_t line)
{
    int state = scan->state;
    if (state == CSV_QUOTED)
        state = step(state, '\n'); /* the line break between the two lines, inside the field */
    else if (state == CSV_QUOTE)
        state = CSV_AFTER; /* a line break closed the field, and the record: not fed after it */
    for (size_t i = 0; i < line.len; i++)
        state = step(state, line.ptr[i]);
    scan->state = state ? state : CSV_FIELD_START;
}

bool csv_scan_open(const csv_scan_t *scan)
{
    return scan->state == CSV_QUOTED;
}

span_t csv_strip_bom(span_t text)
{
    if (text.len >= 3 && memcmp(text.ptr, "\xEF\xBB\xBF", 3) == 0)
        return (span_t){text.ptr + 3, text.len - 3};
    return text;
}

const char *csv_record(span_t text, span_t *fields, size_t max, size_t *n, char *out)
{
    *n = 0;
    if (text.len && text.ptr[text.len - 1] == '\r') /* the CR of a CRLF (a CR inside quotes is followed by LF) */
        text.len--;
    size_t o = 0, start = 0;
    int state = CSV_FIELD_START;
    for (size_t i = 0; i <= text.len; i++) {
        bool end = i == text.len;
        char c = end ? ',' : text.ptr[i];
        if (state == CSV_QUOTED) {
            if (end)
                return "a quoted field is not closed";
            if (c == '"')
                state = CSV_QUOTE;
            else
                out[o++] = c;
            continue;
        }
        if (state == CSV_QUOTE && c == '"') { /* a doubled quote: one quote in the field */
            out[o++] = '"';
            state = CSV_QUOTED;
            continue;
        }
        if (c == ',') {
            if (*n == max)
                return "too many fields";
            fields[(*n)++] = (span_t){out + start, o - start};
            start = o;
            state = CSV_FIELD_START;
            continue;
        }
        if (state == CSV_QUOTE || state == CSV_AFTER)
            return "text after a closing quote";
        if (c == '"') {
            if (state == CSV_UNQUOTED)
                return "a quote inside an unquoted field (quote the whole field, and double the quote)";
            state = CSV_QUOTED;
            continue;
        }
        out[o++] = c;
        state = CSV_UNQUOTED;
    }
    return NULL;
}
