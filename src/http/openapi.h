/* openapi.h — the OpenAPI 3.1 description of this API as built (GET /v1/openapi.json), generated
 * once at start-up from the running configuration: its kinds, reaction mode, authentication and
 * access rules. Pure: no I/O, no threads; the tests build it too. */
#ifndef TALLY_HTTP_OPENAPI_H
#define TALLY_HTTP_OPENAPI_H

#include <jansson.h>

#include "core/kinds.h"
#include "http/router.h"
#include "http/ui_files.h"

/* Who may call a route whose access a flag decides (--who-reacted, --user-reactions). */
typedef enum {
    OPENAPI_ACCESS_TABLE,  /* as openapi.c's table says (every route without such a flag) */
    OPENAPI_ACCESS_PUBLIC, /* anyone; a user, when given, is checked */
    OPENAPI_ACCESS_USERS,  /* any authenticated user */
    OPENAPI_ACCESS_OWNER,  /* the user the path names, and admins */
    OPENAPI_ACCESS_ADMIN,  /* admins */
} openapi_access_t;

/* What the document depends on. */
typedef struct {
    const kinds_t *kinds;
    bool many;         /* --reaction-mode many: sets of kinds (arrays), else one kind per user */
    bool dev_mode;     /* the user is the X-User-Id header; else a Bearer JWT */
    bool admin_listen; /* the admin routes are served by a second listener */
    bool rate_limited; /* writes are rate-limited per user (429) */
    const char *version;
    openapi_access_t route_access[ROUTE_COUNT]; /* per route, where the configuration decides who may call it */
    const ui_file_t *files;                     /* the static files of /ui/, each a GET of its own */
    size_t nfiles;
} openapi_config_t;

/* One operation of the document: a route of router.h with one of its methods. */
typedef struct {
    route_id_t route;
    const char *method; /* lower case, as OpenAPI's key: "get", "put" */
    const char *path;   /* the path template: "/v1/items/{item}/reaction" */
} openapi_op_t;

/* Every operation the document describes, in its order (the UI files included): fills out with at
 * most cap of them and returns how many there are. */
size_t openapi_ops(const openapi_config_t *cfg, openapi_op_t *out, size_t cap);

/* Builds the document. Returns a new reference, or NULL when out of memory. */
json_t *openapi_build(const openapi_config_t *cfg);

/* --- for openapi.c from openapi_schemas.c --- */

/* components.schemas, components.parameters, components.headers and components.responses. */
json_t *openapi_components(const openapi_config_t *cfg);

/* {"$ref":"#/components/<section>/<name>"} */
json_t *openapi_ref(const char *section, const char *name);

#endif
