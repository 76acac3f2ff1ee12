/* csv.h — CSV records as RFC 4180 writes them: fields separated by commas, a field optionally
 * quoted ("…"), a quote inside a quoted field doubled (""), a record ended by CRLF or LF — except
 * inside a quoted field, where a line break belongs to the field, so a record may span lines. A
 * UTF-8 byte order mark before the first record (as Excel writes one) is not part of it. Pure. */
#ifndef TALLY_CORE_CSV_H
#define TALLY_CORE_CSV_H

#include <stdbool.h>
#include <stddef.h>

#include "core/span.h"

/* Where a record stands after the lines fed so far: csv_scan_line follows the quotes only, so a
 * caller reading line by line knows whether the record goes on with the next line. */
typedef struct {
    int state; /* internal: CSV_FIELD_START, …; zero: a record not begun */
} csv_scan_t;

/* Feeds one line (its text without the '\n' that ended it) of the record. */
void csv_scan_line(csv_scan_t *scan, span_t line);
/* True when the record goes on past the line fed last (it ended inside a quoted field): the next
 * line, after a '\n', is more of that field. */
bool csv_scan_open(const csv_scan_t *scan);

/* text without a leading UTF-8 byte order mark (EF BB BF), if it has one. */
span_t csv_strip_bom(span_t text);

/* Splits one record (its lines joined by '\n', without the line break that ended it; a '\r' before
 * that break is dropped) into at most max fields, unquoted into out (at least text.len bytes): each
 * fields[i] points into out. Returns NULL with *n fields, or what is wrong: more than max fields, a
 * quote inside an unquoted field, text after a closing quote, a quoted field not closed. */
const char *csv_record(span_t text, span_t *fields, size_t max, size_t *n, char *out);

#endif
