/* test_etag.c — weak ETags of bodies and the If-None-Match comparison. */
#include <string.h>

#include "core/etag.h"
#include "unit.h"

static bool inm(const char *field, const char *etag)
{
    return etag_none_match(span_of(field), span_of(etag));
}

void test_etag(void)
{
    char tag[ETAG_WEAK_SIZE], other[ETAG_WEAK_SIZE];
    /* SHA-256 test vector: the empty input (e3b0c442 98fc1c14 9afbf4c8 996fb924 …), base64url. */
    CHECK(etag_weak("", 0, tag) == ETAG_WEAK_LEN);
    CHECK(strcmp(tag, "W/\"47DEQpj8HBSa-_TImW-5JA\"") == 0);
    const char body[] = "{\"item\":\"a\",\"counts\":{\"like\":0,\"dislike\":0}}";
    CHECK(etag_weak(body, strlen(body), tag) == ETAG_WEAK_LEN);
    CHECK(strcmp(tag, "W/\"GPqFm_8kMT512tlYHh16Sw\"") == 0);
    /* A function of the body alone: the same bytes, the same tag; one count more, another. */
    CHECK(etag_weak(body, strlen(body), other) == ETAG_WEAK_LEN && strcmp(tag, other) == 0);
    const char more[] = "{\"item\":\"a\",\"counts\":{\"like\":1,\"dislike\":0}}";
    CHECK(etag_weak(more, strlen(more), other) == ETAG_WEAK_LEN && strcmp(tag, other) != 0);

    const char *t = "W/\"abc\"";
    CHECK(inm("W/\"abc\"", t));
    CHECK(inm("\"abc\"", t)); /* weak comparison: W/ on either side is ignored */
    CHECK(inm("\"abc\"", "\"abc\""));
    CHECK(inm("*", t));
    CHECK(inm("  *  ", t));
    CHECK(inm("\"x\", W/\"abc\"", t));
    CHECK(inm("\"x\",W/\"abc\" ,\"y\"", t));
    CHECK(inm(" ,, W/\"abc\"", t)); /* empty list elements are allowed (RFC 9110 §5.6.1) */
    CHECK(!inm("", t));
    CHECK(!inm("W/\"abcd\"", t));
    CHECK(!inm("W/\"ab\"", t));
    CHECK(!inm("abc", t));             /* not quoted */
    CHECK(!inm("w/\"abc\"", t));       /* W/ is case-sensitive */
    CHECK(!inm("\"x\" W/\"abc\"", t)); /* no comma between tags: malformed, matches nothing */
    CHECK(!inm("\"x\", \"abc", t));    /* unterminated */
    CHECK(!inm("*, \"abc\"", t));      /* * stands alone */
    CHECK(!inm("\"a,bc\"", t));
    CHECK(inm("\"a,bc\", W/\"abc\"", t)); /* a comma inside a tag is part of it */
    CHECK(!inm("W/\"abc\"", "abc"));      /* an unquoted etag matches nothing */
}
