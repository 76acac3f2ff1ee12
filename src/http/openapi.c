/* openapi.c — GET /v1/openapi.json: the operations of the document (one line each in ops[] below,
 * a route of router.h with a method) and their assembly with the components of openapi_schemas.c
 * into one OpenAPI 3.1 document, built once at start-up from the running configuration. */
#include <stdio.h>
#include <string.h>

#include "http/openapi.h"

/* Who may call an operation. */
typedef enum {
    ACCESS_NONE,   /* no authentication is read at all (health, metrics, this document, the UI files) */
    ACCESS_PUBLIC, /* anyone; a user, when given, is checked and adds the viewer's state */
    ACCESS_USER,   /* a user */
    ACCESS_OWNER,  /* the user the path names, or an admin */
    ACCESS_ADMIN,  /* an admin */
} access_t;

/* Errors every route may answer (before its handler), and those of a family of routes. Each is
 * "STATUS:code", separated by spaces. */
#define ERRORS_ANY "400:invalid-framing 400:invalid-parameter 414:uri-too-long 431:headers-too-large 500:internal"
#define ERRORS_DEV "403:forbidden"            /* development mode: a Host that is not loopback */
#define ERRORS_IDENTIFY "401:unauthenticated" /* a bad token, or none where one is needed */
#define ERRORS_DEV_USER "400:invalid-user-id"
#define ERRORS_STORE "503:overloaded 503:unavailable"
#define ERRORS_WRITE                                                                                                   \
    "400:invalid-item-id 400:invalid-json 400:invalid-reaction 400:invalid-idempotency-key 400:invalid-if-match "      \
    "409:idempotency-key-mismatch 409:idempotency-key-in-use 412:version-mismatch 413:body-too-large "                 \
    "415:unsupported-media-type 403:item-closed 403:reaction-not-allowed 403:too-many-reactions " ERRORS_STORE

#define STATUS_PROBLEM_MIN 400
#define STATUS_PROBLEM_MAX 599

/* Request headers and answer headers of an operation. */
enum {
    HDR_ETAG = 1 << 0,      /* the answer carries ETag */
    HDR_IDEM = 1 << 1,      /* takes Idempotency-Key (and may answer Idempotent-Replayed) */
    HDR_IDEM_REQ = 1 << 2,  /* Idempotency-Key required */
    HDR_IF_MATCH = 1 << 3,  /* takes If-Match */
    HDR_FILE_ETAG = 1 << 4, /* the answer has a validator of its bytes: 304 to a matching If-None-Match */
    HDR_CACHE = 1 << 5,     /* a weak ETag of the body, Cache-Control and Vary: 304 to a matching If-None-Match */
};

typedef struct {
    route_id_t route;
    const char *method, *path, *id, *summary;
    access_t access;
    const char *params;  /* names in components.parameters, space-separated */
    const char *request; /* schema of the JSON body, NULL: none ("import": the import's own media types) */
    int status;          /* of the success answer */
    const char *answer;  /* its schema; "text": Prometheus text; "events": server-sent events; NULL: no body */
    unsigned headers;    /* HDR_* */
    const char *errors;  /* besides ERRORS_ANY and the access's own */
} op_desc_t;

/* Every route as built. A new route: one line here, its schemas in openapi_schemas.c. */
static const op_desc_t ops[] = {
    {ROUTE_ITEM, "get", "/v1/items/{item}", "getItem", "An item's counts (and the viewer's state, given a user)",
     ACCESS_PUBLIC, "item ifNoneMatch", NULL, 200, "Item", HDR_CACHE,
     "400:invalid-item-id 429:rate-limited " ERRORS_STORE},
    {ROUTE_ITEMS, "get", "/v1/items", "getItems", "Several items' counts at once (a feed page)", ACCESS_PUBLIC,
     "ids ifNoneMatch", NULL, 200, "Items", HDR_CACHE,
     "400:invalid-item-id 400:too-many-ids 429:rate-limited " ERRORS_STORE},
    {ROUTE_VIEWER, "get", "/v1/viewer", "getViewer",
     "The user's own reaction and version on several items (beside the cacheable counts of GET /v1/items)", ACCESS_USER,
     "ids ifNoneMatch", NULL, 200, "ViewerItems", HDR_CACHE, "400:invalid-item-id 400:too-many-ids " ERRORS_STORE},
    {ROUTE_REACTION, "get", "/v1/items/{item}/reaction", "getReaction", "The user's reaction on an item", ACCESS_USER,
     "item", NULL, 200, "ReactionState", HDR_ETAG, "400:invalid-item-id " ERRORS_STORE},
    {ROUTE_REACTION, "put", "/v1/items/{item}/reaction", "setReaction", "Set the user's reaction", ACCESS_USER,
     "item idempotencyKey ifMatch", "SetReaction", 200, "WriteResult", HDR_ETAG | HDR_IDEM | HDR_IF_MATCH,
     "429:rate-limited " ERRORS_WRITE},
    {ROUTE_REACTION, "delete", "/v1/items/{item}/reaction", "clearReaction", "Clear the user's reaction", ACCESS_USER,
     "item idempotencyKey ifMatch", NULL, 200, "WriteResult", HDR_ETAG | HDR_IDEM | HDR_IF_MATCH,
     "429:rate-limited " ERRORS_WRITE},
    {ROUTE_TOGGLE, "post", "/v1/items/{item}/reaction:toggle", "toggleReaction",
     "Clear the kind if the user holds it, else set (one mode) or add it (many mode)", ACCESS_USER,
     "item idempotencyKeyRequired ifMatch", "Toggle", 200, "WriteResult", HDR_ETAG | HDR_IDEM_REQ | HDR_IF_MATCH,
     "400:idempotency-key-required 429:rate-limited " ERRORS_WRITE},
    {ROUTE_KIND, "put", "/v1/items/{item}/{kind}", "putKind", "Set (one mode) or add (many mode) one kind", ACCESS_USER,
     "item kind idempotencyKey ifMatch", NULL, 200, "WriteResult", HDR_ETAG | HDR_IDEM | HDR_IF_MATCH,
     "429:rate-limited " ERRORS_WRITE},
    {ROUTE_KIND, "delete", "/v1/items/{item}/{kind}", "deleteKind",
     "Clear (one mode: only if it is the user's reaction) or remove (many mode) one kind", ACCESS_USER,
     "item kind idempotencyKey ifMatch", NULL, 200, "WriteResult", HDR_ETAG | HDR_IDEM | HDR_IF_MATCH,
     "429:rate-limited " ERRORS_WRITE},
    {ROUTE_ITEM_REACTIONS, "get", "/v1/items/{item}/reactions", "whoReacted",
     "The users whose reaction on the item is not none, most recent first", ACCESS_ADMIN,
     "item listReaction listLimit after", NULL, 200, "ItemReactions", 0, "400:invalid-item-id " ERRORS_STORE},
    {ROUTE_USER_REACTIONS, "get", "/v1/users/{user}/reactions", "userReactions",
     "The items the user's reaction is set on, most recent first", ACCESS_OWNER, "user listReaction listLimit after",
     NULL, 200, "UserReactions", 0, "400:invalid-user-id " ERRORS_STORE},
    {ROUTE_USER_EXPORT, "get", "/v1/users/{user}/export", "exportUser",
     "Every item the user's reaction is set on, one NDJSON line each, streamed (the user and admins, whatever "
     "--user-reactions says)",
     ACCESS_OWNER, "user", NULL, 200, "export-user", 0, "400:invalid-user-id " ERRORS_STORE},
    {ROUTE_TRENDING, "get", "/v1/trending", "getTrending", "The items whose count of a kind grew most in a window",
     ACCESS_PUBLIC, "reaction window trendingLimit", NULL, 200, "Trending", 0, "429:rate-limited"},
    {ROUTE_CHANGES, "get", "/v1/changes", "getChanges", "Every transition in commit order (long poll)", ACCESS_ADMIN,
     "after changesLimit wait", NULL, 200, "ChangesPage", 0, "410:cursor-expired " ERRORS_STORE},
    {ROUTE_HOT, "get", "/v1/admin/hot", "getHot", "Items written more often than --hot-threshold per second",
     ACCESS_ADMIN, "", NULL, 200, "Hot", 0, ""},
    {ROUTE_RECOUNT, "post", "/v1/admin/recount", "recount", "Recount items from their rows and correct any drift",
     ACCESS_ADMIN, "", "RecountRequest", 200, "RecountResult", 0,
     "400:invalid-json 400:too-many-ids 400:invalid-item-id 413:body-too-large 503:overloaded 503:unavailable"},
    {ROUTE_IMPORT, "post", "/v1/admin/import", "import", "Import reactions as ordinary transitions", ACCESS_ADMIN,
     "onError", "import", 200, "ImportResult", 0,
     "400:import-rejected 413:body-too-large 415:unsupported-media-type " ERRORS_STORE},
    {ROUTE_ADMIN_EXPORT, "get", "/v1/admin/export", "exportAll",
     "Every reaction row as import lines, then the closing line (NDJSON, streamed from one snapshot)", ACCESS_ADMIN, "",
     NULL, 200, "export-all", 0, ERRORS_STORE},
    {ROUTE_ADMIN_USER, "delete", "/v1/admin/users/{user}", "eraseUser",
     "Every reaction of the user becomes none; the user's idempotency records are deleted", ACCESS_ADMIN, "user", NULL,
     200, "Changed", 0, "400:invalid-user-id " ERRORS_STORE},
    {ROUTE_ADMIN_USER, "get", "/v1/admin/users/{user}", "getAdminUser",
     "Whether the user is voided, and how many items their reaction is set on", ACCESS_ADMIN, "user", NULL, 200,
     "AdminUser", 0, "400:invalid-user-id " ERRORS_STORE},
    {ROUTE_USER_VOID, "post", "/v1/admin/users/{user}/void", "voidUser",
     "The user's reactions stop counting (the user sees nothing change); N: the rows that stopped", ACCESS_ADMIN,
     "user", NULL, 200, "Voided", 0, "400:invalid-user-id 409:feature-unavailable " ERRORS_STORE},
    {ROUTE_USER_RESTORE, "post", "/v1/admin/users/{user}/restore", "restoreUser",
     "Everything the voided user holds counts again; N: the rows that count again", ACCESS_ADMIN, "user", NULL, 200,
     "Restored", 0, "400:invalid-user-id 409:feature-unavailable " ERRORS_STORE},
    {ROUTE_ADMIN_ITEM, "delete", "/v1/admin/items/{item}", "eraseItem", "Every reaction on the item becomes none",
     ACCESS_ADMIN, "item", NULL, 200, "Changed", 0, "400:invalid-item-id " ERRORS_STORE},
    {ROUTE_WEBHOOKS, "get", "/v1/admin/webhooks", "listWebhooks", "The webhooks and their delivery state", ACCESS_ADMIN,
     "", NULL, 200, "Webhooks", 0, ERRORS_STORE},
    {ROUTE_WEBHOOKS, "post", "/v1/admin/webhooks", "createWebhook",
     "Push transitions to a URL, from the next one on (HMAC-signed)", ACCESS_ADMIN, "", "WebhookCreate", 201,
     "WebhookCreated", 0, "400:invalid-json 413:body-too-large 415:unsupported-media-type " ERRORS_STORE},
    {ROUTE_WEBHOOK, "delete", "/v1/admin/webhooks/{webhook}", "deleteWebhook", "Remove a webhook", ACCESS_ADMIN,
     "webhook", NULL, 204, NULL, 0, "404:not-found " ERRORS_STORE},
    {ROUTE_WEBHOOK_RESUME, "post", "/v1/admin/webhooks/{webhook}/resume", "resumeWebhook",
     "Restart a failing or expired webhook from a retained cursor", ACCESS_ADMIN, "webhook", "WebhookResume", 200,
     "WebhookResumed", 0, "400:invalid-json 404:not-found 410:cursor-expired 413:body-too-large " ERRORS_STORE},
    {ROUTE_WEBHOOK_SECRET, "post", "/v1/admin/webhooks/{webhook}/secret", "rotateWebhookSecret",
     "A new secret; the one it replaces signs too until previous_valid_until (at most 4 alive)", ACCESS_ADMIN,
     "webhook", NULL, 200, "WebhookSecret", 0, "404:not-found 409:too-many-secrets " ERRORS_STORE},
    {ROUTE_POLICIES, "get", "/v1/admin/policies", "listPolicies", "Every item policy in force", ACCESS_ADMIN, "", NULL,
     200, "Policies", 0, ""},
    {ROUTE_POLICY, "get", "/v1/admin/policies/{target}", "getPolicy", "One item policy", ACCESS_ADMIN, "target", NULL,
     200, "Policy", 0, "404:not-found"},
    {ROUTE_POLICY, "put", "/v1/admin/policies/{target}", "putPolicy",
     "Set the whole policy of an item, a prefix (comment-*) or every item (*)", ACCESS_ADMIN, "target", "PolicyBody",
     200, "Policy", 0,
     "400:invalid-json 400:too-many-policies 409:feature-unavailable 413:body-too-large "
     "415:unsupported-media-type " ERRORS_STORE},
    {ROUTE_POLICY, "delete", "/v1/admin/policies/{target}", "deletePolicy", "Remove a policy", ACCESS_ADMIN, "target",
     NULL, 204, NULL, 0, "404:not-found 409:feature-unavailable " ERRORS_STORE},
    {ROUTE_LIVE, "get", "/v1/live", "live",
     "Live counts (server-sent events): the current counts of each id, then one event per change", ACCESS_PUBLIC, "ids",
     NULL, 200, "events", 0, "400:invalid-item-id 400:too-many-ids 429:rate-limited " ERRORS_STORE},
    {ROUTE_HEALTHZ, "get", "/healthz", "healthz", "The process is up", ACCESS_NONE, "", NULL, 200, "Health", 0, ""},
    {ROUTE_READYZ, "get", "/readyz", "readyz", "The store is open, the pipeline running and writes not failing",
     ACCESS_NONE, "", NULL, 200, "Health", 0, ""},
    {ROUTE_METRICS, "get", "/metrics", "metrics", "Prometheus text format", ACCESS_NONE, "", NULL, 200, "text", 0,
     "503:overloaded"},
    {ROUTE_OPENAPI, "get", "/v1/openapi.json", "openapi", "This document", ACCESS_NONE, "ifNoneMatch", NULL, 200,
     "OpenAPI", HDR_FILE_ETAG, ""},
};
#define NOPS (sizeof ops / sizeof ops[0])

size_t openapi_ops(const openapi_config_t *cfg, openapi_op_t *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < NOPS; i++, n++)
        if (n < cap)
            out[n] = (openapi_op_t){ops[i].route, ops[i].method, ops[i].path};
    for (size_t i = 0; i < cfg->nfiles; i++, n++)
        if (n < cap)
            out[n] = (openapi_op_t){ROUTE_UI, "get", cfg->files[i].path};
    return n;
}

static const char *scheme_name(const openapi_config_t *cfg)
{
    return cfg->dev_mode ? "devUser" : "bearer";
}

static json_t *security_of(const openapi_config_t *cfg, access_t access)
{
    if (access == ACCESS_NONE)
        return json_array();
    json_t *one = json_pack("{s:[]}", scheme_name(cfg));
    if (access == ACCESS_PUBLIC)
        return json_pack("[{},o]", one); /* optional: a user adds the viewer's state */
    return json_pack("[o]", one);
}

/* Appends "STATUS:code …" of list to codes[status] (arrays of code names, no repeats). */
static void add_errors(json_t *codes, const char *list)
{
    while (list && *list) {
        while (*list == ' ')
            list++;
        size_t n = strcspn(list, " ");
        char status[4], code[64];
        if (n > 4 && list[3] == ':' && n - 4 < sizeof code) {
            memcpy(status, list, 3);
            status[3] = '\0';
            memcpy(code, list + 4, n - 4);
            code[n - 4] = '\0';
            json_t *arr = json_object_get(codes, status);
            if (!arr) {
                arr = json_array();
                json_object_set_new(codes, status, arr);
            }
            bool seen = false;
            for (size_t i = 0; i < json_array_size(arr); i++)
                seen |= strcmp(json_string_value(json_array_get(arr, i)), code) == 0;
            if (!seen)
                json_array_append_new(arr, json_string(code));
        }
        list += n;
    }
}

/* One problem answer: its codes as the enum of type, the headers of its status. */
static json_t *problem_response(const char *status, json_t *codes)
{
    json_t *types = json_array();
    char desc[1024] = "", urn[96];
    size_t used = 0;
    bool replayable = false; /* a write that may carry an Idempotency-Key (whose answers are replayed) */
    for (size_t i = 0; i < json_array_size(codes); i++) {
        const char *code = json_string_value(json_array_get(codes, i));
        replayable |= strncmp(code, "idempotency-", 12) == 0 || strcmp(code, "version-mismatch") == 0 ||
                      strcmp(code, "too-many-secrets") == 0;
        snprintf(urn, sizeof urn, "urn:tally:error:%s", code);
        json_array_append_new(types, json_string(urn));
        used += (size_t)snprintf(desc + used, sizeof desc - used, "%s%s", i ? ", " : "", code);
        if (used >= sizeof desc)
            used = sizeof desc - 1;
    }
    json_t *schema = json_pack("{s:[o,{s:{s:{s:o}}}]}", "allOf", openapi_ref("schemas", "Problem"), "properties",
                               "type", "enum", types);
    json_t *r =
        json_pack("{s:s,s:{s:{s:o}}}", "description", desc, "content", "application/problem+json", "schema", schema);
    json_t *headers = json_object();
    if (strcmp(status, "503") == 0 || strcmp(status, "429") == 0)
        json_object_set_new(headers, "Retry-After", openapi_ref("headers", "Retry-After"));
    if (strcmp(status, "401") == 0)
        json_object_set_new(headers, "WWW-Authenticate", openapi_ref("headers", "WWW-Authenticate"));
    if ((strcmp(status, "412") == 0 || strcmp(status, "409") == 0) && replayable)
        json_object_set_new(headers, "Idempotent-Replayed", openapi_ref("headers", "Idempotent-Replayed"));
    if (json_object_size(headers))
        json_object_set_new(r, "headers", headers);
    else
        json_decref(headers);
    return r;
}

/* The problem answers of codes (status → code names) into responses, by status; takes codes. */
static void add_problem_responses(json_t *responses, json_t *codes)
{
    for (int status = STATUS_PROBLEM_MIN; status <= STATUS_PROBLEM_MAX; status++) {
        char key[16];
        snprintf(key, sizeof key, "%d", status);
        json_t *list = json_object_get(codes, key);
        if (list)
            json_object_set_new(responses, key, problem_response(key, list));
    }
    json_decref(codes);
}

static json_t *success_response(const op_desc_t *op)
{
    json_t *content;
    if (!op->answer) /* 204: no body */
        return json_pack("{s:s}", "description", op->summary);
    if (strcmp(op->answer, "text") == 0)
        content = json_pack("{s:{s:{s:s}}}", "text/plain", "schema", "type", "string");
    else if (strcmp(op->answer, "events") == 0) /* GET /v1/live: server-sent events */
        content = json_pack("{s:{s:{s:s,s:s}}}", "text/event-stream", "schema", "type", "string", "description",
                            "retry: 2000, then events \"counts\" whose id: is the change-feed cursor the counts are "
                            "folded up to and whose data: is {\"item\",\"counts\"} (and \"reactors\" in many "
                            "mode, \"policy\" when one applies; counts null while it hides them, and every "
                            "watched item sent again when a policy changes); a \": keep-alive\" comment every "
                            "15 s");
    else if (strcmp(op->answer, "export-user") == 0)
        content = json_pack("{s:{s:{s:s,s:s}}}", "application/x-ndjson", "schema", "type", "string", "description",
                            "one line per item the user's reaction is set on, newest first: {\"item\",\"reaction\","
                            "\"at\"} (\"reactions\" in many mode); streamed as the client reads it");
    else if (strcmp(op->answer, "export-all") == 0)
        content = json_pack("{s:{s:{s:s,s:s}}}", "application/x-ndjson", "schema", "type", "string", "description",
                            "one import line per reaction row that is not none, {\"item\",\"user\",\"reaction\"} "
                            "(\"reactions\" in many mode), in key order, then {\"export\":\"complete\","
                            "\"lines\":N}; an export cut by --export-timeout (or shutdown) has no closing line and "
                            "no end of body. POST /v1/admin/import reads it back");
    else
        content = json_pack("{s:{s:o}}", "application/json", "schema", openapi_ref("schemas", op->answer));
    json_t *r = json_pack("{s:s,s:o}", "description", op->summary, "content", content);
    json_t *headers = json_object();
    if (op->headers & HDR_ETAG)
        json_object_set_new(headers, "ETag", openapi_ref("headers", "ETag"));
    if (op->headers & HDR_FILE_ETAG)
        json_object_set_new(headers, "ETag", openapi_ref("headers", "FileETag"));
    if (op->headers & HDR_CACHE) {
        json_object_set_new(headers, "ETag", openapi_ref("headers", "WeakETag"));
        json_object_set_new(headers, "Cache-Control", openapi_ref("headers", "Cache-Control"));
        json_object_set_new(headers, "Vary", openapi_ref("headers", "Vary"));
    }
    if (op->headers & (HDR_IDEM | HDR_IDEM_REQ))
        json_object_set_new(headers, "Idempotent-Replayed", openapi_ref("headers", "Idempotent-Replayed"));
    if (json_object_size(headers))
        json_object_set_new(r, "headers", headers);
    else
        json_decref(headers);
    return r;
}

static json_t *request_body(const char *schema)
{
    if (strcmp(schema, "import") == 0)
        return json_pack("{s:b,s:{s:{s:{s:s}},s:{s:{s:s}}}}", "required", true, "content", "application/x-ndjson",
                         "schema", "type", "string", "text/csv", "schema", "type", "string");
    bool optional = strcmp(schema, "RecountRequest") == 0 || strcmp(schema, "WebhookResume") == 0 ||
                    strcmp(schema, "PolicyBody") == 0;
    return json_pack("{s:b,s:{s:{s:o}}}", "required", !optional, "content", "application/json", "schema",
                     openapi_ref("schemas", schema));
}

/* The tag of an operation, from who may call it and whether it writes. */
static const char *tag_of(const op_desc_t *op)
{
    if (op->access == ACCESS_ADMIN)
        return "admin";
    if (op->access == ACCESS_NONE)
        return "operations";
    return strcmp(op->method, "get") == 0 ? "reads" : "writes";
}

static json_t *tags_of(void)
{
    return json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "name", "reads", "description",
                     "counts and the viewer's state", "name", "writes", "description",
                     "reactions, with Idempotency-Key and If-Match", "name", "admin", "description",
                     "admin rights: the change feed, hot items, recount, import, export, erasure, item policies",
                     "name", "operations", "description", "health, metrics, this document", "name", "pages",
                     "description", "the demo page, the operator's page and the JavaScript client (static files)");
}

/* Who may call op: the table's word, unless the configuration decides for its route. */
static access_t access_of(const openapi_config_t *cfg, const op_desc_t *op)
{
    switch (op->route < ROUTE_COUNT ? cfg->route_access[op->route] : OPENAPI_ACCESS_TABLE) {
    case OPENAPI_ACCESS_PUBLIC:
        return ACCESS_PUBLIC;
    case OPENAPI_ACCESS_USERS:
        return ACCESS_USER;
    case OPENAPI_ACCESS_OWNER:
        return ACCESS_OWNER;
    case OPENAPI_ACCESS_ADMIN:
        return ACCESS_ADMIN;
    case OPENAPI_ACCESS_TABLE:
        break;
    }
    return op->access;
}

static json_t *operation(const openapi_config_t *cfg, const op_desc_t *op)
{
    access_t access = access_of(cfg, op);
    json_t *o = json_pack("{s:s,s:s,s:[s],s:o}", "operationId", op->id, "summary", op->summary, "tags", tag_of(op),
                          "security", security_of(cfg, access));
    if (access == ACCESS_OWNER)
        json_object_set_new(o, "description", json_string("only the user the path names, or an admin"));
    json_t *params = json_array();
    const char *p = op->params;
    while (p && *p) {
        size_t n = strcspn(p, " ");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        json_array_append_new(params, openapi_ref("parameters", name));
        p += n;
        while (*p == ' ')
            p++;
    }
    json_object_set_new(o, "parameters", params);
    if (op->request)
        json_object_set_new(o, "requestBody", request_body(op->request));
    json_t *codes = json_object();
    add_errors(codes, ERRORS_ANY);
    if (cfg->dev_mode)
        add_errors(codes, ERRORS_DEV);
    if (access != ACCESS_NONE) {
        add_errors(codes, ERRORS_IDENTIFY);
        if (cfg->dev_mode)
            add_errors(codes, ERRORS_DEV_USER);
    }
    if (access == ACCESS_OWNER)
        add_errors(codes, "403:forbidden");
    if (access == ACCESS_ADMIN && op->access == ACCESS_ADMIN) /* an admin route: on the admin listener only */
        add_errors(codes, cfg->admin_listen ? "403:forbidden 404:not-found" : "403:forbidden");
    else if (access == ACCESS_ADMIN)
        add_errors(codes, "403:forbidden");
    add_errors(codes, op->errors);
    char status[8];
    snprintf(status, sizeof status, "%d", op->status);
    json_t *responses = json_pack("{s:o}", status, success_response(op));
    if (op->headers & HDR_FILE_ETAG)
        json_object_set_new(responses, "304", json_pack("{s:s}", "description", "unchanged since If-None-Match"));
    if (op->headers & HDR_CACHE)
        json_object_set_new(responses, "304",
                            json_pack("{s:s,s:{s:o,s:o,s:o}}", "description",
                                      "unchanged since If-None-Match: no body, the same validator and Cache-Control",
                                      "headers", "ETag", openapi_ref("headers", "WeakETag"), "Cache-Control",
                                      openapi_ref("headers", "Cache-Control"), "Vary", openapi_ref("headers", "Vary")));
    add_problem_responses(responses, codes);
    if (op->route == ROUTE_READYZ) /* not ready: the health body, not a problem */
        json_object_set_new(responses, "503",
                            json_pack("{s:s,s:{s:o},s:{s:{s:o}}}", "description",
                                      "not ready: starting, stopping, the store unreachable or writes failing",
                                      "headers", "Retry-After", openapi_ref("headers", "Retry-After"), "content",
                                      "application/json", "schema", openapi_ref("schemas", "Health")));
    json_object_set_new(o, "responses", responses);
    return o;
}

/* GET of one static file: 200 with its bytes, 304 to If-None-Match. */
static json_t *file_operation(const ui_file_t *f, size_t index)
{
    char id[32], type[64];
    snprintf(id, sizeof id, "uiFile%zu", index);
    snprintf(type, sizeof type, "%.*s", (int)strcspn(f->content_type, ";"), f->content_type);
    json_t *ok = json_pack("{s:s,s:{s:o},s:{s:{s:{s:s}}}}", "description", "the file", "headers", "ETag",
                           openapi_ref("headers", "FileETag"), "content", type, "schema", "type", "string");
    json_t *responses = json_pack("{s:o,s:{s:s}}", "200", ok, "304", "description", "unchanged since If-None-Match");
    json_t *any = json_object();
    add_errors(any, ERRORS_ANY);
    add_problem_responses(responses, any);
    return json_pack("{s:s,s:s,s:[s],s:[],s:[o],s:o}", "operationId", id, "summary", "A static file of the web pages",
                     "tags", "pages", "security", "parameters", openapi_ref("parameters", "ifNoneMatch"), "responses",
                     responses);
}

static json_t *security_schemes(const openapi_config_t *cfg)
{
    if (cfg->dev_mode)
        return json_pack("{s:{s:s,s:s,s:s,s:s}}", "devUser", "type", "apiKey", "in", "header", "name", "X-User-Id",
                         "description",
                         "development mode: the user is this header (X-User-Id: admin has admin rights); only "
                         "requests whose Host is a loopback name are answered");
    return json_pack("{s:{s:s,s:s,s:s,s:s}}", "bearer", "type", "http", "scheme", "bearer", "bearerFormat", "JWT",
                     "description",
                     "a JWT, HS256 with the shared secret or RS256, PS256, ES256, EdDSA with the identity "
                     "provider's keys: the user is the user claim (sub by default), exp and nbf are enforced; "
                     "admin rights need the admin claim (\"role\":\"admin\" by default)");
}

static json_t *info_of(const openapi_config_t *cfg)
{
    char desc[1024], kinds[KINDS_MAX * (KIND_NAME_MAX + 2)] = "";
    size_t used = 0;
    for (int i = 1; i <= cfg->kinds->count && used < sizeof kinds; i++)
        used +=
            (size_t)snprintf(kinds + used, sizeof kinds - used, "%s%s", i > 1 ? ", " : "", kinds_name(cfg->kinds, i));
    snprintf(desc, sizeof desc,
             "tally, a reactions service. This server: kinds %s; reaction mode %s; %s; %s%s. Ids are sent raw in "
             "paths and in ids= (the id alphabet needs no encoding, and tally refuses percent-encoding). Every GET "
             "also answers HEAD.",
             kinds, cfg->many ? "many (a set of kinds per user and item)" : "one (one kind per user and item)",
             cfg->dev_mode ? "development mode (the user is the X-User-Id header)" : "users authenticate with a JWT",
             cfg->rate_limited ? "writes are rate-limited per user" : "no write rate limit",
             cfg->admin_listen ? "; the admin routes are served by a second listener only" : "");
    return json_pack("{s:s,s:s,s:s,s:{s:s,s:s}}", "title", "tally", "version", cfg->version ? cfg->version : "1",
                     "description", desc, "license", "name", "MIT", "identifier", "MIT");
}

json_t *openapi_build(const openapi_config_t *cfg)
{
    json_t *paths = json_object();
    for (size_t i = 0; i < NOPS; i++) {
        json_t *item = json_object_get(paths, ops[i].path);
        if (!item) {
            item = json_object();
            json_object_set_new(paths, ops[i].path, item);
        }
        json_object_set_new(item, ops[i].method, operation(cfg, &ops[i]));
    }
    for (size_t i = 0; i < cfg->nfiles; i++)
        json_object_set_new(paths, cfg->files[i].path, json_pack("{s:o}", "get", file_operation(&cfg->files[i], i)));
    json_t *components = openapi_components(cfg);
    if (components)
        json_object_set_new(components, "securitySchemes", security_schemes(cfg));
    json_t *ext = json_pack("{s:o,s:s,s:b,s:b}", "kinds", json_array(), "reaction-mode", cfg->many ? "many" : "one",
                            "development-mode", cfg->dev_mode, "admin-listener", cfg->admin_listen);
    for (int i = 1; ext && i <= cfg->kinds->count; i++)
        json_array_append_new(json_object_get(ext, "kinds"), json_string(kinds_name(cfg->kinds, i)));
    /* The server is the one that serves the document: a relative URL. */
    return json_pack("{s:s,s:o,s:[{s:s}],s:o,s:o,s:o,s:o}", "openapi", "3.1.0", "info", info_of(cfg), "servers", "url",
                     "/", "tags", tags_of(), "paths", paths, "components", components, "x-tally", ext);
}
