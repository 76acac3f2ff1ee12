/* conf.h — the configuration file of --config: one `name = value` a line, where name is a flag's
 * long name without the dashes; blank lines and lines whose first non-blank byte is # are skipped,
 * and # after a blank starts a comment. A value in double quotes keeps its blanks and # (no
 * escapes). What a name means and whether its value is good is the flag table's business
 * (src/flags.c); this only splits lines. */
#ifndef TALLY_CORE_CONF_H
#define TALLY_CORE_CONF_H

#include <stddef.h>

#define CONF_FILE_MAX (1u << 20) /* a configuration file is small; a larger one is refused */
#define CONF_NAME_MAX 64

typedef struct {
    char *name;  /* "rate-limit" */
    char *value; /* "20/s:40" */
    int line;    /* 1-based */
} conf_entry_t;

typedef struct {
    char *text; /* the file's bytes, cut into the names and values */
    conf_entry_t *entries;
    size_t count;
} conf_t;

/* Splits text (len bytes; it need not end in a NUL) into *out. Returns 0, or -1 with *bad_line the
 * line at fault and why filled (*out is then empty). */
int conf_parse(const char *text, size_t len, conf_t *out, int *bad_line, char *why, size_t whylen);

/* Reads and splits the file at path. Returns 0, or -1 with *bad_line (0 when the file could not be
 * read at all) and why filled. */
int conf_read_file(const char *path, conf_t *out, int *bad_line, char *why, size_t whylen);

void conf_free(conf_t *c);

#endif
