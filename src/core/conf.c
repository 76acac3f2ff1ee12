/* conf.c — splitting a configuration file into names and values. */
#include "core/conf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

void conf_free(conf_t *c)
{
    free(c->text);
    free(c->entries);
    *c = (conf_t){0};
}

/* One line (no newline, NUL-terminated in place). Returns 1 with *e filled, 0 for a line with
 * nothing on it, -1 with why filled. */
static int parse_line(char *line, conf_entry_t *e, char *why, size_t whylen)
{
    char *p = line;
    while (blank(*p))
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    char *name = p;
    while (name_char(*p))
        p++;
    char *name_end = p;
    if (name_end == name) {
        snprintf(why, whylen, "expected name = value");
        return -1;
    }
    if ((size_t)(name_end - name) > CONF_NAME_MAX) {
        snprintf(why, whylen, "a name longer than %d bytes", CONF_NAME_MAX);
        return -1;
    }
    while (blank(*p))
        p++;
    if (*p != '=') {
        if (name[0] == '-' || (*p == '\0' && name_end[0] == '\0'))
            snprintf(why, whylen, "expected name = value (a name without the leading --)");
        else
            snprintf(why, whylen, "expected name = value");
        return -1;
    }
    if (name[0] == '-') {
        snprintf(why, whylen, "a name is a flag's long name without the leading --");
        return -1;
    }
    *name_end = '\0';
    p++;
    while (blank(*p))
        p++;
    char *value = p, *end;
    if (*p == '"') {
        value = ++p;
        char *close = strchr(p, '"');
        if (!close) {
            snprintf(why, whylen, "a quoted value without its closing quote");
            return -1;
        }
        end = close;
        p = close + 1;
        while (blank(*p))
            p++;
        if (*p != '\0' && *p != '#') {
            snprintf(why, whylen, "text after the quoted value");
            return -1;
        }
    } else {
        /* # after a blank starts a comment; a # inside a word (a URI's fragment) stays */
        for (end = p; *end; end++)
            if (*end == '#' && (end == value || blank(end[-1])))
                break;
        while (end > value && blank(end[-1]))
            end--;
        if (end == value) {
            snprintf(why, whylen, "%s has no value (a flag without one is %s = true)", name, name);
            return -1;
        }
    }
    *end = '\0';
    *e = (conf_entry_t){.name = name, .value = value};
    return 1;
}

int conf_parse(const char *text, size_t len, conf_t *out, int *bad_line, char *why, size_t whylen)
{
    *out = (conf_t){0};
    *bad_line = 0;
    if (memchr(text, '\0', len)) {
        int line = 1;
        for (const char *q = text; *q; q++)
            line += *q == '\n';
        *bad_line = line;
        snprintf(why, whylen, "a NUL byte (not a text file)");
        return -1;
    }
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    char *copy = malloc(len + 1);
    conf_entry_t *entries = calloc(lines, sizeof *entries);
    if (!copy || !entries) {
        free(copy);
        free(entries);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    size_t n = 0;
    int line = 0;
    for (char *p = copy; p;) {
        line++;
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        int rc = parse_line(p, &entries[n], why, whylen);
        if (rc < 0) {
            *bad_line = line;
            free(copy);
            free(entries);
            return -1;
        }
        if (rc > 0)
            entries[n++].line = line;
        p = nl ? nl + 1 : NULL;
    }
    *out = (conf_t){.text = copy, .entries = entries, .count = n};
    return 0;
}

int conf_read_file(const char *path, conf_t *out, int *bad_line, char *why, size_t whylen)
{
    *out = (conf_t){0};
    *bad_line = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    char *buf = malloc(CONF_FILE_MAX + 1);
    size_t len = buf ? fread(buf, 1, CONF_FILE_MAX + 1, f) : 0;
    int err = ferror(f) ? errno : 0;
    fclose(f);
    int rc = -1;
    if (!buf)
        snprintf(why, whylen, "out of memory");
    else if (err)
        snprintf(why, whylen, "%s", strerror(err));
    else if (len > CONF_FILE_MAX)
        snprintf(why, whylen, "larger than %u bytes", CONF_FILE_MAX);
    else
        rc = conf_parse(buf, len, out, bad_line, why, whylen);
    free(buf);
    return rc;
}
