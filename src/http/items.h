/* items.h — the contract of items.c — the item routes. */
#ifndef TALLY_HTTP_ITEMS_H
#define TALLY_HTTP_ITEMS_H

#include "http/app.h"

typedef enum {
    ITEM_ACTION_REACTION, /* …/reaction: set (PUT, with a body) or clear (DELETE) */
    ITEM_ACTION_TOGGLE,   /* …/reaction:toggle */
    ITEM_ACTION_KIND,     /* …/{kind}: set that kind (PUT) or clear it if held (DELETE) */
} item_action_t;

void items_get_one(app_t *app, http_request_t *req, span_t item);
void items_get_many(app_t *app, http_request_t *req, span_t query);
/* The ids parameter of query (?ids=a,b,c: at most BATCH_IDS_MAX valid ids), or false having
 * replied 400 (invalid-parameter, too-many-ids, invalid-item-id). */
bool items_ids_or_reply(http_request_t *req, span_t query, span_t *ids);
/* GET /v1/viewer?ids=: the user's own reaction and version on each item (needs a user). */
void items_get_viewer(app_t *app, http_request_t *req, span_t query);
void items_get_reaction(app_t *app, http_request_t *req, span_t item);
/* A write on one of the item routes; kind is the raw path segment for ITEM_ACTION_KIND. */
void items_write(app_t *app, http_request_t *req, span_t item, item_action_t action, span_t kind);

#endif
