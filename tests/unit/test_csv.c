/* Unit tests: CSV records (core/csv.c) — RFC 4180 quoting, records over several lines, the BOM. */
#include <string.h>

#include "core/csv.h"
#include "unit.h"

/* Splits text (one record) into at most 4 fields; true when the fields are want[0..n) exactly. */
static bool fields_are(const char *text, size_t n, const char *const *want)
{
    span_t f[4];
    char out[256];
    size_t got = 0;
    if (csv_record(span_of(text), f, 4, &got, out) != NULL || got != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!span_eq_str(f[i], want[i]))
            return false;
    return true;
}

static const char *error_of(const char *text, size_t max)
{
    span_t f[4];
    char out[256];
    size_t n;
    return csv_record(span_of(text), f, max, &n, out);
}

/* Feeds text's lines (split at '\n') to a scan; whether it is open after each is told in `want`
 * ('o' open, 'c' closed), one letter per line. */
static bool scan_is(const char *text, const char *want)
{
    csv_scan_t scan = {0};
    size_t i = 0;
    for (const char *p = text;; i++) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        csv_scan_line(&scan, (span_t){p, len});
        if (!want[i] || (want[i] == 'o') != csv_scan_open(&scan))
            return false;
        if (!nl)
            return want[i + 1] == '\0';
        p = nl + 1;
    }
}

static void test_fields(void)
{
    CHECK(fields_are("a,b,c", 3, (const char *[]){"a", "b", "c"}));
    CHECK(fields_are("a,b,c\r", 3, (const char *[]){"a", "b", "c"})); /* the CR of a CRLF */
    CHECK(fields_are("\"a\",\"b\",\"c\"", 3, (const char *[]){"a", "b", "c"}));
    CHECK(fields_are("\"a,b\",c", 2, (const char *[]){"a,b", "c"}));
    CHECK(fields_are("\"a\"\"b\",\"\"\"\"", 2, (const char *[]){"a\"b", "\""}));
    CHECK(fields_are("\"\",,x", 3, (const char *[]){"", "", "x"}));
    CHECK(fields_are("", 1, (const char *[]){""}));
    CHECK(fields_are("a,", 2, (const char *[]){"a", ""}));
    CHECK(fields_are("\"a\nb\",c", 2, (const char *[]){"a\nb", "c"})); /* a line break inside quotes */
    CHECK(fields_are("\"a\r\nb\"\r", 1, (const char *[]){"a\r\nb"}));  /* a CRLF inside quotes stays */
    CHECK(fields_are(" a , b ", 2, (const char *[]){" a ", " b "}));   /* spaces are part of a field */
    CHECK(fields_are("\xEF\xBB\xBF"
                     "a",
                     1,
                     (const char *[]){"\xEF\xBB\xBF"
                                      "a"})); /* csv_strip_bom's job */
    CHECK(error_of("a,b,c,d", 3) != NULL);
    CHECK(error_of("a,b,c", 3) == NULL);
    CHECK(error_of("\"a", 4) != NULL);    /* not closed */
    CHECK(error_of("\"a\"b", 4) != NULL); /* text after a closing quote */
    CHECK(error_of("\"a\" ,b", 4) != NULL);
    CHECK(error_of("a\"b", 4) != NULL);      /* a quote inside an unquoted field */
    CHECK(error_of("a,\"b\"\"", 4) != NULL); /* a doubled quote, then the end inside the field */
    /* too many fields: the first max are given */
    span_t f[2];
    char out[32];
    size_t n = 0;
    CHECK(csv_record(SPAN_LIT("x,y,z"), f, 2, &n, out) != NULL && n == 2 && span_eq_str(f[1], "y"));
}

static void test_scan(void)
{
    CHECK(scan_is("a,b,c", "c"));
    CHECK(scan_is("\"a,b", "o"));
    CHECK(scan_is("\"a\nb\",c", "oc"));
    CHECK(scan_is("a,\"x\ny\nz\",c", "ooc"));
    CHECK(scan_is("\"a\"\"", "o"));         /* a doubled quote: still inside */
    CHECK(scan_is("\"a\"", "c"));           /* closed at the line's end */
    CHECK(scan_is("\"a\n\"\"\n\"", "ooc")); /* a line starting with a doubled quote stays inside */
    CHECK(scan_is("a\"b", "c"));            /* a quote inside an unquoted field opens nothing */
    CHECK(scan_is("\"a\"x\"", "c"));        /* nor one after a closing quote */
    CHECK(scan_is(",\"", "o"));
}

static void test_bom(void)
{
    CHECK(span_eq_str(csv_strip_bom(SPAN_LIT("\xEF\xBB\xBFitem")), "item"));
    CHECK(span_eq_str(csv_strip_bom(SPAN_LIT("item")), "item"));
    CHECK(span_eq_str(csv_strip_bom(SPAN_LIT("\xEF\xBB")), "\xEF\xBB"));
    CHECK(csv_strip_bom((span_t){0}).len == 0);
}

void test_csv(void)
{
    test_fields();
    test_scan();
    test_bom();
}
