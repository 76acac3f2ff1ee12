/* test_openapi.c — the OpenAPI document describes exactly the router's routes: every route and
 * method of router.c's table is an operation of the document, and every operation of the document
 * is matched by the router to that route and allowed there (HEAD, which every GET also answers, and
 * OPTIONS, the CORS preflight, are not operations of their own). */
#include <ctype.h>
#include <string.h>

#include "http/openapi.h"
#include "unit.h"

#define OPS_MAX 128

/* A concrete target for a path template: {item} → p1, {kind} → the first kind, {user} → u1. */
static void concrete(const char *tmpl, const kinds_t *kinds, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = tmpl; *p && n + 40 < len;) {
        if (*p != '{') {
            out[n++] = *p++;
            continue;
        }
        const char *close = strchr(p, '}');
        const char *value = strncmp(p, "{kind}", 6) == 0   ? kinds_name(kinds, 1)
                            : strncmp(p, "{user}", 6) == 0 ? "u1"
                                                           : "p1";
        n += (size_t)snprintf(out + n, len - n, "%s", value);
        p = close + 1;
    }
    out[n] = '\0';
}

/* Every method of route id's Allow list but HEAD is an operation of ops. */
static bool route_described(route_id_t id, const openapi_op_t *ops, size_t n)
{
    const char *allow = route_allow(id);
    bool all = true;
    while (*allow) {
        size_t len = strcspn(allow, ",");
        char method[16];
        size_t m = 0;
        for (size_t i = 0; i < len && m + 1 < sizeof method; i++)
            method[m++] = (char)tolower((unsigned char)allow[i]);
        method[m] = '\0';
        if (strcmp(method, "head") != 0) {
            bool found = false;
            for (size_t i = 0; i < n; i++)
                found |= ops[i].route == id && strcmp(ops[i].method, method) == 0;
            if (!found)
                fprintf(stderr, "route %s: %s is not in the OpenAPI document\n", route_name(id), method);
            all &= found;
        }
        allow += len;
        while (*allow == ',' || *allow == ' ')
            allow++;
    }
    return all;
}

static void check_config(const openapi_config_t *cfg)
{
    openapi_op_t ops[OPS_MAX];
    size_t n = openapi_ops(cfg, ops, OPS_MAX);
    CHECK(n > 0 && n <= OPS_MAX);
    for (int id = ROUTE_NOT_FOUND + 1; id < ROUTE_COUNT; id++)
        CHECK(route_described((route_id_t)id, ops, n));
    json_t *doc = openapi_build(cfg);
    CHECK(doc != NULL);
    json_t *paths = json_object_get(doc, "paths");
    size_t documented = 0;
    const char *path;
    json_t *item;
    json_object_foreach(paths, path, item) documented += json_object_size(item);
    CHECK(documented == n); /* nothing in the document that is not an operation below */
    for (size_t i = 0; i < n; i++) {
        char target[256], upper[16];
        concrete(ops[i].path, cfg->kinds, target, sizeof target);
        route_t r;
        route_match(span_of(target), &r);
        size_t m = 0;
        for (; ops[i].method[m] && m + 1 < sizeof upper; m++)
            upper[m] = (char)toupper((unsigned char)ops[i].method[m]);
        upper[m] = '\0';
        bool ok = r.id == ops[i].route && route_allows(r.id, span_of(upper)) &&
                  json_object_get(json_object_get(paths, ops[i].path), ops[i].method) != NULL;
        if (!ok)
            fprintf(stderr, "OpenAPI %s %s: the router says %s\n", ops[i].method, ops[i].path, route_name(r.id));
        CHECK(ok);
    }
    json_decref(doc);
}

void test_openapi(void)
{
    kinds_t kinds;
    char err[128];
    CHECK(kinds_parse(&kinds, "like,love,wow", err, sizeof err) == 0);
    openapi_config_t cfg = {.kinds = &kinds, .dev_mode = true, .files = ui_files, .nfiles = ui_files_count};
    check_config(&cfg);
    cfg.dev_mode = false;
    cfg.many = true;
    check_config(&cfg);
    /* The configuration shows: kinds as the enum, the security scheme of the mode. */
    json_t *doc = openapi_build(&cfg);
    json_t *kind = json_object_get(json_object_get(json_object_get(doc, "components"), "schemas"), "Kind");
    CHECK(json_array_size(json_object_get(kind, "enum")) == 3);
    json_t *schemes = json_object_get(json_object_get(doc, "components"), "securitySchemes");
    CHECK(json_object_get(schemes, "bearer") && !json_object_get(schemes, "devUser"));
    json_decref(doc);
    /* Access decided by the configuration: the security and the 403 follow it. */
    cfg.route_access[ROUTE_HOT] = OPENAPI_ACCESS_PUBLIC;
    cfg.route_access[ROUTE_ITEM] = OPENAPI_ACCESS_OWNER;
    doc = openapi_build(&cfg);
    json_t *hot = json_object_get(json_object_get(json_object_get(doc, "paths"), "/v1/admin/hot"), "get");
    json_t *item = json_object_get(json_object_get(json_object_get(doc, "paths"), "/v1/items/{item}"), "get");
    CHECK(json_array_size(json_object_get(hot, "security")) == 2); /* [{}, bearer]: optional */
    CHECK(!json_object_get(json_object_get(hot, "responses"), "403"));
    CHECK(json_array_size(json_object_get(item, "security")) == 1);
    CHECK(json_object_get(json_object_get(item, "responses"), "403") != NULL);
    json_decref(doc);
}
