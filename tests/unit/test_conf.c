/* test_conf.c — the configuration file (core/conf.h), the flag plumbing that reads it beside the
 * command line (flags.h), the log lines in both formats (core/log.h), and a rate limit's rule
 * changed live (core/ratelimit.h). */
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/conf.h"
#include "core/log.h"
#include "core/ratelimit.h"
#include "flags.h"
#include "unit.h"

static int parse(const char *text, conf_t *c, int *line, char *why)
{
    return conf_parse(text, strlen(text), c, line, why, 128);
}

static void test_conf_lines(void)
{
    conf_t c;
    int line;
    char why[128];
    CHECK(parse("# comment\n\n  listen = 127.0.0.1:0  \nrate-limit=20/s:40\r\n"
                "cors-origin = https://a.example # trailing comment\n"
                "store = postgresql://u@h/db?x=1#frag\nname = \"  spaced # kept  \"\n",
                &c, &line, why) == 0);
    CHECK(c.count == 5);
    CHECK(strcmp(c.entries[0].name, "listen") == 0 && strcmp(c.entries[0].value, "127.0.0.1:0") == 0);
    CHECK(c.entries[0].line == 3);
    CHECK(strcmp(c.entries[1].name, "rate-limit") == 0 && strcmp(c.entries[1].value, "20/s:40") == 0);
    CHECK(strcmp(c.entries[2].value, "https://a.example") == 0);
    CHECK(strcmp(c.entries[3].value, "postgresql://u@h/db?x=1#frag") == 0); /* # inside a word stays */
    CHECK(strcmp(c.entries[4].value, "  spaced # kept  ") == 0 && c.entries[4].line == 7);
    conf_free(&c);

    CHECK(parse("", &c, &line, why) == 0 && c.count == 0);
    conf_free(&c);
    CHECK(parse("a = 1\nno equals here\n", &c, &line, why) == -1 && line == 2 && c.count == 0);
    CHECK(parse("--listen = x\n", &c, &line, why) == -1 && line == 1 && strstr(why, "--"));
    CHECK(parse("a =\n", &c, &line, why) == -1 && line == 1 && strstr(why, "no value"));
    CHECK(parse("a = # only a comment\n", &c, &line, why) == -1);
    CHECK(parse("a = \"open\n", &c, &line, why) == -1 && strstr(why, "quote"));
    CHECK(parse("a = \"x\" y\n", &c, &line, why) == -1);
    CHECK(parse("= 1\n", &c, &line, why) == -1);
    CHECK(parse("Upper = 1\n", &c, &line, why) == -1);
    CHECK(conf_parse("a = 1\nb\0 = 2\n", 12, &c, &line, why, sizeof why) == -1 && line == 2);

    /* a missing file and a directory: line 0, the system's reason */
    CHECK(conf_read_file("/nonexistent/tally.conf", &c, &line, why, sizeof why) == -1 && line == 0 &&
          strstr(why, "No such file"));
    CHECK(conf_read_file("/", &c, &line, why, sizeof why) == -1 && line == 0);
}

typedef struct {
    const char *name;
    uint64_t n;
    const char *list[4];
    int nlist;
    const char *data, *store;
} test_opts_t;

static const char *set_list(const flag_t *f, const char *value, void *dest)
{
    (void)f;
    test_opts_t *o = (test_opts_t *)((char *)dest - offsetof(test_opts_t, list));
    if (o->nlist == 4)
        return "given too many times";
    o->list[o->nlist++] = value;
    return NULL;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const flag_t test_flags[] = {
    {"--name", "NAME", "none", "a name", flag_set_string, offsetof(test_opts_t, name), .opts = FLAG_RELOADS},
    {"--n", "N", "5", "a number", flag_set_uint, offsetof(test_opts_t, n), 1, 10},
    {"--list", "X", NULL, "repeatable", set_list, offsetof(test_opts_t, list), .opts = FLAG_REPEATS},
    {"--data", "DIR", NULL, "data", flag_set_string, offsetof(test_opts_t, data), .group = 1},
    {"--store", "URI", NULL, "store", flag_set_string, offsetof(test_opts_t, store), .group = 1},
    {"--config", "FILE", NULL, "file", flag_set_string, 0, .opts = FLAG_ARGS_ONLY},
    {"--help", NULL, NULL, "help", NULL, 0, .opts = FLAG_ARGS_ONLY},
    {"--print-config-template", NULL, NULL, "template", NULL, 0, .opts = FLAG_ARGS_ONLY | FLAG_HIDDEN},
};
#pragma GCC diagnostic pop

static const flagset_t test_set = {.program = "t",
                                   .version = "1",
                                   .flags = test_flags,
                                   .count = sizeof test_flags / sizeof test_flags[0],
                                   .opts_size = sizeof(test_opts_t),
                                   .usage = "usage: t"};

/* Runs the flags of argv (NULL-terminated) with a file holding text (NULL: no file). */
static int run_flags(const char *text, char **argv, test_opts_t *o, flag_source_t *from, flag_error_t *err,
                     char **path_out)
{
    static char path[64];
    int argc = 0;
    while (argv[argc])
        argc++;
    flag_args_t args;
    if (flags_scan_args(&test_set, argc, argv, &args, err) != 0)
        return -1;
    if (text) {
        snprintf(path, sizeof path, "/tmp/tally-unit-conf-%d", (int)getpid());
        FILE *f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
        args.config = path;
    }
    conf_t conf;
    int rc = flags_build(&test_set, &args, o, from, &conf, err);
    if (rc == 0 && path_out) {
        /* keep the values alive for the caller: copy the ones the tests read */
        static char name[64], l0[64];
        snprintf(name, sizeof name, "%s", o->name ? o->name : "");
        o->name = name;
        snprintf(l0, sizeof l0, "%s", o->nlist ? o->list[0] : "");
        o->list[0] = l0;
        *path_out = path;
    }
    for (size_t i = 0; rc == 0 && i < test_set.count; i++) {
        char *t = flags_value_text(&test_set, &args, &conf, i);
        CHECK(t != NULL);
        if (i == 2 && o->nlist == 2)
            CHECK(strchr(t, '\n') != NULL); /* repeated values joined */
        free(t);
    }
    conf_free(&conf);
    if (text)
        unlink(path);
    return rc;
}

static void test_flags_file_and_args(void)
{
    test_opts_t o;
    flag_source_t from[sizeof test_flags / sizeof test_flags[0]];
    flag_error_t err;
    char *path;
    char *a0[] = {"t", NULL};
    CHECK(run_flags(NULL, a0, &o, from, &err, &path) == 0 && strcmp(o.name, "none") == 0 && o.n == 5);
    CHECK(from[0] == FLAG_NOT_GIVEN);

    /* the file's values; the command line replaces them, flag by flag */
    char *a1[] = {"t", "--n", "7", NULL};
    CHECK(run_flags("name = x\nn = 3\nlist = a\nlist = b\n", a1, &o, from, &err, &path) == 0);
    CHECK(strcmp(o.name, "x") == 0 && o.n == 7 && o.nlist == 2);
    CHECK(from[0] == FLAG_FROM_FILE && from[1] == FLAG_FROM_ARGS && from[2] == FLAG_FROM_FILE);
    char *a2[] = {"t", "--list", "c", NULL};
    CHECK(run_flags("list = a\nlist = b\n", a2, &o, from, &err, &path) == 0);
    CHECK(o.nlist == 1 && strcmp(o.list[0], "c") == 0);

    /* data and store are one setting: --store on the command line replaces the file's data */
    char *a3[] = {"t", "--store", "s", NULL};
    CHECK(run_flags("data = d\n", a3, &o, from, &err, &path) == 0 && !o.data && o.store);
    CHECK(run_flags("data = d\nstore = s\n", a0, &o, from, &err, &path) == -1 && strstr(err.msg, ":2: --store"));

    /* mistakes: file, line and flag */
    CHECK(run_flags("name = x\nbogus = 1\n", a0, &o, from, &err, &path) == -1 && strstr(err.msg, ":2: bogus"));
    CHECK(run_flags("n = 11\n", a0, &o, from, &err, &path) == -1 && strstr(err.msg, ":1: --n"));
    CHECK(run_flags("n = 2\nn = 3\n", a0, &o, from, &err, &path) == -1 && strstr(err.msg, ":2: --n: given twice"));
    CHECK(run_flags("config = other\n", a0, &o, from, &err, &path) == -1 && strstr(err.msg, "--config"));
    CHECK(run_flags("help = true\n", a0, &o, from, &err, &path) == -1);
    CHECK(run_flags("n = zero\n", a1, &o, from, &err, &path) == -1); /* checked though replaced */
    char *a4[] = {"t", "--n", "0", NULL};
    CHECK(run_flags(NULL, a4, &o, from, &err, &path) == -1 && strstr(err.msg, "--n"));
    char *a5[] = {"t", "--nope", NULL};
    CHECK(run_flags(NULL, a5, &o, from, &err, &path) == -1 && strstr(err.msg, "unknown flag"));
    char *a6[] = {"t", "stray", NULL};
    CHECK(run_flags(NULL, a6, &o, from, &err, &path) == -1 && strstr(err.msg, "unexpected"));

    char *peek[] = {"t", "--x", "--log-format", "json", NULL};
    CHECK(strcmp(flags_peek(4, peek, "log-format"), "json") == 0);
    char *peek2[] = {"t", "--log-format=logfmt", NULL};
    CHECK(strcmp(flags_peek(2, peek2, "log-format"), "logfmt") == 0);
    CHECK(flags_peek(2, peek2, "listen") == NULL);
}

static void test_help_marks_reloads(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    flags_print_help(&test_set, out);
    fclose(out);
    CHECK(strstr(buf, "a name (default none) (reloads on SIGHUP)\n") != NULL);
    CHECK(strstr(buf, "a number (default 5)\n") != NULL);
    free(buf);
}

static void test_config_template(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    flags_print_help(&test_set, out);
    fclose(out);
    CHECK(strstr(buf, "--help") != NULL && strstr(buf, "print-config-template") == NULL); /* hidden */
    free(buf);

    /* every flag a file may give, commented out with its default and reload mark; the flags given
     * with it set (each value of a repeatable one) */
    char *argv[] = {"t", "--list", "a", "--list", "b", "--data", "/var/lib/t", NULL};
    flag_args_t args;
    flag_error_t err;
    CHECK(flags_scan_args(&test_set, 7, argv, &args, &err) == 0);
    buf = NULL;
    out = open_memstream(&buf, &len);
    flags_print_config(&test_set, &args, out);
    fclose(out);
    CHECK(strstr(buf, "\n# --name NAME\n#   a name\n#   default none; reloads on SIGHUP\n#name = none\n") != NULL);
    CHECK(strstr(buf, "\n# --n N\n#   a number\n#   default 5; needs a restart\n#n = 5\n") != NULL);
    CHECK(strstr(buf, "#   needs a restart\nlist = a\nlist = b\n") != NULL);
    CHECK(strstr(buf, "\ndata = /var/lib/t\n") != NULL && strstr(buf, "\n#store = URI\n") != NULL);
    CHECK(strstr(buf, "config") != NULL); /* the header names --config FILE */
    CHECK(strstr(buf, "# --config") == NULL && strstr(buf, "# --help") == NULL && strstr(buf, "template") == NULL);
    free(buf);

    /* a bad flag beside it is still refused (exit 2, nothing printed) */
    char *bad[] = {"t", "--print-config-template", "--nope", NULL};
    CHECK(flags_scan_args(&test_set, 3, bad, &args, &err) == -1 && strstr(err.msg, "--nope"));
}

static json_t *render_json(const char *text)
{
    char out[1024];
    size_t n = log_render(LOG_FORMAT_JSON, text, "log", 1764900000123ull, out, sizeof out);
    CHECK(n > 0 && out[n - 1] == '\n' && strchr(out, '\n') == out + n - 1);
    return json_loads(out, 0, NULL);
}

static void test_log_formats(void)
{
    char out[256];
    CHECK(log_render(LOG_FORMAT_LOGFMT, "level=info event=x n=1", "log", 0, out, sizeof out) == 23);
    CHECK(strcmp(out, "level=info event=x n=1\n") == 0);
    log_render(LOG_FORMAT_LOGFMT, "a=\"two\nlines\"", "log", 0, out, sizeof out);
    CHECK(strcmp(out, "a=\"two lines\"\n") == 0);
    CHECK(log_render(LOG_FORMAT_LOGFMT, "level=info event=long", "log", 0, out, 8) == 7 && strlen(out) == 7);

    json_t *j = render_json("level=warn event=webhook-expired webhook=w1 delivered=12 error=\"a \"quoted\" word\" "
                            "(free text)");
    CHECK(j != NULL);
    CHECK(strcmp(json_string_value(json_object_get(j, "level")), "warn") == 0);
    CHECK(strcmp(json_string_value(json_object_get(j, "event")), "webhook-expired") == 0);
    CHECK(json_integer_value(json_object_get(j, "delivered")) == 12);
    CHECK(strcmp(json_string_value(json_object_get(j, "error")), "a \"quoted\" word") == 0);
    CHECK(strcmp(json_string_value(json_object_get(j, "msg")), "(free text)") == 0);
    CHECK(strcmp(json_string_value(json_object_get(j, "ts")), "2025-12-05T02:00:00.123Z") == 0);
    json_decref(j);

    /* an access line: its own ts; level and event filled in; msg always there */
    char line[1024];
    log_render(LOG_FORMAT_JSON, "ts=2026-01-01T00:00:00.000Z method=GET status=200 target=\"/v1/x?a=\\\"b\\\"\"",
               "access", 0, line, sizeof line);
    j = json_loads(line, 0, NULL);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "event")), "access") == 0);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "ts")), "2026-01-01T00:00:00.000Z") == 0);
    CHECK(j && json_integer_value(json_object_get(j, "status")) == 200);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "target")), "/v1/x?a=\"b\"") == 0);
    CHECK(j && json_is_string(json_object_get(j, "msg")));
    json_decref(j);

    /* bytes that are not UTF-8, control bytes, an empty line, a line too long: still JSON */
    j = render_json("level=info event=x v=\"\xff\xfe\x01\xc3\xa9\"");
    CHECK(j && strcmp(json_string_value(json_object_get(j, "event")), "x") == 0);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "v")), "??\x01\xc3\xa9") == 0);
    json_decref(j);
    j = render_json("");
    CHECK(j != NULL);
    json_decref(j);
    char big[600];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char small[128];
    log_render(LOG_FORMAT_JSON, big, "log", 0, small, sizeof small);
    j = json_loads(small, 0, NULL);
    CHECK(j != NULL);
    json_decref(j);
    /* a number with a leading zero or too long for a double stays a string */
    j = render_json("a=007 b=12345678901234567890");
    CHECK(j && json_is_string(json_object_get(j, "a")) && json_is_string(json_object_get(j, "b")));
    json_decref(j);

    log_format_t f;
    CHECK(log_format_parse("json", &f) == 0 && f == LOG_FORMAT_JSON);
    CHECK(log_format_parse("logfmt", &f) == 0 && f == LOG_FORMAT_LOGFMT);
    CHECK(log_format_parse("text", &f) == -1);
}

static void test_rate_rule_live(void)
{
    ratelimit_t *rl;
    CHECK(ratelimit_new((ratelimit_rule_t){1, 1}, 1024, &rl) == 0 && rl);
    span_t k = SPAN_LIT("user");
    CHECK(ratelimit_take(rl, k, 1000) == 0);
    CHECK(ratelimit_take(rl, k, 1000) > 0);
    ratelimit_set_rule(rl, (ratelimit_rule_t){0, 0}); /* off */
    for (int i = 0; i < 10; i++)
        CHECK(ratelimit_take(rl, k, 1000) == 0);
    ratelimit_set_rule(rl, (ratelimit_rule_t){100, 3});
    CHECK(ratelimit_rule(rl).burst == 3);
    int allowed = 0;
    for (int i = 0; i < 10; i++)
        allowed += ratelimit_take(rl, k, 2000) == 0;
    CHECK(allowed == 3);
    ratelimit_free(rl);
}

void test_conf(void)
{
    test_conf_lines();
    test_flags_file_and_args();
    test_help_marks_reloads();
    test_config_template();
    test_log_formats();
    test_rate_rule_live();
}
