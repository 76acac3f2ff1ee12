/* flags.c — the command line and --config FILE read through one flag table. */
#include "flags.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"

#define HELP_COLUMN 29 /* where a flag's help text starts in --help */
#define RELOAD_NOTE " (reloads on SIGHUP)"

const char *flag_set_string(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    *(const char **)dest = value;
    return NULL;
}

const char *flag_set_uint(const flag_t *f, const char *value, void *dest)
{
    uint64_t n;
    if (parse_uint(span_of(value), f->max, &n) != 0 || n < f->min)
        return f->why ? f->why : "expected a whole number in range";
    *(uint64_t *)dest = n;
    return NULL;
}

const char *flag_set_duration(const flag_t *f, const char *value, void *dest)
{
    uint64_t ms;
    if (parse_duration_ms(value, &ms) != 0)
        return "expected a duration such as 250ms, 90s, 15m or 24h";
    if (ms < f->min)
        return f->why;
    *(uint64_t *)dest = ms;
    return NULL;
}

const char *flag_set_size(const flag_t *f, const char *value, void *dest)
{
    uint64_t bytes;
    if (parse_size_bytes(value, &bytes) != 0 || bytes < f->min || bytes > f->max)
        return f->why;
    *(uint64_t *)dest = bytes;
    return NULL;
}

const flag_t *flags_find(const flagset_t *fs, const char *name)
{
    for (size_t i = 0; i < fs->count; i++)
        if (strcmp(fs->flags[i].name + 2, name) == 0)
            return &fs->flags[i];
    return NULL;
}

const char *flags_peek(int argc, char **argv, const char *name)
{
    size_t len = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return NULL;
        if (strncmp(argv[i], "--", 2) != 0 || strncmp(argv[i] + 2, name, len) != 0)
            continue;
        if (argv[i][2 + len] == '=')
            return argv[i] + 3 + len;
        if (argv[i][2 + len] == '\0' && i + 1 < argc)
            return argv[i + 1];
    }
    return NULL;
}

void flags_print_help(const flagset_t *fs, FILE *out)
{
    fprintf(out, "%s\n\n", fs->usage);
    for (size_t i = 0; i < fs->count; i++) {
        const flag_t *f = &fs->flags[i];
        if (f->opts & FLAG_HIDDEN)
            continue;
        int n = fprintf(out, "  %s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
        for (const char *line = f->help; line;) {
            const char *nl = strchr(line, '\n');
            int len = nl ? (int)(nl - line) : (int)strlen(line);
            if (n >= HELP_COLUMN - 1) {
                fputc('\n', out);
                n = 0;
            }
            fprintf(out, "%*s%.*s", HELP_COLUMN - n, "", len, line);
            if (!nl && f->def)
                fprintf(out, " (default %s)", f->def);
            if (!nl && (f->opts & FLAG_RELOADS))
                fputs(RELOAD_NOTE, out);
            fputc('\n', out);
            n = 0;
            line = nl ? nl + 1 : NULL;
        }
    }
    if (fs->footer)
        fprintf(out, "\n%s", fs->footer);
}

void flags_print_config(const flagset_t *fs, const flag_args_t *args, FILE *out)
{
    fprintf(out,
            "# %s's configuration (%s --config FILE): one name = value a line, the flag's name without\n"
            "# --; # starts a comment. Every flag a file may give is listed below, commented out, with its\n"
            "# default. Flags marked \"reloads on SIGHUP\" take a changed value on a reload (systemctl\n"
            "# reload %s); any other change is logged and needs a restart. A flag given on the\n"
            "# command line replaces the file's value(s) for it.\n",
            fs->program, fs->program, fs->program);
    for (size_t i = 0; i < fs->count; i++) {
        const flag_t *f = &fs->flags[i];
        if (!f->set || (f->opts & FLAG_ARGS_ONLY))
            continue;
        fprintf(out, "\n# %s%s%s\n", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
        for (const char *line = f->help; line;) {
            const char *nl = strchr(line, '\n');
            int len = nl ? (int)(nl - line) : (int)strlen(line);
            fprintf(out, "#   %.*s\n", len, line);
            line = nl ? nl + 1 : NULL;
        }
        fprintf(out, "#   %s%s%s\n", f->def ? "default " : "", f->def ? f->def : "",
                f->opts & FLAG_RELOADS ? (f->def ? "; reloads on SIGHUP" : "reloads on SIGHUP")
                                       : (f->def ? "; needs a restart" : "needs a restart"));
        int given = 0;
        for (int k = 0; k < args->count; k++)
            if ((size_t)args->given[k].flag == i) {
                fprintf(out, "%s = %s\n", f->name + 2, args->given[k].value);
                given++;
            }
        if (!given)
            fprintf(out, "#%s = %s\n", f->name + 2, f->def ? f->def : f->arg ? f->arg : "false");
    }
}

/* What an error may show of a command-line argument: a flag's name without its value, and of
 * anything else at most what precedes a URI's userinfo (a password is never logged). */
static void arg_shown(const char *arg, char *out, size_t len)
{
    size_t n = strlen(arg);
    if (strncmp(arg, "--", 2) == 0)
        n = strcspn(arg, "=");
    const char *scheme = strstr(arg, "://");
    if (scheme && memchr(arg, '@', strlen(arg)) && (size_t)(scheme + 3 - arg) < n) {
        snprintf(out, len, "%.*s…", (int)(scheme + 3 - arg), arg);
        return;
    }
    snprintf(out, len, "%.*s", (int)(n > 200 ? 200 : n), arg);
}

/* True when the argument at argv[at] names the long flag name exactly (getopt_long would also take
 * an abbreviation of it, which a later flag could make ambiguous: refused). */
static bool names_exactly(const char *arg, const char *name)
{
    if (strncmp(arg, "--", 2) != 0)
        return false;
    size_t n = strcspn(arg + 2, "=");
    return strlen(name) == n && strncmp(arg + 2, name, n) == 0;
}

int flags_scan_args(const flagset_t *fs, int argc, char **argv, flag_args_t *args, flag_error_t *err)
{
    struct option *longopts = calloc(fs->count + 1, sizeof *longopts);
    if (!longopts) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < fs->count; i++)
        longopts[i] = (struct option){fs->flags[i].name + 2, fs->flags[i].arg ? required_argument : no_argument, NULL,
                                      (int)i + 1};
    *args = (flag_args_t){0};
    opterr = 0;
    optind = 1;
    int c, rc = 0;
    bool template = false;
    char shown[256];
    for (;;) {
        int at = optind; /* "+": no reordering, so argv[at] is the flag getopt_long reads next */
        if (rc != 0 || (c = getopt_long(argc, argv, "+:", longopts, NULL)) == -1)
            break;
        const char *given = at < argc ? argv[at] : argv[optind - 1];
        arg_shown(given, shown, sizeof shown);
        if (c == ':') {
            snprintf(err->msg, sizeof err->msg, "%s: needs a value", shown);
            rc = -1;
        } else if (c < 1 || c > (int)fs->count || !names_exactly(given, fs->flags[c - 1].name + 2)) {
            snprintf(err->msg, sizeof err->msg, "%s: unknown flag", shown);
            rc = -1;
        } else if (!fs->flags[c - 1].set && strcmp(fs->flags[c - 1].name, "--print-config-template") == 0) {
            template = true;
        } else if (!fs->flags[c - 1].set) {
            if (strcmp(fs->flags[c - 1].name, "--version") == 0)
                printf("%s %s\n", fs->program, fs->version);
            else
                flags_print_help(fs, stdout);
            fflush(stdout);
            rc = 1;
        } else if (strcmp(fs->flags[c - 1].name, "--config") == 0) {
            if (args->config) {
                snprintf(err->msg, sizeof err->msg, "--config: given twice");
                rc = -1;
            }
            args->config = optarg;
        } else if (args->count == FLAGS_ARGS_MAX) {
            snprintf(err->msg, sizeof err->msg, "%s: too many flags", shown);
            rc = -1;
        } else {
            args->given[args->count].flag = c - 1;
            args->given[args->count++].value = fs->flags[c - 1].arg ? optarg : "true";
        }
    }
    if (rc == 0 && optind < argc) {
        arg_shown(argv[optind], shown, sizeof shown);
        snprintf(err->msg, sizeof err->msg, "%s: unexpected argument", shown);
        rc = -1;
    }
    if (rc == 0 && template) {
        flags_print_config(fs, args, stdout);
        fflush(stdout);
        rc = 1;
    }
    free(longopts);
    return rc;
}

/* Whether the command line gives flag i, or another flag of its group. */
static bool args_give(const flagset_t *fs, const flag_args_t *args, size_t i)
{
    for (int k = 0; k < args->count; k++) {
        const flag_t *g = &fs->flags[args->given[k].flag];
        if ((size_t)args->given[k].flag == i || (fs->flags[i].group && g->group == fs->flags[i].group))
            return true;
    }
    return false;
}

static const char *apply(const flag_t *f, const char *value, void *opts)
{
    if (!f->arg && strcmp(value, "true") != 0)
        return strcmp(value, "false") == 0 ? NULL : "expected true or false";
    return f->set(f, value, (char *)opts + f->offset);
}

/* The file's entries: each name known, not twice unless repeatable, each value good (a value the
 * command line replaces is still checked, on a scratch copy). */
static int apply_file(const flagset_t *fs, const flag_args_t *args, const conf_t *conf, void *opts, flag_source_t *from,
                      flag_error_t *err)
{
    const char *path = args->config;
    void *scratch = malloc(fs->opts_size);
    int *first_line = calloc(fs->count, sizeof *first_line);
    if (!scratch || !first_line) {
        free(scratch);
        free(first_line);
        snprintf(err->msg, sizeof err->msg, "%s: out of memory", path);
        return -1;
    }
    memcpy(scratch, opts, fs->opts_size);
    int rc = 0;
    for (size_t k = 0; k < conf->count && rc == 0; k++) {
        const conf_entry_t *e = &conf->entries[k];
        const flag_t *f = flags_find(fs, e->name);
        size_t i = f ? (size_t)(f - fs->flags) : 0;
        const char *why = NULL;
        char whybuf[96];
        if (!f) {
            why = "unknown flag";
        } else if ((f->opts & FLAG_ARGS_ONLY) || !f->set) {
            why = "only on the command line";
        } else if (first_line[i] && !(f->opts & FLAG_REPEATS)) {
            snprintf(whybuf, sizeof whybuf, "given twice (first on line %d)", first_line[i]);
            why = whybuf;
        } else {
            bool replaced = args_give(fs, args, i);
            why = apply(f, e->value, replaced ? scratch : opts);
            if (!why && !replaced && from)
                from[i] = FLAG_FROM_FILE;
        }
        if (f && !first_line[i])
            first_line[i] = e->line;
        if (why) {
            snprintf(err->msg, sizeof err->msg, "%s:%d: %s%s: %s", path, e->line, f ? "--" : "", e->name, why);
            rc = -1;
        }
    }
    /* --data and --store are one setting: the file may give only one of them too */
    for (size_t i = 0; i < fs->count && rc == 0; i++)
        for (size_t j = i + 1; j < fs->count && rc == 0; j++)
            if (fs->flags[i].group && fs->flags[i].group == fs->flags[j].group && first_line[i] && first_line[j] &&
                !args_give(fs, args, i)) {
                snprintf(err->msg, sizeof err->msg, "%s:%d: %s: give either %s or %s, not both", path,
                         first_line[i] > first_line[j] ? first_line[i] : first_line[j],
                         first_line[i] > first_line[j] ? fs->flags[i].name : fs->flags[j].name, fs->flags[i].name,
                         fs->flags[j].name);
                rc = -1;
            }
    free(scratch);
    free(first_line);
    return rc;
}

int flags_build(const flagset_t *fs, const flag_args_t *args, void *opts, flag_source_t *from, conf_t *conf,
                flag_error_t *err)
{
    memset(opts, 0, fs->opts_size);
    *conf = (conf_t){0};
    if (from)
        memset(from, 0, fs->count * sizeof *from);
    for (size_t i = 0; i < fs->count; i++) {
        const flag_t *f = &fs->flags[i];
        const char *why = f->def && f->set ? f->set(f, f->def, (char *)opts + f->offset) : NULL;
        if (why) { /* a table's own mistake */
            snprintf(err->msg, sizeof err->msg, "%s: the default %s: %s", f->name, f->def, why);
            return -1;
        }
    }
    if (args->config) {
        int line;
        char why[256];
        if (conf_read_file(args->config, conf, &line, why, sizeof why) != 0) {
            if (line)
                snprintf(err->msg, sizeof err->msg, "%s:%d: %s", args->config, line, why);
            else
                snprintf(err->msg, sizeof err->msg, "--config %s: %s", args->config, why);
            return -1;
        }
        if (apply_file(fs, args, conf, opts, from, err) != 0) {
            conf_free(conf);
            return -1;
        }
    }
    for (int k = 0; k < args->count; k++) {
        const flag_t *f = &fs->flags[args->given[k].flag];
        const char *why = apply(f, args->given[k].value, opts);
        if (why) {
            snprintf(err->msg, sizeof err->msg, "%s: %s", f->name, why);
            conf_free(conf);
            return -1;
        }
        if (from)
            from[args->given[k].flag] = FLAG_FROM_ARGS;
    }
    return 0;
}

static bool append(char **buf, size_t *len, const char *text)
{
    size_t add = strlen(text) + (*len ? 1 : 0);
    char *grown = realloc(*buf, *len + add + 1);
    if (!grown)
        return false;
    if (*len)
        grown[(*len)++] = '\n';
    strcpy(grown + *len, text);
    *len += strlen(text);
    *buf = grown;
    return true;
}

char *flags_value_text(const flagset_t *fs, const flag_args_t *args, const conf_t *conf, size_t i)
{
    const flag_t *f = &fs->flags[i];
    char *buf = calloc(1, 1);
    size_t len = 0;
    bool ok = buf != NULL;
    if (ok && args_give(fs, args, i)) {
        for (int k = 0; k < args->count && ok; k++)
            if ((size_t)args->given[k].flag == i)
                ok = append(&buf, &len, args->given[k].value);
    } else if (ok) {
        for (size_t k = 0; conf && k < conf->count && ok; k++)
            if (strcmp(conf->entries[k].name, f->name + 2) == 0)
                ok = append(&buf, &len, conf->entries[k].value);
        if (ok && len == 0 && f->def)
            ok = append(&buf, &len, f->def);
    }
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}
