/* flags.h — a program's flags as one table: the command line, --config FILE, --help and reload all
 * read the same rows, so they cannot disagree. The table's setters parse a value into a field of
 * the program's options struct. */
#ifndef TALLY_FLAGS_H
#define TALLY_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/conf.h"

typedef struct flag flag_t;

/* Parses value into dest (the flag's field of the options struct) within the flag's bounds.
 * Returns NULL, or why the value is refused (a static or flag-owned string). */
typedef const char *(*flag_set_fn)(const flag_t *f, const char *value, void *dest);

enum {
    FLAG_RELOADS = 1 << 0,   /* applied again on SIGHUP */
    FLAG_REPEATS = 1 << 1,   /* may be given more than once (each value is kept) */
    FLAG_ARGS_ONLY = 1 << 2, /* --config, --help, --version: never in a file */
    FLAG_HIDDEN = 1 << 3,    /* not in --help (a flag for the build alone) */
};

typedef enum { FLAG_NOT_GIVEN, FLAG_FROM_FILE, FLAG_FROM_ARGS } flag_source_t;

struct flag {
    const char *name;  /* "--listen" */
    const char *arg;   /* what --help shows for the value ("HOST:PORT"); NULL: the flag takes none */
    const char *def;   /* the default, parsed by set like a given value; NULL: none (or said in help) */
    const char *help;  /* lines separated by \n; --help appends the default */
    flag_set_fn set;   /* NULL: --help, --version (handled here) */
    size_t offset;     /* of the value in the options struct */
    uint64_t min, max; /* bounds of numbers, sizes and durations */
    const char *why;   /* the message for a refused value (the setters' own when NULL) */
    unsigned opts;     /* FLAG_* */
    int group;         /* flags of one nonzero group are one setting (--data and --store) */
};

typedef struct {
    const char *program; /* "tallyd" */
    const char *version;
    const flag_t *flags;
    size_t count;
    size_t opts_size;
    const char *usage;  /* first line of --help */
    const char *footer; /* after the flags in --help (may be NULL) */
} flagset_t;

/* What the command line gave, kept for reloads: the command line always wins over the file. */
#define FLAGS_ARGS_MAX 512 /* 256 --store (shards) and the rest */
typedef struct {
    struct {
        int flag; /* index in the table */
        const char *value;
    } given[FLAGS_ARGS_MAX];
    int count;
    const char *config; /* --config FILE, or NULL */
} flag_args_t;

/* Why flags were refused: msg names the file and line (when from a file) and the flag. */
typedef struct {
    char msg[1024];
} flag_error_t;

/* Generic setters. */
const char *flag_set_string(const flag_t *f, const char *value, void *dest);
const char *flag_set_uint(const flag_t *f, const char *value, void *dest);
const char *flag_set_duration(const flag_t *f, const char *value, void *dest);
const char *flag_set_size(const flag_t *f, const char *value, void *dest);

/* Reads the command line into *args (nothing is applied yet). Returns 0; 1 after printing --help,
 * --version or --print-config-template on stdout (exit 0); -1 with err filled (exit 2). */
int flags_scan_args(const flagset_t *fs, int argc, char **argv, flag_args_t *args, flag_error_t *err);

/* The options from the defaults, then the file of args->config (the names the command line does
 * not give), then the command line. from[] (fs->count entries, may be NULL) says where each value
 * came from. The file's text is kept in *conf (values point into it): conf_free it when the options
 * are no longer used. Returns 0, or -1 with err filled (opts then unspecified). */
int flags_build(const flagset_t *fs, const flag_args_t *args, void *opts, flag_source_t *from, conf_t *conf,
                flag_error_t *err);

/* The text of flag i's value(s) that flags_build used (the command line's, else the file's, else
 * the default; repeated values joined by newlines), malloc'd; NULL when out of memory. Reloads
 * compare these to see what changed. */
char *flags_value_text(const flagset_t *fs, const flag_args_t *args, const conf_t *conf, size_t i);

/* The table's flag called name (without the dashes), or NULL. */
const flag_t *flags_find(const flagset_t *fs, const char *name);

/* --help: every flag with its help text, its default, and whether it reloads. */
void flags_print_help(const flagset_t *fs, FILE *out);

/* --print-config-template: a configuration file listing every flag a file may give, commented
 * out, with its help text, its default and whether it reloads; the flags args gives become
 * uncommented lines with their values (so a package's file can set --data). */
void flags_print_config(const flagset_t *fs, const flag_args_t *args, FILE *out);

/* A flag's value given with --log-format before anything else is parsed (so the errors of the
 * flags themselves use it): the value after name in argv, or NULL. */
const char *flags_peek(int argc, char **argv, const char *name);

#endif
