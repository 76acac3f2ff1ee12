/* tally.c — the operator's tool: backup, verify, token, stats, import, export, erase-user, move. Each subcommand has
 * --help. */
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/itemmap.h"
#include "core/jsontext.h"
#include "core/jwt.h"
#include "core/kindsjson.h"
#include "core/parse.h"
#include "engine/export.h"
#include "engine/features.h"
#include "engine/import.h"
#include "engine/move.h"
#include "engine/recount.h"
#include "engine/shards.h"
#include "engine/writer.h"
#include "store/lmdb/lmdb.h"
#include "store/store.h"
#include "tallyd.h"
#include "version.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define TOKEN_TTL_DEFAULT_MS (3600ull * 1000)
#define OFFLINE_BATCH_MAX 16384
#define OFFLINE_QUEUE_MAX 65536

typedef struct {
    const char *name;
    const char *usage;
    int (*run)(int argc, char **argv);
} command_t;

static const command_t *current;

static int usage_error(const char *why)
{
    fprintf(stderr, "tally %s: %s\nusage: %s", current->name, why, current->usage);
    return EXIT_USAGE;
}

/* Parses the flags common to the subcommands. Returns -1 after --help (printed), -2 on an error
 * (printed), else the index of the first operand. */
typedef struct {
    const char *data, *user, *ttl, *secret_file, *reactions, *format, *on_error, *store, *mode, *config;
    bool admin;
} flags_t;

/* The names --config FILE may give tally: its own flags. Names of tallyd's other flags are skipped,
 * so tallyd's file serves both programs (tally verify --config /etc/tally/tallyd.conf). */
static const struct {
    const char *name;
    size_t offset; /* of the value in flags_t */
    int group;     /* data and store are one setting */
} file_flags[] = {
    {"data", offsetof(flags_t, data), 1},
    {"store", offsetof(flags_t, store), 1},
    {"user", offsetof(flags_t, user), 0},
    {"ttl", offsetof(flags_t, ttl), 0},
    {"jwt-secret-file", offsetof(flags_t, secret_file), 0},
    {"reactions", offsetof(flags_t, reactions), 0},
    {"reaction-mode", offsetof(flags_t, mode), 0},
    {"format", offsetof(flags_t, format), 0},
    {"on-error", offsetof(flags_t, on_error), 0},
    {"admin", offsetof(flags_t, admin), 0},
};
#define NFILE_FLAGS (sizeof file_flags / sizeof file_flags[0])

static conf_t config_text; /* values point into it until exit */

static void config_free(void)
{
    conf_free(&config_text);
}

/* The file's values for the flags the command line did not give (given: by file_flags index).
 * Returns 0, or exit status 2 having said why, naming the file, the line and the flag. */
static int apply_config(flags_t *f, const bool given[NFILE_FLAGS])
{
    int line = 0;
    char why[256];
    if (conf_read_file(f->config, &config_text, &line, why, sizeof why) != 0) {
        if (line)
            fprintf(stderr, "tally %s: %s:%d: %s\n", current->name, f->config, line, why);
        else
            fprintf(stderr, "tally %s: --config %s: %s\n", current->name, f->config, why);
        return EXIT_USAGE;
    }
    atexit(config_free);
    int seen[NFILE_FLAGS] = {0};
    for (size_t k = 0; k < config_text.count; k++) {
        const conf_entry_t *e = &config_text.entries[k];
        size_t i = 0;
        while (i < NFILE_FLAGS && strcmp(file_flags[i].name, e->name) != 0)
            i++;
        const char *bad = NULL;
        char buf[96];
        if (i == NFILE_FLAGS) {
            if (!flags_find(&tallyd_flagset, e->name) || strcmp(e->name, "config") == 0)
                bad = "unknown flag";
            else
                continue; /* a setting of tallyd's alone */
        } else if (seen[i]) {
            snprintf(buf, sizeof buf, "given twice (first on line %d)", seen[i]);
            bad = buf;
        } else if (strcmp(e->name, "reaction-mode") == 0 && strcmp(e->value, "one") != 0 &&
                   strcmp(e->value, "many") != 0) {
            bad = "expected one or many";
        } else if (strcmp(e->name, "admin") == 0 && strcmp(e->value, "true") != 0 && strcmp(e->value, "false") != 0) {
            bad = "expected true or false";
        }
        if (bad) {
            fprintf(stderr, "tally %s: %s:%d: %s%s: %s\n", current->name, f->config, e->line,
                    i == NFILE_FLAGS ? "" : "--", e->name, bad);
            return EXIT_USAGE;
        }
        seen[i] = e->line;
        bool replaced = given[i];
        for (size_t j = 0; j < NFILE_FLAGS && !replaced; j++)
            replaced = file_flags[i].group && file_flags[j].group == file_flags[i].group && given[j];
        if (replaced)
            continue;
        if (strcmp(e->name, "admin") == 0)
            f->admin = strcmp(e->value, "true") == 0;
        else
            *(const char **)((char *)f + file_flags[i].offset) = e->value;
    }
    if (f->data && f->store && !given[0] && !given[1]) {
        fprintf(stderr, "tally %s: %s: give either data or store, not both\n", current->name, f->config);
        return EXIT_USAGE;
    }
    return 0;
}

static int parse_common(int argc, char **argv, flags_t *f)
{
    static const struct option opts[] = {
        {"data", required_argument, NULL, 'd'},
        {"user", required_argument, NULL, 'u'},
        {"ttl", required_argument, NULL, 't'},
        {"jwt-secret-file", required_argument, NULL, 's'},
        {"admin", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {"reactions", required_argument, NULL, 'r'},
        {"format", required_argument, NULL, 'f'},
        {"on-error", required_argument, NULL, 'e'},
        {"store", required_argument, NULL, 'S'},
        {"reaction-mode", required_argument, NULL, 'm'},
        {"config", required_argument, NULL, 'c'},
        {NULL, 0, NULL, 0},
    };
    static const char letters[] = "dSutsrmfea"; /* file_flags' order */
    bool given[NFILE_FLAGS] = {0};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        const char *letter = c > 0 ? strchr(letters, c) : NULL;
        if (letter)
            given[letter - letters] = true;
        switch (c) {
        case 'c':
            f->config = optarg;
            break;
        case 'd':
            f->data = optarg;
            break;
        case 'u':
            f->user = optarg;
            break;
        case 't':
            f->ttl = optarg;
            break;
        case 's':
            f->secret_file = optarg;
            break;
        case 'a':
            f->admin = true;
            break;
        case 'r':
            f->reactions = optarg;
            break;
        case 'f':
            f->format = optarg;
            break;
        case 'e':
            f->on_error = optarg;
            break;
        case 'S':
            f->store = optarg;
            break;
        case 'm':
            if (strcmp(optarg, "one") != 0 && strcmp(optarg, "many") != 0) {
                usage_error("--reaction-mode is one or many");
                return -2;
            }
            f->mode = optarg;
            break;
        case 'h':
            fputs(current->usage, stdout);
            return -1;
        case ':':
            usage_error("a flag needs a value");
            return -2;
        default:
            fprintf(stderr, "tally %s: unknown flag %s\n", current->name, argv[optind - 1]);
            return -2;
        }
    }
    if (f->config && apply_config(f, given) != 0)
        return -2;
    if (f->mode && strcmp(f->mode, "one") != 0 && strcmp(f->mode, "many") != 0) {
        usage_error("--reaction-mode is one or many");
        return -2;
    }
    return optind;
}

static store_t *open_existing(const char *dir);
static features_t *tool_features; /* open_exclusive's, closed before its writer stops */

/* Opens dir for writing by this process alone (no tallyd may run on it), with a writer thread.
 * reactions NULL: the stored kinds. mode NULL: the stored mode (one for a new store), so that
 * giving --reactions never changes the mode a store was used in. */
static store_t *open_exclusive(const char *dir, const char *reactions, const char *mode, writer_t **writer)
{
    char err[512];
    kinds_t kinds;
    if (reactions && kinds_parse(&kinds, reactions, err, sizeof err) != 0) {
        fprintf(stderr, "tally %s: --reactions: %s\n", current->name, err);
        return NULL;
    }
    if (lmdb_lock_dir(dir, err, sizeof err) < 0) {
        fprintf(stderr, "tally %s: %s (stop tallyd first, or use the HTTP endpoint)\n", current->name, err);
        return NULL;
    }
    store_t *store = NULL;
    store_options_t opt = {.map_size_bytes = STORE_MAP_SIZE_DEFAULT};
    if (reactions && mode) {
        kinds.mode = strcmp(mode, "many") == 0 ? REACTION_MODE_MANY : REACTION_MODE_ONE;
    } else if (reactions && store_open(dir, NULL, &opt, &store, err, sizeof err) == STORE_OK) {
        kinds.mode = store_kinds(store)->mode; /* an existing store keeps its mode */
        store_close(store);
        store = NULL;
    }
    if (!reactions && mode) {
        fprintf(stderr, "tally %s: --reaction-mode needs --reactions (it is for a new store)\n", current->name);
        return NULL;
    }
    if (store_open(dir, reactions ? &kinds : NULL, &opt, &store, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "tally %s: %s%s\n", current->name, err, reactions ? "" : " (give --reactions for a new store)");
        return NULL;
    }
    writer_options_t wopt = {
        /* no one else writes: larger commits than a server's */
        .queue_max = OFFLINE_QUEUE_MAX,        .batch_max = OFFLINE_BATCH_MAX,
        .fold_max = WRITER_FOLD_MAX_DEFAULT,   .idem_ttl_ms = 24ull * 3600 * 1000,
        .sweep_max = WRITER_SWEEP_MAX_DEFAULT, .log_retention_ms = 24ull * 3600 * 1000,
    };
    if (writer_start(store, store_kinds(store), &wopt, writer) != 0) {
        fprintf(stderr, "tally %s: cannot start the writer\n", current->name);
        store_close(store);
        return NULL;
    }
    /* this process is the store's only node: the feature version in force becomes what it supports */
    if (features_open(store, *writer, false, &tool_features, err, sizeof err) != 0) {
        fprintf(stderr, "tally %s: %s\n", current->name, err);
        writer_stop(*writer);
        store_close(store);
        return NULL;
    }
    return store;
}

/* A file source of import lines; a line past IMPORT_LINE_MAX is skipped whole, never held. */
typedef struct {
    FILE *f;
    char *buf;
} file_source_t;

static int file_next(void *arg, span_t *line)
{
    file_source_t *src = arg;
    size_t n = 0;
    bool too_long = false;
    int c;
    while ((c = getc_unlocked(src->f)) != EOF && c != '\n') {
        if (n < IMPORT_LINE_MAX)
            src->buf[n++] = (char)c;
        else
            too_long = true;
    }
    if (c == EOF && n == 0 && !too_long)
        return 0;
    *line = (span_t){src->buf, too_long ? 0 : n};
    return too_long ? 2 : 1;
}

static int file_rewind(void *arg)
{
    return fseek(((file_source_t *)arg)->f, 0, SEEK_SET);
}

static int cmd_import(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.data || first != argc - 1)
        return usage_error("needs --data DIR and FILE");
    const char *path = argv[first];
    size_t plen = strlen(path);
    bool csv = f.format ? strcmp(f.format, "csv") == 0 : plen > 4 && strcmp(path + plen - 4, ".csv") == 0;
    if (f.format && !csv && strcmp(f.format, "ndjson") != 0)
        return usage_error("--format is ndjson or csv");
    if (f.on_error && strcmp(f.on_error, "abort") != 0 && strcmp(f.on_error, "skip") != 0)
        return usage_error("--on-error is skip or abort");
    file_source_t src = {fopen(path, "rb"), malloc(IMPORT_LINE_MAX)};
    if (!src.f || !src.buf) {
        fprintf(stderr, "tally import: cannot read %s\n", path);
        free(src.buf);
        return EXIT_FAILED;
    }
    writer_t *writer;
    store_t *store = open_exclusive(f.data, f.reactions, f.mode, &writer);
    if (!store) {
        fclose(src.f);
        free(src.buf);
        return EXIT_FAILED;
    }
    import_options_t opt = {csv ? IMPORT_CSV : IMPORT_NDJSON, f.on_error && strcmp(f.on_error, "abort") == 0,
                            OFFLINE_QUEUE_MAX / 2};
    import_source_t source = {file_next, file_rewind, &src};
    import_report_t rep;
    import_route_t route = {&writer, 1, NULL, NULL};
    int rc = import_run(&route, store_kinds(store), &source, &opt, &rep);
    features_close(tool_features);
    tool_features = NULL;
    writer_stop(writer);
    store_close(store);
    fclose(src.f);
    free(src.buf);
    for (size_t i = 0; i < rep.nrejected; i++)
        fprintf(stderr, "line %llu: %s\n", (unsigned long long)rep.rejected[i].line, rep.rejected[i].error);
    printf("{\"read\":%llu,\"applied\":%llu,\"unchanged\":%llu,\"rejected\":%llu%s}\n", (unsigned long long)rep.read,
           (unsigned long long)rep.applied, (unsigned long long)rep.unchanged, (unsigned long long)rep.rejected_count,
           rep.aborted ? ",\"aborted\":true" : "");
    bool bad = rc != 0 || rep.aborted;
    if (rc != 0 && !rep.aborted)
        fprintf(stderr, "tally import: stopped part-way; what was applied stays, run it again\n");
    import_report_free(&rep);
    return bad ? EXIT_FAILED : 0;
}

static int export_row(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    const kinds_t *kinds = arg;
    if (row->set == KINDSET_EMPTY)
        return 0;
    /* the import's own line: a reaction in one mode, reactions in many */
    json_t *line = json_pack("{s:s%,s:s%,s:o?}", "item", item.ptr, item.len, "user", user.ptr, user.len,
                             kindset_member(kinds), kindset_json(kinds, row->set));
    char *text = line ? json_dumps(line, JSON_COMPACT | JSON_REALS) : NULL;
    json_decref(line);
    if (!text)
        return 1;
    puts(text);
    free(text);
    return ferror(stdout) ? 1 : 0;
}

/* One user's export: the items of the user's list, and of the log not yet folded into it. */
#define EXPORT_LIST_PAGE 1000
typedef struct {
    itemmap_t items;
    span_t user;
    uint64_t seq; /* the last entry of the page, to go on below it */
    char name[ID_MAX_LEN];
    size_t name_len, n;
    int rc;
} user_export_t;

static int export_list_entry(void *arg, span_t item, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    (void)at_ms, (void)set;
    user_export_t *x = arg;
    if (!itemmap_get(&x->items, item)) {
        x->rc = STORE_ERROR;
        return 1;
    }
    x->seq = seq;
    memcpy(x->name, item.ptr, item.len);
    x->name_len = item.len;
    x->n++;
    return 0;
}

static int export_log_entry(void *arg, uint64_t seq, const transition_t *t)
{
    (void)seq;
    user_export_t *x = arg;
    if (span_eq(t->user, x->user) && !itemmap_get(&x->items, t->item)) {
        x->rc = STORE_ERROR;
        return 1;
    }
    return 0;
}

/* Every row of user that is not none, from one snapshot: its cost is the user's reactions. */
static int export_user(store_t *store, store_read_t *snap, span_t user)
{
    user_export_t x = {.user = user, .rc = STORE_OK};
    uint64_t checkpoint;
    int rc = store_read_checkpoint(snap, &checkpoint);
    if (rc == STORE_OK)
        rc = store_read_log(snap, checkpoint, SIZE_MAX, export_log_entry, &x);
    store_list_query_t q = {.by_user = true, .key = user, .kind = KIND_NONE, .limit = EXPORT_LIST_PAGE};
    do {
        x.n = 0;
        if (rc == STORE_OK && x.rc == STORE_OK)
            rc = store_read_list(snap, &q, export_list_entry, &x);
        q.has_cursor = true;
        q.seq = x.seq;
        q.name = (span_t){x.name, x.name_len};
    } while (rc == STORE_OK && x.rc == STORE_OK && x.n == EXPORT_LIST_PAGE);
    if (rc == STORE_OK)
        rc = x.rc;
    for (size_t i = 0; rc == STORE_OK && i < x.items.count; i++) {
        span_t item = {x.items.entries[i].item, x.items.entries[i].item_len};
        reaction_row_t row;
        if ((rc = store_read_row(snap, item, user, &row)) == STORE_OK &&
            export_row((void *)store_kinds(store), item, user, &row) != 0)
            rc = STORE_ERROR;
    }
    itemmap_free(&x.items);
    return rc;
}

/* The whole store as the admin export writes it (engine/export.c): import lines page after page
 * from one snapshot, then the closing line. */
static int export_all(store_t *store)
{
    export_t *x;
    export_stores_t from = {&store, 1, NULL, NULL};
    int rc = export_open(&from, EXPORT_ALL, (span_t){0}, UINT64_MAX, &x);
    if (rc != STORE_OK)
        return rc;
    textbuf_t page = {0};
    do {
        page.len = 0;
        rc = export_next(x, &page);
        if (page.failed || (page.len && fwrite(page.buf, 1, page.len, stdout) != page.len))
            rc = STORE_ERROR;
    } while (rc == EXPORT_MORE);
    free(page.buf);
    export_close(x);
    return rc == EXPORT_DONE ? STORE_OK : STORE_ERROR;
}

static int cmd_export(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.data == !f.store || first != argc)
        return usage_error("needs --data DIR or --store URI");
    if (f.store && !store_location_is_url(f.store))
        return usage_error("--store: expected a postgresql:// (or postgres://) URI");
    if (f.user && !id_valid(span_of(f.user)))
        return usage_error("--user: not a valid user id");
    store_t *store = NULL;
    if (f.store) {
        char err[512];
        store_options_t opt = {0};
        if (store_open(f.store, NULL, &opt, &store, err, sizeof err) != STORE_OK) {
            fprintf(stderr, "tally export: %s\n", err);
            return EXIT_FAILED;
        }
    } else if (!(store = open_existing(f.data))) {
        return EXIT_FAILED;
    }
    int rc = STORE_OK;
    if (f.user) {
        store_read_t *snap;
        if ((rc = store_read_begin(store, &snap)) == STORE_OK) {
            rc = export_user(store, snap, span_of(f.user));
            store_read_end(snap);
        }
    } else {
        rc = export_all(store);
    }
    store_close(store);
    if (rc != STORE_OK || fflush(stdout) != 0) {
        fprintf(stderr, "tally export: failed\n");
        return EXIT_FAILED;
    }
    return 0;
}

static int cmd_erase_user(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.data || first != argc - 1)
        return usage_error("needs --data DIR and USER");
    span_t user = span_of(argv[first]);
    if (!id_valid(user))
        return usage_error("USER is not a valid user id");
    writer_t *writer;
    store_t *store = open_exclusive(f.data, NULL, NULL, &writer);
    if (!store)
        return EXIT_FAILED;
    write_cmd_t cmd = {.type = WRITE_CLEAR_USER};
    memcpy(cmd.clear.name, user.ptr, user.len);
    cmd.clear.name_len = user.len;
    uint64_t changed = 0;
    int rc = 0;
    do {
        answer_free(&cmd.answer);
        rc = writer_call(writer, &cmd) == 0 && cmd.answer.status == 200 ? 0 : -1;
        changed += cmd.clear.changed;
    } while (rc == 0 && cmd.clear.more);
    answer_free(&cmd.answer);
    features_close(tool_features);
    tool_features = NULL;
    writer_stop(writer);
    store_close(store);
    printf("{\"changed\":%llu}\n", (unsigned long long)changed);
    return rc == 0 ? 0 : EXIT_FAILED;
}

static store_t *open_existing(const char *dir)
{
    struct stat st;
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (stat(path, &st) != 0) {
        fprintf(stderr, "tally %s: %s holds no tally store\n", current->name, dir);
        return NULL;
    }
    store_t *store = NULL;
    store_options_t opt = {.map_size_bytes = STORE_MAP_SIZE_DEFAULT};
    if (store_open(dir, NULL, &opt, &store, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "tally %s: %s\n", current->name, err);
        return NULL;
    }
    return store;
}

static int cmd_move(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.data || !f.store || first != argc)
        return usage_error("needs --data DIR and --store URI");
    if (!store_location_is_url(f.store))
        return usage_error("--store: expected a postgresql:// (or postgres://) URI");
    char err[512];
    if (lmdb_lock_dir(f.data, err, sizeof err) < 0) {
        fprintf(stderr, "tally move: %s (stop tallyd first)\n", err);
        return EXIT_FAILED;
    }
    store_t *from = open_existing(f.data), *to = NULL;
    if (!from)
        return EXIT_FAILED;
    store_options_t opt = {0};
    if (store_open(f.store, store_kinds(from), &opt, &to, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "tally move: %s\n", err);
        store_close(from);
        return EXIT_FAILED;
    }
    move_result_t res;
    int rc = move_store(from, to, &res, err, sizeof err);
    store_close(to);
    store_close(from);
    if (rc != STORE_OK) {
        fprintf(stderr, "tally move: %s\n", err);
        return EXIT_FAILED;
    }
    printf("{\"rows\":%llu,\"keys\":%llu,\"log_entries\":%llu,\"items\":%llu,\"checkpoint\":%llu}\n",
           (unsigned long long)res.rows, (unsigned long long)res.keys, (unsigned long long)res.log_entries,
           (unsigned long long)res.items, (unsigned long long)res.checkpoint);
    return 0;
}

static int cmd_backup(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.data || first != argc - 1)
        return usage_error("needs --data DIR and OUT");
    const char *out = argv[first];
    if (mkdir(out, 0750) != 0) {
        fprintf(stderr, "tally backup: cannot create %s: %s (it must not exist yet)\n", out, strerror(errno));
        return EXIT_FAILED;
    }
    store_t *store = open_existing(f.data);
    if (!store)
        return EXIT_FAILED;
    int rc = store_backup(store, out);
    store_close(store);
    if (rc != STORE_OK) {
        fprintf(stderr, "tally backup: the copy failed\n");
        return EXIT_FAILED;
    }
    printf("backup of %s written to %s\n", f.data, out);
    return 0;
}

static int count_aux(void *arg, span_t key, span_t value)
{
    (void)key, (void)value;
    (*(uint64_t *)arg)++;
    return 0;
}

static int cmd_verify(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.data || first != argc)
        return usage_error("needs --data DIR");
    store_t *store = open_existing(f.data);
    if (!store)
        return EXIT_FAILED;
    /* the identity tallyd wrote at its first start (none before then: a store it never served) */
    shard_identity_t id;
    bool found = false;
    char err[512];
    if (shards_read_identity(store, &id, &found, err, sizeof err) != STORE_OK)
        printf("cluster: unreadable (%s)\n", err);
    else if (found)
        printf("cluster: %s, shard %u of %u\n", id.cluster, id.shard, id.map.count);
    else
        printf("cluster: none yet (tallyd writes it at its first start)\n");
    recount_report_t rep;
    int rc = recount_run(store, NULL, NULL, 0, &rep);
    if (rc == STORE_OK) {
        const kinds_t *kinds = store_kinds(store);
        for (size_t i = 0; i < rep.ndrift; i++)
            printf("drift item=%s kind=%s counted=%lld stored=%lld\n", rep.drift[i].item,
                   kinds_count_name(kinds, rep.drift[i].kind), (long long)rep.drift[i].counted,
                   (long long)rep.drift[i].stored);
        uint64_t voided = 0;
        store_read_t *snap;
        if (store_read_begin(store, &snap) == STORE_OK) {
            store_read_aux(snap, SPAN_LIT(STORE_VOID_PREFIX), count_aux, &voided);
            store_read_end(snap);
        }
        printf("voided users: %llu (their rows are not counted)\n", (unsigned long long)voided);
        printf("checked %zu items, %zu drift\n", rep.checked, rep.ndrift); /* the summary: last but lists */
        if (rep.list_mismatches)
            printf("lists: %llu entries disagree with the rows\n", (unsigned long long)rep.list_mismatches);
    } else {
        fprintf(stderr, "tally verify: reading the store failed\n");
    }
    size_t drift = rep.ndrift + (rep.list_mismatches > 0);
    recount_report_free(&rep);
    store_close(store);
    return rc != STORE_OK || drift ? EXIT_FAILED : 0;
}

static int cmd_token(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.user || first != argc)
        return usage_error("needs --user U");
    if (!id_valid(span_of(f.user)))
        return usage_error("--user is not a valid user id");
    uint64_t ttl_ms = TOKEN_TTL_DEFAULT_MS;
    if (f.ttl && (parse_duration_ms(f.ttl, &ttl_ms) != 0 || ttl_ms < 1000))
        return usage_error("--ttl takes a duration such as 90s, 15m or 1h");
    char text[65536];
    size_t len = 0;
    if (f.secret_file) {
        FILE *file = fopen(f.secret_file, "rb");
        len = file ? fread(text, 1, sizeof text - 1, file) : 0;
        if (!file) {
            fprintf(stderr, "tally token: cannot read %s\n", f.secret_file);
            return EXIT_FAILED;
        }
        fclose(file);
    } else if (getenv("TALLY_JWT_SECRET")) {
        len = (size_t)snprintf(text, sizeof text, "%s", getenv("TALLY_JWT_SECRET"));
    }
    span_t secrets[JWT_SECRETS_MAX];
    char err[256];
    if (jwt_secrets_parse((span_t){text, len}, secrets, err, sizeof err) <= 0)
        return usage_error(len ? err : "no secret: set TALLY_JWT_SECRET or give --jwt-secret-file");
    char token[JWT_MAX_LEN];
    int n = jwt_sign(f.user, f.admin, (uint64_t)time(NULL) + ttl_ms / 1000, secrets[0], token, sizeof token);
    if (n < 0) {
        fprintf(stderr, "tally token: signing failed\n");
        return EXIT_FAILED;
    }
    printf("%s\n", token);
    return 0;
}

static int cmd_stats(int argc, char **argv)
{
    flags_t f = {0};
    int first = parse_common(argc, argv, &f);
    if (first < 0)
        return first == -1 ? 0 : EXIT_USAGE;
    if (!f.data || first != argc)
        return usage_error("needs --data DIR");
    store_t *store = open_existing(f.data);
    if (!store)
        return EXIT_FAILED;
    store_stats_t st;
    int rc = store_stats(store, &st);
    store_close(store);
    if (rc != STORE_OK) {
        fprintf(stderr, "tally stats: reading the store failed\n");
        return EXIT_FAILED;
    }
    printf("{\"rows\":%llu,\"items\":%llu,\"log_entries\":%llu,\"log_bytes\":%llu,\"idempotency_records\":%llu,"
           "\"store_used_bytes\":%llu,\"checkpoint\":%llu}\n",
           (unsigned long long)st.rows, (unsigned long long)st.items, (unsigned long long)st.log_entries,
           (unsigned long long)st.log_bytes, (unsigned long long)st.idem_records, (unsigned long long)st.used_bytes,
           (unsigned long long)st.checkpoint);
    return 0;
}

static const command_t commands[] = {
    {"backup",
     "tally backup --data DIR OUT\n  a consistent, compacted copy of the store in DIR into the new directory OUT;\n  "
     "safe while tallyd runs\n",
     cmd_backup},
    {"verify",
     "tally verify --data DIR\n  recounts every item from the reaction rows (a voided user's rows do not count); lists "
     "drift\n"
     "  and exits 1 if any; says how many users are voided and which cluster and shard the store is\n",
     cmd_verify},
    {"token",
     "tally token --user U [--admin] [--ttl 1h] [--jwt-secret-file FILE]\n  mints an HS256 JWT with the first secret "
     "(TALLY_JWT_SECRET, or the file's first line)\n",
     cmd_token},
    {"stats", "tally stats --data DIR\n  rows, items, log length and store size, as JSON\n", cmd_stats},
    {"import",
     "tally import --data DIR [--format ndjson|csv] [--on-error skip|abort] [--reactions LIST]\n"
     "             [--reaction-mode one|many] FILE\n"
     "  applies {item,user,reaction} records (JSON lines, or CSV with the header item,user,reaction) as\n"
     "  ordinary writes; tallyd must not be running on DIR; a re-run changes nothing\n",
     cmd_import},
    {"export",
     "tally export --data DIR|--store URI [--user USER]\n"
     "  every reaction row (not none) as JSON lines, the import format, from one\n"
     "  snapshot, then the closing line {\"export\":\"complete\",\"lines\":N} (the admin\n"
     "  export's lines); with --user, only that user's rows (no closing line)\n",
     cmd_export},
    {"erase-user",
     "tally erase-user --data DIR USER\n  every reaction of USER becomes none; their idempotency records are deleted\n",
     cmd_erase_user},
    {"move",
     "tally move --data DIR --store URI\n  copies the embedded store in DIR into an empty PostgreSQL database: rows "
     "with\n"
     "  their versions, live idempotency records, the retained log at its own positions, the counts;\n"
     "  no tallyd may run on either meanwhile\n",
     cmd_move},
};

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tally %s\n", tally_version);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        FILE *out = argc < 2 ? stderr : stdout;
        fputs("usage: tally COMMAND [flags]   (tally COMMAND --help for each)\n\n", out);
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            fputs(commands[i].usage, out);
        fputs("\nEvery command also takes --config FILE: its flags from FILE, one name = value a line (tallyd's\n"
              "file works: names of tallyd's other flags are skipped); the command line replaces the file's\n"
              "values. tally --version prints the version.\n",
              out);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            current = &commands[i];
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "tally: unknown command '%s' (see tally --help)\n", argv[1]);
    return EXIT_USAGE;
}
