/* tally.c — the operator's tool: backup, verify, token, stats. Each subcommand has --help. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/jwt.h"
#include "core/parse.h"
#include "engine/recount.h"
#include "store/store.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define TOKEN_TTL_DEFAULT_MS (3600ull * 1000)

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
    const char *data, *user, *ttl, *secret_file;
    bool admin;
} flags_t;

static int parse_common(int argc, char **argv, flags_t *f)
{
    static const struct option opts[] = {
        {"data", required_argument, NULL, 'd'},
        {"user", required_argument, NULL, 'u'},
        {"ttl", required_argument, NULL, 't'},
        {"jwt-secret-file", required_argument, NULL, 's'},
        {"admin", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
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
    return optind;
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
    recount_report_t rep;
    int rc = recount_run(store, NULL, NULL, 0, &rep);
    if (rc == STORE_OK) {
        const kinds_t *kinds = store_kinds(store);
        for (size_t i = 0; i < rep.ndrift; i++)
            printf("drift item=%s kind=%s counted=%lld stored=%lld\n", rep.drift[i].item,
                   kinds_name(kinds, rep.drift[i].kind), (long long)rep.drift[i].counted,
                   (long long)rep.drift[i].stored);
        printf("checked %zu items, %zu drift\n", rep.checked, rep.ndrift);
    } else {
        fprintf(stderr, "tally verify: reading the store failed\n");
    }
    size_t drift = rep.ndrift;
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
    if (jwt_secrets_parse((span_t){text, len}, secrets) <= 0)
        return usage_error("no secret: set TALLY_JWT_SECRET or give --jwt-secret-file");
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
     "tally verify --data DIR\n  recounts every item from the reaction rows; lists drift and exits 1 if any\n",
     cmd_verify},
    {"token",
     "tally token --user U [--admin] [--ttl 1h] [--jwt-secret-file FILE]\n  mints an HS256 JWT with the first secret "
     "(TALLY_JWT_SECRET, or the file's first line)\n",
     cmd_token},
    {"stats", "tally stats --data DIR\n  rows, items, log length and store size, as JSON\n", cmd_stats},
};

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        fputs("usage: tally COMMAND [flags]   (tally COMMAND --help for each)\n\n", argc < 2 ? stderr : stdout);
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            fputs(commands[i].usage, argc < 2 ? stderr : stdout);
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
