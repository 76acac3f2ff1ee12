/* fuzz_forwarded.c — libFuzzer target for forwarded_client (core/forwarded.h): the first byte picks
 * the header (even: X-Forwarded-For, odd: Forwarded), the rest is its lines separated by '\n'.
 * Properties: no crash or overread; a client found is never a trusted proxy; hops a trusted proxy
 * appends on the right are skipped, and whatever a client writes on the left is never read. */
#include <stdint.h>

#include "core/forwarded.h"
#include "fuzz.h"

#define LINES_MAX (FORWARDED_LINES_MAX + 2)
#define COMMAS_MAX 32 /* beyond this, appended hops may push the client out of the kept window */

static size_t split(char *text, size_t len, span_t *lines)
{
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= len && n < LINES_MAX; i++) {
        if (i == len || text[i] == '\n') {
            lines[n++] = (span_t){text + start, i - start};
            start = i + 1;
        }
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static netallow_t trusted;
    static bool ready;
    char why[128];
    if (!ready) {
        FUZZ_ASSERT(netallow_parse(&trusted, "10.0.0.0/8,2001:db8:ffff::/48,127.0.0.1", why, sizeof why) == 0);
        ready = true;
    }
    if (size == 0)
        return 0;
    forwarded_kind_t kind = data[0] % 2 ? FORWARDED_RFC7239 : FORWARDED_X_FORWARDED_FOR;
    size_t len = size - 1;
    char *text = malloc(len + 64);
    if (!text)
        abort();
    memcpy(text + 48, data + 1, len); /* room before it for a prefix, after it for a suffix */
    span_t lines[LINES_MAX];
    size_t n = split(text + 48, len, lines);

    uint8_t addr[NETALLOW_ADDR_LEN], again[NETALLOW_ADDR_LEN];
    forwarded_result_t r = forwarded_client(kind, lines, n, &trusted, addr);
    FUZZ_ASSERT(r != FORWARDED_NONE); /* one line at least, even empty */
    FUZZ_ASSERT(forwarded_client(kind, lines, 0, &trusted, again) == FORWARDED_NONE);
    FUZZ_ASSERT(forwarded_client(kind, lines, n, &trusted, again) == r);
    if (r != FORWARDED_CLIENT) {
        free(text);
        return 0;
    }
    FUZZ_ASSERT(!forwarded_trusted(&trusted, addr));
    char shown[FORWARDED_TEXT_MAX], key[FORWARDED_KEY_MAX];
    FUZZ_ASSERT(forwarded_addr_text(addr, shown) > 0 && strlen(shown) < FORWARDED_TEXT_MAX);
    FUZZ_ASSERT(forwarded_limit_key(addr, 64, key) > 0 && strlen(key) < FORWARDED_KEY_MAX);
    size_t commas = 0;
    for (size_t i = 0; i < len; i++)
        commas += data[1 + i] == ',';
    if (commas < COMMAS_MAX && n < FORWARDED_LINES_MAX) {
        /* a trusted proxy's own line on the right is skipped */
        span_t more[LINES_MAX];
        memcpy(more, lines, n * sizeof *lines);
        more[n] = span_of(kind == FORWARDED_RFC7239 ? "for=10.1.2.3;proto=https" : "10.1.2.3");
        FUZZ_ASSERT(forwarded_client(kind, more, n + 1, &trusted, again) == FORWARDED_CLIENT);
        FUZZ_ASSERT(memcmp(addr, again, NETALLOW_ADDR_LEN) == 0);
        /* what a client writes on the left of the first line is never read */
        const char *junk = kind == FORWARDED_RFC7239 ? "for=unknown;x=\"a,b\", " : "unknown, _x, 1.2.3, ";
        size_t jl = strlen(junk);
        memcpy(text + 48 - jl, junk, jl);
        more[0] = (span_t){text + 48 - jl, lines[0].len + jl};
        FUZZ_ASSERT(forwarded_client(kind, more, n, &trusted, again) == FORWARDED_CLIENT);
        FUZZ_ASSERT(memcmp(addr, again, NETALLOW_ADDR_LEN) == 0);
    }
    free(text);
    return 0;
}
