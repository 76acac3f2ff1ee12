/* fuzz_parse.c — libFuzzer target for the header, flag and query parsers of core/parse.h, each checked
 * against a small reference implementation of its documented contract. */
#include <stdbool.h>
#include <stdint.h>

#include "core/parse.h"
#include "core/ratelimit.h"
#include "fuzz.h"

/* The first input byte picks the parser (its low four bits: '0'..'8' in the seed files; 9..15 fold onto
 * 1..7); the rest is the parser's input. */
enum {
    SEL_DURATION,
    SEL_SIZE,
    SEL_LISTEN,
    SEL_UINT,
    SEL_IDEM_KEY,
    SEL_IF_MATCH,
    SEL_LIST,
    SEL_QUERY,
    SEL_RATE,
};

#define BATCH_MAX (1u << 20)        /* tallyd --batch-max */
#define QUEUE_MAX (1u << 24)        /* tallyd --queue-max */
#define AFTER_MAX (UINT64_MAX - 1)  /* /v1/changes?after= */
#define U64_TENTH (UINT64_MAX / 10) /* around the overflow edge of v * 10 + digit */
#define U64_TENTH1 (UINT64_MAX / 10 + 1)
#define UINT_MAX_DIGITS 20 /* parse_uint's own limit: UINT64_MAX has 20 digits */
#define DURATION_MAX_MS (365ull * 86400 * 1000)
#define RATE_MAX 1000000 /* ratelimit.c's bound on RATE and BURST */
#define TRENDING_LIMIT 100

typedef unsigned __int128 u128;

/* A reference for parse_uint: 1..20 decimal digits whose value is at most max. */
static bool ref_uint(span_t s, uint64_t max, uint64_t *value)
{
    if (s.len == 0 || s.len > UINT_MAX_DIGITS)
        return false;
    u128 v = 0;
    for (size_t i = 0; i < s.len; i++) {
        if (!fuzz_is_digit((unsigned char)s.ptr[i]))
            return false;
        v = v * 10 + (unsigned)(s.ptr[i] - '0');
    }
    if (v > max)
        return false;
    *value = (uint64_t)v;
    return true;
}

static size_t leading_digits(const char *s)
{
    size_t n = 0;
    while (fuzz_is_digit((unsigned char)s[n]))
        n++;
    return n;
}

static void check_uint(span_t text)
{
    /* Small bounds, then the callers' (--threads, wait, limit, ports, --batch-max, --queue-max, after),
     * then the edges of 64 bits. */
    static const uint64_t maxes[] = {
        0,    1,          7,         9,         10,        30,         64,        99,        TRENDING_LIMIT,
        1000, UINT16_MAX, BATCH_MAX, QUEUE_MAX, U64_TENTH, U64_TENTH1, AFTER_MAX, UINT64_MAX};
    for (size_t i = 0; i < sizeof maxes / sizeof maxes[0]; i++) {
        uint64_t got = 0xdeadbeef, want = 0;
        int rc = parse_uint(text, maxes[i], &got);
        bool ok = ref_uint(text, maxes[i], &want);
        if ((rc == 0) != ok || (ok && got != want))
            fprintf(stderr, "parse_uint(\"%.*s\", max %llu): returned %d with %llu\n", (int)text.len, text.ptr,
                    (unsigned long long)maxes[i], rc, (unsigned long long)got);
        FUZZ_ASSERT(rc == 0 || rc == -1);
        FUZZ_ASSERT((rc == 0) == ok);
        if (ok) {
            FUZZ_ASSERT(got <= maxes[i]);
            FUZZ_ASSERT(got == want);
        }
    }
}

static void check_duration(const char *text)
{
    static const struct {
        const char *suffix;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    uint64_t got = 0xdeadbeef;
    int rc = parse_duration_ms(text, &got);
    FUZZ_ASSERT(rc == 0 || rc == -1);
    bool ok = false;
    uint64_t want = 0;
    size_t digits = leading_digits(text);
    if (strcmp(text, "0") == 0) {
        ok = true;
    } else {
        for (size_t u = 0; u < sizeof units / sizeof units[0] && digits > 0; u++) {
            uint64_t n;
            if (strcmp(text + digits, units[u].suffix) == 0 && ref_uint((span_t){text, digits}, UINT64_MAX, &n) &&
                (u128)n * units[u].ms <= DURATION_MAX_MS) {
                ok = true;
                want = n * units[u].ms;
            }
        }
    }
    if ((rc == 0) != ok || (ok && got != want))
        fprintf(stderr, "parse_duration_ms(\"%s\"): returned %d with %llu\n", text, rc, (unsigned long long)got);
    FUZZ_ASSERT((rc == 0) == ok);
    if (ok) {
        FUZZ_ASSERT(got <= DURATION_MAX_MS);
        FUZZ_ASSERT(got == want);
    }
}

static void check_size(const char *text)
{
    /* "optional trailing iB/B": B after a number or a multiple, iB only after a binary multiple. */
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {
        {"", 0},     {"B", 0},  {"K", 10},  {"KB", 10},  {"KiB", 10}, {"M", 20},  {"MB", 20},
        {"MiB", 20}, {"G", 30}, {"GB", 30}, {"GiB", 30}, {"T", 40},   {"TB", 40}, {"TiB", 40},
    };
    uint64_t got = 0xdeadbeef;
    int rc = parse_size_bytes(text, &got);
    FUZZ_ASSERT(rc == 0 || rc == -1);
    bool ok = false;
    uint64_t want = 0;
    size_t digits = leading_digits(text);
    for (size_t u = 0; u < sizeof units / sizeof units[0] && digits > 0; u++) {
        uint64_t n;
        if (strcmp(text + digits, units[u].suffix) == 0 && ref_uint((span_t){text, digits}, UINT64_MAX, &n) &&
            ((u128)n << units[u].shift) <= UINT64_MAX) {
            ok = true;
            want = n << units[u].shift;
        }
    }
    if ((rc == 0) != ok || (ok && got != want))
        fprintf(stderr, "parse_size_bytes(\"%s\"): returned %d with %llu\n", text, rc, (unsigned long long)got);
    FUZZ_ASSERT((rc == 0) == ok);
    if (ok)
        FUZZ_ASSERT(got == want);
}

static void check_listen(const char *text)
{
    char *host = malloc(LISTEN_HOST_MAX + 1); /* exactly the documented size, so ASan sees overruns */
    if (!host)
        abort();
    memset(host, 0x55, LISTEN_HOST_MAX + 1);
    uint16_t port = 0xbeef;
    int rc = parse_listen(text, host, &port);
    FUZZ_ASSERT(rc == 0 || rc == -1);

    bool ok = false;
    span_t want_host = {0};
    uint64_t want_port = 0;
    const char *colon = strrchr(text, ':');
    if (colon) {
        span_t h = {text, (size_t)(colon - text)};
        bool bracketed = h.len >= 2 && h.ptr[0] == '[' && h.ptr[h.len - 1] == ']';
        if (bracketed)
            h = (span_t){h.ptr + 1, h.len - 2};
        ok = (bracketed || !memchr(h.ptr, ':', h.len)) && h.len >= 1 && h.len <= LISTEN_HOST_MAX &&
             ref_uint(span_of(colon + 1), UINT16_MAX, &want_port);
        want_host = h;
    }
    if ((rc == 0) != ok)
        fprintf(stderr, "parse_listen(\"%s\"): returned %d\n", text, rc);
    FUZZ_ASSERT((rc == 0) == ok);
    if (ok) {
        size_t hlen = strnlen(host, LISTEN_HOST_MAX + 1);
        FUZZ_ASSERT(hlen >= 1 && hlen <= LISTEN_HOST_MAX); /* NUL-terminated inside the buffer */
        FUZZ_ASSERT(span_eq(span_of(host), want_host));
        FUZZ_ASSERT(port == want_port);
    }
    free(host);
}

static bool printable(unsigned char c)
{
    return c >= 0x20 && c <= 0x7e;
}

/* A reference for parse_idempotency_key; writes the unescaped key to want (IDEM_KEY_MAX + 1 bytes). */
static int ref_idem_key(span_t h, char *want)
{
    size_t n = 0;
    bool quoted = h.len >= 1 && h.ptr[0] == '"';
    size_t from = quoted ? 1 : 0, to = quoted ? h.len - 1 : h.len;
    if (quoted && (h.len < 2 || h.ptr[h.len - 1] != '"'))
        return -1;
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)h.ptr[i];
        if (!printable(c))
            return -1;
        if (quoted && c == '"')
            return -1;
        if (quoted && c == '\\') {
            if (i + 1 >= to || (h.ptr[i + 1] != '"' && h.ptr[i + 1] != '\\'))
                return -1;
            c = (unsigned char)h.ptr[++i];
        }
        if (n == IDEM_KEY_MAX)
            return -1;
        want[n++] = (char)c;
    }
    return n == 0 ? -1 : (int)n;
}

static void check_idem_key(span_t header)
{
    char *key = malloc(IDEM_KEY_MAX + 1);
    char want[IDEM_KEY_MAX + 1];
    if (!key)
        abort();
    int len = parse_idempotency_key(header, key);
    int want_len = ref_idem_key(header, want);
    if (len != want_len)
        fprintf(stderr, "parse_idempotency_key(\"%.*s\"): returned %d, expected %d\n", (int)header.len, header.ptr, len,
                want_len);
    FUZZ_ASSERT(len == want_len);
    if (len >= 0) {
        FUZZ_ASSERT(len >= 1 && len <= IDEM_KEY_MAX);
        FUZZ_ASSERT(key[len] == '\0' && strlen(key) == (size_t)len);
        for (int i = 0; i < len; i++)
            FUZZ_ASSERT(printable((unsigned char)key[i]));
        FUZZ_ASSERT(memcmp(key, want, (size_t)len) == 0);
    }
    free(key);
}

static span_t trim(span_t s)
{
    while (s.len && (s.ptr[0] == ' ' || s.ptr[0] == '\t')) {
        s.ptr++;
        s.len--;
    }
    while (s.len && (s.ptr[s.len - 1] == ' ' || s.ptr[s.len - 1] == '\t'))
        s.len--;
    return s;
}

/* A reference for parse_if_match, splitting on commas by hand rather than with parse_list_next. */
static bool ref_if_match(span_t h, if_match_t *m)
{
    *m = (if_match_t){0};
    if (span_eq_str(trim(h), "*")) {
        m->any = true;
        return true;
    }
    size_t start = 0;
    for (size_t i = 0; i <= h.len; i++) {
        if (i < h.len && h.ptr[i] != ',')
            continue;
        span_t tag = trim((span_t){h.ptr + start, i - start});
        if (m->count == IF_MATCH_MAX_TAGS || tag.len < 2 || tag.ptr[0] != '"' || tag.ptr[tag.len - 1] != '"' ||
            !ref_uint((span_t){tag.ptr + 1, tag.len - 2}, UINT64_MAX, &m->versions[m->count]))
            return false;
        m->count++;
        start = i + 1;
    }
    return true;
}

static void check_if_match(span_t header)
{
    if_match_t got, want;
    memset(&got, 0x55, sizeof got);
    int rc = parse_if_match(header, &got);
    bool ok = ref_if_match(header, &want);
    if ((rc == 0) != ok)
        fprintf(stderr, "parse_if_match(\"%.*s\"): returned %d\n", (int)header.len, header.ptr, rc);
    FUZZ_ASSERT(rc == 0 || rc == -1);
    FUZZ_ASSERT((rc == 0) == ok);
    if (!ok)
        return;
    FUZZ_ASSERT(got.any == want.any);
    FUZZ_ASSERT(got.any ? got.count == 0 : got.count >= 1 && got.count <= IF_MATCH_MAX_TAGS);
    FUZZ_ASSERT(got.count == want.count);
    for (int i = 0; i < got.count; i++) {
        FUZZ_ASSERT(got.versions[i] == want.versions[i]);
        FUZZ_ASSERT(if_match_holds(&got, got.versions[i]));
    }
    /* "*" holds for any existing row and never for "no row"; tags hold exactly for their versions. */
    static const uint64_t probes[] = {0, 1, 2, 3, 10, UINT64_MAX};
    for (size_t p = 0; p < sizeof probes / sizeof probes[0]; p++) {
        bool listed = false;
        for (int i = 0; i < got.count; i++)
            listed = listed || got.versions[i] == probes[p];
        FUZZ_ASSERT(if_match_holds(&got, probes[p]) == (got.any ? probes[p] > 0 : listed));
    }
}

static void check_list(span_t list)
{
    size_t pos = 0, count = 0, commas = 0, covered = 0;
    span_t elem;
    for (size_t i = 0; i < list.len; i++)
        commas += list.ptr[i] == ',';
    while (parse_list_next(list, &pos, &elem)) {
        FUZZ_ASSERT(++count <= list.len + 1); /* terminates */
        FUZZ_ASSERT(fuzz_span_within(elem, list.ptr, list.len));
        FUZZ_ASSERT(elem.len == 0 || !memchr(elem.ptr, ',', elem.len));
        /* The elements tile the list in order, one comma between neighbours. */
        FUZZ_ASSERT(elem.len == 0 || elem.ptr == list.ptr + covered);
        covered += elem.len;
        FUZZ_ASSERT(covered <= list.len);
        if (covered < list.len)
            FUZZ_ASSERT(list.ptr[covered] == ',');
        covered++;
    }
    FUZZ_ASSERT(count == commas + 1);
    FUZZ_ASSERT(covered == list.len + 1);
    FUZZ_ASSERT(!parse_list_next(list, &pos, &elem)); /* stays at the end */
}

/* A reference for parse_query_param: the first '&'-separated parameter that is name or name=value. */
static bool ref_query_param(span_t q, const char *name, span_t *value)
{
    size_t name_len = strlen(name), start = 0;
    for (size_t i = 0; i <= q.len; i++) {
        if (i < q.len && q.ptr[i] != '&')
            continue;
        span_t p = {q.ptr + start, i - start};
        if (p.len >= name_len && memcmp(p.ptr, name, name_len) == 0) {
            if (p.len == name_len) {
                *value = (span_t){p.ptr + p.len, 0};
                return true;
            }
            if (p.ptr[name_len] == '=') {
                *value = (span_t){p.ptr + name_len + 1, p.len - name_len - 1};
                return true;
            }
        }
        start = i + 1;
    }
    return false;
}

static void check_query(span_t query)
{
    static const char *const names[] = {"ids", "after", "limit", "wait", "reaction", "window", "on-error", "x"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        span_t got = {0}, want = {0};
        bool found = parse_query_param(query, names[i], &got);
        FUZZ_ASSERT(found == ref_query_param(query, names[i], &want));
        if (!found)
            continue;
        FUZZ_ASSERT(fuzz_span_within(got, query.ptr, query.len));
        FUZZ_ASSERT(got.len == want.len && (got.len == 0 || got.ptr == want.ptr));
        FUZZ_ASSERT(got.len == 0 || !memchr(got.ptr, '&', got.len));
    }
}

/* A reference for ratelimit_parse: "off", or RATE "/s" [":" BURST], both 1..RATE_MAX, burst 2 x rate by default. */
static bool ref_rate(const char *text, ratelimit_rule_t *want)
{
    uint64_t rate, burst;
    size_t digits = leading_digits(text);
    if (strcmp(text, "off") == 0) {
        *want = (ratelimit_rule_t){0, 0};
        return true;
    }
    if (!ref_uint((span_t){text, digits}, RATE_MAX, &rate) || rate == 0 || strncmp(text + digits, "/s", 2) != 0)
        return false;
    const char *rest = text + digits + 2;
    if (*rest == '\0')
        burst = 2 * rate;
    else if (*rest != ':' || !ref_uint(span_of(rest + 1), RATE_MAX, &burst) || burst == 0)
        return false;
    *want = (ratelimit_rule_t){(double)rate, (double)burst};
    return true;
}

static void check_rate(const char *text)
{
    ratelimit_rule_t got = {-1, -1}, want;
    int rc = ratelimit_parse(text, &got);
    bool ok = ref_rate(text, &want);
    if ((rc == 0) != ok)
        fprintf(stderr, "ratelimit_parse(\"%s\"): returned %d\n", text, rc);
    FUZZ_ASSERT(rc == 0 || rc == -1);
    FUZZ_ASSERT((rc == 0) == ok);
    if (ok) {
        FUZZ_ASSERT(got.rate_per_s == want.rate_per_s && got.burst == want.burst);
        FUZZ_ASSERT(got.rate_per_s == 0 ? got.burst == 0 : got.rate_per_s >= 1 && got.burst >= 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    unsigned selector = data[0] & 15;
    if (selector > SEL_RATE)
        selector &= 7;
    span_t input = {(const char *)data + 1, size - 1};
    char *text = fuzz_cstring(data + 1, size - 1);
    switch (selector) {
    case SEL_DURATION:
        check_duration(text);
        break;
    case SEL_SIZE:
        check_size(text);
        break;
    case SEL_LISTEN:
        check_listen(text);
        break;
    case SEL_UINT:
        check_uint(input);
        break;
    case SEL_IDEM_KEY:
        check_idem_key(input);
        break;
    case SEL_IF_MATCH:
        check_if_match(input);
        break;
    case SEL_LIST:
        check_list(input);
        break;
    case SEL_QUERY:
        check_query(input);
        break;
    case SEL_RATE:
        check_rate(text);
        break;
    }
    free(text);
    return 0;
}
