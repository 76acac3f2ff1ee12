/* log.h — every line tallyd writes to standard error (events, fatal errors, the access log) goes
 * through here, so --log-format decides the format of all of them in one place. Callers write a
 * logfmt line (level=info event=name key=value key="quoted value"); in json mode it is rewritten
 * as one JSON object with at least ts, level, event and msg. */
#ifndef TALLY_CORE_LOG_H
#define TALLY_CORE_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

typedef enum { LOG_FORMAT_LOGFMT, LOG_FORMAT_JSON } log_format_t;

/* "logfmt" or "json". Returns 0, or -1 when it is neither. */
int log_format_parse(const char *text, log_format_t *out);

/* The format of every line from now on (any thread may be logging: the switch is atomic). */
void log_set_format(log_format_t format);
log_format_t log_get_format(void);

/* One line on stderr; fmt (printf-style) gives the logfmt text without the newline. */
void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on out (the access log); lines without an event are "access" events. */
void log_line_to(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The line as written in format: text is a logfmt line, default_event the event of a line without
 * one, now_ms the time for a line without ts. Writes at most cap bytes including the newline and
 * the NUL (a longer line is cut, still one line); returns the length written. */
size_t log_render(log_format_t format, const char *text, const char *default_event, unsigned long long now_ms,
                  char *out, size_t cap);

#endif
