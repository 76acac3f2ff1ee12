/* openapi_schemas.c — the components of the OpenAPI document: schemas of every body (kinds and the
 * reaction mode from the configuration), the shared parameters and headers. A new route's body is
 * one function here plus its line in schemas_of() (and its operation in openapi.c). */
#include <stdio.h>

#include "core/ids.h"
#include "http/openapi.h"

#define ID_PATTERN "^[A-Za-z0-9._:~-]{1,128}$"
#define PROBLEM_TYPE_PATTERN "^urn:tally:error:[a-z0-9-]+$"
#define IDEMPOTENCY_KEY_MAX 257 /* 255 characters, and the two quotes of the structured form */
#define CHANGES_LIMIT_MAX 1000
#define CHANGES_WAIT_MAX 30
#define TRENDING_LIMIT_MAX 100
#define OPENAPI_IDS_MAX 100 /* BATCH_IDS_MAX of app.h: one feed page */

json_t *openapi_ref(const char *section, const char *name)
{
    char ref[128];
    snprintf(ref, sizeof ref, "#/components/%s/%s", section, name);
    return json_pack("{s:s}", "$ref", ref);
}

static json_t *schema_ref(const char *name)
{
    return openapi_ref("schemas", name);
}

static json_t *integer_min0(void)
{
    return json_pack("{s:s,s:i}", "type", "integer", "minimum", 0);
}

/* An object schema; required is a NULL-terminated list of names. */
static json_t *object(json_t *properties, const char *const *required, bool closed)
{
    json_t *req = json_array();
    for (size_t i = 0; required && required[i]; i++)
        json_array_append_new(req, json_string(required[i]));
    return json_pack("{s:s,s:o,s:o,s:b}", "type", "object", "properties", properties, "required", req,
                     "additionalProperties", !closed);
}

#define REQUIRED(...) ((const char *const[]){__VA_ARGS__, NULL})

static json_t *kinds_enum(const kinds_t *kinds, bool with_none)
{
    json_t *e = json_array();
    for (int i = with_none ? 0 : 1; i <= kinds->count; i++)
        json_array_append_new(e, json_string(kinds_name(kinds, i)));
    return e;
}

/* Counts: one number per configured kind, zeros included. */
static json_t *counts_schema(const kinds_t *kinds)
{
    json_t *props = json_object(), *req = json_array();
    for (int i = 1; i <= kinds->count; i++) {
        json_object_set_new(props, kinds_name(kinds, i), integer_min0());
        json_array_append_new(req, json_string(kinds_name(kinds, i)));
    }
    return json_pack("{s:s,s:s,s:o,s:o,s:b}", "type", "object", "description",
                     "one number per configured kind, zeros included", "properties", props, "required", req,
                     "additionalProperties", false);
}

/* The user's state on an item: {reaction, version}, or in many mode {reactions:[…], version}. */
static json_t *state_props(bool many, json_t *props)
{
    json_object_set_new(props, many ? "reactions" : "reaction", schema_ref(many ? "ReactionSet" : "Reaction"));
    json_object_set_new(props, "version", integer_min0());
    return props;
}

static json_t *item_schema(bool many)
{
    json_t *viewer =
        object(state_props(many, json_object()), REQUIRED(many ? "reactions" : "reaction", "version"), true);
    json_object_set_new(viewer, "description", json_string("present only when a user is known"));
    json_t *counts = json_pack("{s:[o,{s:s}],s:s}", "oneOf", schema_ref("Counts"), "type", "null", "description",
                               "null when the item's policy hides its counts (but for admins)");
    json_t *props = json_pack("{s:o,s:o,s:o,s:o}", "item", schema_ref("Id"), "counts", counts, "policy",
                              schema_ref("ItemPolicy"), "viewer", viewer);
    if (many)
        json_object_set_new(props, "reactors",
                            json_pack("{s:[s,s],s:i,s:s}", "type", "integer", "null", "minimum", 0, "description",
                                      "null when the counts are hidden"));
    return object(props, many ? REQUIRED("item", "counts", "reactors") : REQUIRED("item", "counts"), true);
}

static json_t *write_result_schema(bool many)
{
    json_t *props = state_props(many, json_pack("{s:o}", "item", schema_ref("Id")));
    json_object_set_new(props, "previous", schema_ref(many ? "ReactionSet" : "Reaction"));
    json_object_set_new(props, "changed", json_pack("{s:s}", "type", "boolean"));
    json_object_set_new(props, "cursor",
                        json_pack("{s:s,s:s}", "type", "string", "description",
                                  "the change feed's cursor of this write's transition, when it "
                                  "changed something"));
    json_object_set_new(
        props, "counts",
        json_pack("{s:[o,{s:s}],s:s}", "oneOf", schema_ref("Counts"), "type", "null", "description",
                  "the item's counts exactly as folding the change feed up to and including cursor "
                  "gives (this write and everything before it); when nothing changed, the counts at "
                  "some moment during the request (folded with each entry's counted bits); to a voided user, "
                  "with their own reaction added back, as their reads show them; null when the item's "
                  "policy hides its counts (but for admins); a replay carries the first answer's"));
    if (many)
        json_object_set_new(props, "reactors",
                            json_pack("{s:[s,s],s:i,s:s}", "type", "integer", "null", "minimum", 0, "description",
                                      "users whose set is not empty, as counts; null when the counts are hidden"));
    return object(props,
                  many ? REQUIRED("item", "reactions", "previous", "version", "changed", "counts", "reactors")
                       : REQUIRED("item", "reaction", "previous", "version", "changed", "counts"),
                  true);
}

static json_t *set_body_schema(bool many)
{
    json_t *one = object(json_pack("{s:o}", "reaction", schema_ref("Reaction")), REQUIRED("reaction"), true);
    if (!many)
        return one;
    json_t *set = object(json_pack("{s:o}", "reactions", schema_ref("ReactionSet")), REQUIRED("reactions"), true);
    return json_pack("{s:[o,o]}", "oneOf", one, set);
}

static json_t *problem_schema(bool many)
{
    json_t *rejected = json_pack("{s:s,s:o}", "type", "array", "items", schema_ref("ImportRejection"));
    json_t *props =
        json_pack("{s:{s:s,s:s},s:{s:s},s:{s:s,s:i,s:i},s:{s:s},s:o,s:o}", "type", "type", "string", "pattern",
                  PROBLEM_TYPE_PATTERN, "title", "type", "string", "status", "type", "integer", "minimum", 400,
                  "maximum", 599, "detail", "type", "string", "version", integer_min0(), "rejected", rejected);
    json_object_set_new(props, "allowed",
                        json_pack("{s:s,s:o,s:s}", "type", "array", "items", schema_ref("Kind"), "description",
                                  "reaction-not-allowed: the kinds a write may add"));
    json_object_set_new(props, "max_kinds",
                        json_pack("{s:s,s:s}", "type", "integer", "description",
                                  "too-many-reactions: the kinds one user may hold on the item"));
    json_object_set_new(props, many ? "reactions" : "reaction", schema_ref(many ? "ReactionSet" : "Reaction"));
    json_t *p = object(props, REQUIRED("type", "title", "status"), false);
    json_object_set_new(p, "description",
                        json_string("RFC 9457 problem details; the last segment of type is the stable error code. "
                                    "412 version-mismatch carries the current state; 400 import-rejected the rejected "
                                    "lines."));
    return p;
}

static json_t *change_schema(bool many)
{
    const char *state = many ? "ReactionSet" : "Reaction";
    json_t *props =
        json_pack("{s:{s:s},s:o,s:o,s:o,s:o,s:o,s:{s:s,s:s}}", "cursor", "type", "string", "item", schema_ref("Id"),
                  "user", schema_ref("Id"), "from", schema_ref(state), "to", schema_ref(state), "version",
                  integer_min0(), "at", "type", "string", "format", "date-time");
    /* whether the row counted before and after the entry (absent: [true,true]); a consumer folds an
     * entry as minus from if it counted before, plus to if it counts after */
    json_object_set_new(props, "counted",
                        json_pack("{s:s,s:{s:s},s:i,s:i,s:s}", "type", "array", "items", "type", "boolean", "minItems",
                                  2, "maxItems", 2, "description",
                                  "[counted before, counted after]; absent means [true,true]. Fold: minus from if it "
                                  "counted before, plus to if it counts after. A void or restore has from equal to "
                                  "to and the version unchanged."));
    return object(props, REQUIRED("cursor", "item", "user", "from", "to", "version", "at"), true);
}

/* Adds examples (a JSON Schema 2020-12 keyword; checked against their schema by the tests). */
static void examples(json_t *schemas, const char *name, json_t *list)
{
    json_object_set_new(json_object_get(schemas, name), "examples", list);
}

/* Examples in the configured kinds: k1 the first kind, k2 the second (or the first again). */
static void add_examples(json_t *s, const openapi_config_t *cfg)
{
    const kinds_t *k = cfg->kinds;
    const char *k1 = kinds_name(k, 1), *k2 = kinds_name(k, k->count > 1 ? 2 : 1);
    json_t *counts = json_object();
    for (int i = 1; i <= k->count; i++)
        json_object_set_new(counts, kinds_name(k, i), json_integer(i == 1 ? 10 : i == 2 ? 2 : 0));
    json_t *item = json_pack("{s:s,s:O}", "item", "post-1", "counts", counts);
    if (cfg->many) {
        json_object_set_new(item, "reactors", json_integer(11));
        json_object_set_new(item, "viewer", json_pack("{s:[s],s:i}", "reactions", k1, "version", 3));
        examples(s, "WriteResult",
                 json_pack("[{s:s,s:[s],s:[],s:i,s:b,s:s,s:O,s:i}]", "item", "post-1", "reactions", k1, "previous",
                           "version", 4, "changed", true, "cursor", "8812", "counts", counts, "reactors", 11));
        examples(s, "SetReaction", json_pack("[{s:s},{s:[s]}]", "reaction", k1, "reactions", k2));
        examples(s, "ReactionState", json_pack("[{s:s,s:[s],s:i}]", "item", "post-1", "reactions", k1, "version", 3));
        examples(s, "ViewerItems",
                 json_pack("[{s:[{s:s,s:[s],s:i},{s:s,s:[],s:i}]}]", "items", "item", "post-1", "reactions", k1,
                           "version", 3, "item", "post-2", "reactions", "version", 0));
    } else {
        json_object_set_new(item, "viewer", json_pack("{s:s,s:i}", "reaction", k1, "version", 3));
        examples(s, "WriteResult",
                 json_pack("[{s:s,s:s,s:s,s:i,s:b,s:s,s:O}]", "item", "post-1", "reaction", k2, "previous", k1,
                           "version", 4, "changed", true, "cursor", "8812", "counts", counts));
        examples(s, "SetReaction", json_pack("[{s:s},{s:s}]", "reaction", k1, "reaction", "none"));
        examples(s, "ReactionState", json_pack("[{s:s,s:s,s:i}]", "item", "post-1", "reaction", k1, "version", 3));
        examples(s, "ViewerItems",
                 json_pack("[{s:[{s:s,s:s,s:i},{s:s,s:s,s:i}]}]", "items", "item", "post-1", "reaction", k1, "version",
                           3, "item", "post-2", "reaction", "none", "version", 0));
    }
    examples(s, "Item", json_pack("[O]", item));
    examples(s, "Items", json_pack("[{s:[O]}]", "items", item));
    json_decref(item);
    json_decref(counts);
    examples(s, "Problem",
             json_pack("[{s:s,s:s,s:i,s:s}]", "type", "urn:tally:error:idempotency-key-mismatch", "title",
                       "idempotency-key-mismatch", "status", 409, "detail",
                       "this Idempotency-Key was used with another request"));
    examples(s, "Trending",
             json_pack("[{s:s,s:s,s:[{s:s,s:i}],s:f}]", "window", "1h", "reaction", k1, "items", "item", "post-1",
                       "gain", 123, "error_bound", 0.0));
    examples(s, "Toggle", json_pack("[{s:s}]", "reaction", k2));
}

/* A page of a list: {<of>: id, reactions: [{<each>: id, reaction (or reactions), at}], next?}. */
static json_t *list_schema(bool many, const char *of, const char *each)
{
    json_t *entry_props =
        json_pack("{s:o,s:{s:s,s:s}}", each, schema_ref("Id"), "at", "type", "string", "format", "date-time");
    json_object_set_new(entry_props, many ? "reactions" : "reaction", schema_ref(many ? "ReactionSet" : "Kind"));
    json_t *entry = object(entry_props, REQUIRED(each, many ? "reactions" : "reaction", "at"), true);
    json_t *props =
        json_pack("{s:o,s:{s:s,s:o},s:{s:s,s:s}}", of, schema_ref("Id"), "reactions", "type", "array", "items", entry,
                  "next", "type", "string", "description", "present when there may be more: pass it as after");
    return object(props, REQUIRED(of, "reactions"), true);
}

/* The schemas section: every body of every route. */
static json_t *schemas_of(const openapi_config_t *cfg)
{
    const kinds_t *k = cfg->kinds;
    json_t *s = json_object();
    json_object_set_new(s, "Id",
                        json_pack("{s:s,s:s,s:s}", "type", "string", "pattern", ID_PATTERN, "description",
                                  "1-128 bytes of A-Z a-z 0-9 . _ : ~ - (not . or ..); sent raw, never "
                                  "percent-encoded (tally refuses percent-encoding)"));
    json_object_set_new(s, "Kind", json_pack("{s:s,s:o}", "type", "string", "enum", kinds_enum(k, false)));
    json_object_set_new(s, "Reaction",
                        json_pack("{s:s,s:o,s:s}", "type", "string", "enum", kinds_enum(k, true), "description",
                                  "a configured kind, or none"));
    if (cfg->many)
        json_object_set_new(s, "ReactionSet",
                            json_pack("{s:s,s:o,s:b,s:s}", "type", "array", "items", schema_ref("Kind"), "uniqueItems",
                                      true, "description", "kinds in the configured order"));
    json_object_set_new(s, "Counts", counts_schema(k));
    json_object_set_new(s, "Item", item_schema(cfg->many));
    /* with several shards, an item whose shard cannot be reached is {"item":…,"unavailable":true} */
    json_object_set_new(s, "UnavailableItem",
                        object(json_pack("{s:o,s:{s:s,s:[b]}}", "item", schema_ref("Id"), "unavailable", "type",
                                         "boolean", "enum", true),
                               REQUIRED("item", "unavailable"), true));
    json_object_set_new(s, "Items",
                        object(json_pack("{s:{s:s,s:{s:[o,o]}}}", "items", "type", "array", "items", "oneOf",
                                         schema_ref("Item"), schema_ref("UnavailableItem")),
                               REQUIRED("items"), true));
    json_object_set_new(s, "ReactionState",
                        object(state_props(cfg->many, json_pack("{s:o}", "item", schema_ref("Id"))),
                               REQUIRED("item", cfg->many ? "reactions" : "reaction", "version"), true));
    json_object_set_new(s, "ViewerItems",
                        object(json_pack("{s:{s:s,s:{s:[o,o]},s:s}}", "items", "type", "array", "items", "oneOf",
                                         schema_ref("ReactionState"), schema_ref("UnavailableItem"), "description",
                                         "one per id, in request order; an item the user never reacted to has "
                                         "no reaction and version 0"),
                               REQUIRED("items"), true));
    json_object_set_new(s, "WriteResult", write_result_schema(cfg->many));
    json_object_set_new(s, "SetReaction", set_body_schema(cfg->many));
    json_object_set_new(s, "Toggle",
                        object(json_pack("{s:o}", "reaction", schema_ref("Kind")), REQUIRED("reaction"), true));
    json_object_set_new(s, "Problem", problem_schema(cfg->many));
    json_object_set_new(s, "Change", change_schema(cfg->many));
    json_object_set_new(s, "ChangesPage",
                        object(json_pack("{s:{s:s,s:o},s:{s:s}}", "changes", "type", "array", "items",
                                         schema_ref("Change"), "next", "type", "string"),
                               REQUIRED("changes", "next"), false));
    json_t *trend = object(json_pack("{s:o,s:{s:s}}", "item", schema_ref("Id"), "gain", "type", "integer"),
                           REQUIRED("item", "gain"), true);
    json_object_set_new(s, "Trending",
                        object(json_pack("{s:{s:s,s:[s,s,s]},s:o,s:{s:s,s:o},s:{s:s,s:i,s:s}}", "window", "type",
                                         "string", "enum", "1m", "1h", "24h", "reaction", schema_ref("Kind"), "items",
                                         "type", "array", "items", trend, "error_bound", "type", "number", "minimum", 0,
                                         "description", "a reported gain is at most this much above the true one"),
                               REQUIRED("window", "reaction", "items"), true));
    json_t *hot =
        object(json_pack("{s:o,s:{s:s,s:i}}", "item", schema_ref("Id"), "rate", "type", "number", "minimum", 0),
               REQUIRED("item", "rate"), true);
    json_object_set_new(
        s, "Hot", object(json_pack("{s:{s:s,s:o}}", "items", "type", "array", "items", hot), REQUIRED("items"), true));
    json_object_set_new(
        s, "RecountRequest",
        object(json_pack("{s:{s:s,s:o,s:i}}", "items", "type", "array", "items", schema_ref("Id"), "maxItems", 10000),
               NULL, true));
    json_t *drift = object(json_pack("{s:o,s:o,s:{s:s},s:{s:s}}", "item", schema_ref("Id"), "kind", schema_ref("Kind"),
                                     "counted", "type", "integer", "stored", "type", "integer"),
                           REQUIRED("item", "kind", "counted", "stored"), true);
    json_object_set_new(
        s, "RecountResult",
        object(json_pack("{s:o,s:o,s:{s:s,s:o},s:o}", "checked", integer_min0(), "corrected", integer_min0(), "drift",
                         "type", "array", "items", drift, "list_mismatches", integer_min0()),
               REQUIRED("checked", "corrected", "drift"), true));
    json_object_set_new(s, "ImportRejection",
                        object(json_pack("{s:o,s:{s:s}}", "line", integer_min0(), "error", "type", "string"),
                               REQUIRED("line", "error"), true));
    json_object_set_new(
        s, "ImportResult",
        object(json_pack("{s:o,s:o,s:o,s:{s:s,s:o}}", "read", integer_min0(), "applied", integer_min0(), "unchanged",
                         integer_min0(), "rejected", "type", "array", "items", schema_ref("ImportRejection")),
               REQUIRED("read", "applied", "unchanged", "rejected"), true));
    json_t *time_or_null = json_pack("{s:[s,s],s:s}", "type", "string", "null", "format", "date-time");
    json_object_set_new(
        s, "WebhookState",
        object(json_pack("{s:{s:s},s:{s:s},s:O,s:{s:s},s:{s:s,s:i},s:O,s:{s:[s,s],s:[s,s,s,s,s,s,s,n]},s:{s:[s,s,s]}}",
                         "id", "type", "string", "url", "type", "string", "created", time_or_null, "delivered", "type",
                         "string", "lag_s", "type", "number", "minimum", 0, "failing_since", time_or_null, "last_error",
                         "type", "string", "null", "enum", "timeout", "connect", "tls", "refused-address", "status-3xx",
                         "status-4xx", "status-5xx", "state", "enum", "active", "failing", "expired"),
               REQUIRED("id", "url", "delivered", "lag_s", "state"), true));
    /* several shards: each shard's delivered entry cursor ("S.P") beside the page token */
    json_object_set_new(json_object_get(json_object_get(s, "WebhookState"), "properties"), "delivered_shards",
                        json_pack("{s:s,s:{s:s}}", "type", "array", "items", "type", "string"));
    json_object_set_new(
        s, "Webhooks",
        object(json_pack("{s:{s:s,s:o}}", "webhooks", "type", "array", "items", schema_ref("WebhookState")),
               REQUIRED("webhooks"), true));
    json_object_set_new(s, "WebhookCreate",
                        object(json_pack("{s:{s:s,s:i,s:s},s:{s:s,s:i}}", "url", "type", "string", "maxLength", 2048,
                                         "pattern", "^https?://", "secret", "type", "string", "minLength", 32),
                               REQUIRED("url"), true));
    json_object_set_new(
        s, "WebhookCreated",
        object(json_pack("{s:{s:s},s:{s:s},s:{s:s},s:{s:s,s:s}}", "id", "type", "string", "url", "type", "string",
                         "secret", "type", "string", "created", "type", "string", "format", "date-time"),
               REQUIRED("id", "url", "secret", "created"), true));
    json_object_set_new(s, "WebhookResume", object(json_pack("{s:{s:s}}", "after", "type", "string"), NULL, true));
    json_object_set_new(s, "WebhookResumed",
                        object(json_pack("{s:{s:s},s:{s:s}}", "id", "type", "string", "after", "type", "string"),
                               REQUIRED("id", "after"), true));
    json_object_set_new(s, "WebhookSecret",
                        object(json_pack("{s:{s:s},s:{s:s},s:O}", "id", "type", "string", "secret", "type", "string",
                                         "previous_valid_until", time_or_null),
                               REQUIRED("id", "secret"), true));
    json_decref(time_or_null);
    json_object_set_new(s, "ItemReactions", list_schema(cfg->many, "item", "user"));
    json_object_set_new(s, "UserReactions", list_schema(cfg->many, "user", "item"));
    json_t *policy_props =
        json_pack("{s:{s:s,s:o,s:i,s:b},s:{s:s},s:{s:s,s:[s,s]},s:{s:s,s:i,s:i}}", "kinds", "type", "array", "items",
                  schema_ref("Kind"), "minItems", 1, "uniqueItems", true, "closed", "type", "boolean", "counts", "type",
                  "string", "enum", "public", "hidden", "max_kinds", "type", "integer", "minimum", 1, "maximum", 16);
    json_t *body = object(json_deep_copy(policy_props), NULL, true);
    json_object_set_new(body, "description",
                        json_string("every member optional: kinds (default every kind), closed (default false), "
                                    "counts (default public), max_kinds (many mode; default unbounded)"));
    json_object_set_new(s, "PolicyBody", body);
    json_object_set_new(s, "ItemPolicy",
                        object(json_deep_copy(policy_props), REQUIRED("kinds", "closed", "counts"), true));
    json_object_set_new(policy_props, "target",
                        json_pack("{s:s,s:s}", "type", "string", "description",
                                  "an item id, a prefix ending in * (comment-*), or * for every item"));
    json_object_set_new(s, "Policy", object(policy_props, REQUIRED("target", "kinds", "closed", "counts"), true));
    json_object_set_new(s, "Policies",
                        object(json_pack("{s:{s:s,s:o}}", "policies", "type", "array", "items", schema_ref("Policy")),
                               REQUIRED("policies"), true));
    json_object_set_new(s, "Voided", object(json_pack("{s:o}", "voided", integer_min0()), REQUIRED("voided"), true));
    json_object_set_new(s, "Restored",
                        object(json_pack("{s:o}", "restored", integer_min0()), REQUIRED("restored"), true));
    json_object_set_new(s, "AdminUser",
                        object(json_pack("{s:o,s:{s:s},s:o}", "user", schema_ref("Id"), "voided", "type", "boolean",
                                         "reactions", integer_min0()),
                               REQUIRED("user", "voided", "reactions"), true));
    json_object_set_new(s, "Changed", object(json_pack("{s:o}", "changed", integer_min0()), REQUIRED("changed"), true));
    json_object_set_new(s, "Health",
                        object(json_pack("{s:{s:s,s:[s,s]},s:{s:s}}", "status", "type", "string", "enum", "ok",
                                         "unavailable", "reason", "type", "string"),
                               REQUIRED("status"), true));
    json_object_set_new(s, "OpenAPI",
                        json_pack("{s:s,s:{s:{s:s}},s:[s],s:s}", "type", "object", "properties", "openapi", "type",
                                  "string", "required", "openapi", "description", "this document"));
    add_examples(s, cfg);
    return s;
}

static json_t *param(const char *name, const char *in, bool required, json_t *schema, const char *description)
{
    json_t *p = json_pack("{s:s,s:s,s:b,s:o}", "name", name, "in", in, "required", required, "schema", schema);
    if (description)
        json_object_set_new(p, "description", json_string(description));
    return p;
}

static json_t *bounded_int(int min, int max, int def)
{
    json_t *s = json_pack("{s:s,s:i,s:i}", "type", "integer", "minimum", min, "maximum", max);
    if (def >= 0)
        json_object_set_new(s, "default", json_integer(def));
    return s;
}

static json_t *parameters_of(void)
{
    json_t *p = json_object();
    json_object_set_new(p, "item",
                        param("item", "path", true, schema_ref("Id"), "the item id, raw (no percent-encoding)"));
    json_object_set_new(p, "user",
                        param("user", "path", true, schema_ref("Id"), "the user id, raw (no percent-encoding)"));
    json_object_set_new(p, "kind", param("kind", "path", true, schema_ref("Kind"), "one of the configured kinds"));
    json_t *ids = param("ids", "query", true,
                        json_pack("{s:s,s:o,s:i,s:i}", "type", "array", "items", schema_ref("Id"), "minItems", 1,
                                  "maxItems", OPENAPI_IDS_MAX),
                        "comma-separated item ids, at most 100, in the order wanted; each id raw: ':' and the rest of "
                        "the id alphabet are sent as they are, never percent-encoded");
    json_object_set_new(ids, "style", json_string("form"));
    json_object_set_new(ids, "explode", json_false());
    json_object_set_new(ids, "allowReserved", json_true());
    json_object_set_new(p, "ids", ids);
    json_object_set_new(
        p, "idempotencyKey",
        param("Idempotency-Key", "header", false,
              json_pack("{s:s,s:i,s:i}", "type", "string", "minLength", 1, "maxLength", IDEMPOTENCY_KEY_MAX),
              "1-255 printable ASCII characters (a value in double quotes means its content); a "
              "repeat with the same method, path and body replays the stored answer"));
    json_object_set_new(
        p, "idempotencyKeyRequired",
        param("Idempotency-Key", "header", true,
              json_pack("{s:s,s:i,s:i}", "type", "string", "minLength", 1, "maxLength", IDEMPOTENCY_KEY_MAX),
              "required on a toggle: a retry must not toggle twice"));
    json_object_set_new(p, "ifMatch",
                        param("If-Match", "header", false,
                              json_pack("{s:s,s:s}", "type", "string", "pattern", "^\"[0-9]+\"$"),
                              "\"<version>\": apply only if the user's row is still at that version (\"0\": never "
                              "reacted); otherwise 412 version-mismatch"));
    json_object_set_new(p, "ifNoneMatch",
                        param("If-None-Match", "header", false, json_pack("{s:s}", "type", "string"),
                              "an ETag from an earlier answer: 304 (no body) while the answer is unchanged"));
    json_object_set_new(p, "after",
                        param("after", "query", false, json_pack("{s:s}", "type", "string"),
                              "a cursor (next of the previous page); without it, from the oldest retained"));
    json_object_set_new(p, "changesLimit", param("limit", "query", false, bounded_int(1, CHANGES_LIMIT_MAX, -1), NULL));
    json_object_set_new(p, "wait",
                        param("wait", "query", false, bounded_int(0, CHANGES_WAIT_MAX, 0),
                              "seconds to long-poll when nothing is there yet"));
    json_object_set_new(p, "reaction", param("reaction", "query", false, schema_ref("Kind"), "default like"));
    json_object_set_new(
        p, "window",
        param("window", "query", false,
              json_pack("{s:s,s:[s,s,s],s:s}", "type", "string", "enum", "1m", "1h", "24h", "default", "1h"), NULL));
    json_object_set_new(p, "trendingLimit",
                        param("limit", "query", false, bounded_int(1, TRENDING_LIMIT_MAX, 10), NULL));
    json_object_set_new(p, "target",
                        param("target", "path", true, json_pack("{s:s}", "type", "string"),
                              "an item id, a prefix ending in * (comment-*), or * (every item)"));
    json_object_set_new(p, "webhook",
                        param("webhook", "path", true, json_pack("{s:s}", "type", "string"), "a webhook's id"));
    json_object_set_new(
        p, "listReaction",
        param("reaction", "query", false, schema_ref("Kind"), "only the users (items) holding that kind"));
    json_object_set_new(p, "listLimit", param("limit", "query", false, bounded_int(1, 100, 20), NULL));
    json_object_set_new(p, "onError",
                        param("on-error", "query", false, json_pack("{s:s,s:[s]}", "type", "string", "enum", "abort"),
                              "abort: a bad line rejects the whole import and nothing changes"));
    return p;
}

static json_t *header(const char *description, json_t *schema)
{
    return json_pack("{s:s,s:o}", "description", description, "schema", schema);
}

static json_t *headers_of(void)
{
    json_t *h = json_object();
    json_object_set_new(h, "ETag", header("\"<version>\" of the user's row", json_pack("{s:s}", "type", "string")));
    json_object_set_new(h, "Idempotent-Replayed",
                        header("true on an answer replayed for a repeated Idempotency-Key",
                               json_pack("{s:s,s:[s]}", "type", "string", "enum", "true")));
    json_object_set_new(
        h, "Retry-After",
        header("whole seconds to wait before retrying", json_pack("{s:s,s:i}", "type", "integer", "minimum", 1)));
    json_object_set_new(h, "WWW-Authenticate", header("Bearer", json_pack("{s:s}", "type", "string")));
    json_object_set_new(h, "WeakETag",
                        header("W/\"…\": a function of the body alone, the same on every node; it changes when "
                               "the counts (or the viewer's state) change",
                               json_pack("{s:s,s:s}", "type", "string", "pattern", "^W/\"[A-Za-z0-9_-]+\"$")));
    json_object_set_new(h, "Cache-Control",
                        header("public, max-age=N (--public-max-age; no-cache when 0) without a user; private, "
                               "no-store when the answer holds the viewer's state",
                               json_pack("{s:s}", "type", "string")));
    json_object_set_new(h, "Vary",
                        header("Authorization, X-User-Id (and Origin where CORS is configured): the answer depends "
                               "on who asks",
                               json_pack("{s:s}", "type", "string")));
    json_object_set_new(h, "FileETag",
                        header("a strong validator of the file's bytes", json_pack("{s:s}", "type", "string")));
    return h;
}

json_t *openapi_components(const openapi_config_t *cfg)
{
    return json_pack("{s:o,s:o,s:o}", "schemas", schemas_of(cfg), "parameters", parameters_of(), "headers",
                     headers_of());
}
