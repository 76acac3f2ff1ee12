/* lists.h — the contract of lists.c: GET /v1/items/{item}/reactions (who reacted) and
 * GET /v1/users/{user}/reactions (a user's reactions). */
#ifndef TALLY_HTTP_LISTS_H
#define TALLY_HTTP_LISTS_H

#include "http/app.h"

/* by_user: the user's list (key is the user), else the item's. HTTP threads. */
void lists_get(app_t *app, http_request_t *req, span_t key, span_t query, bool by_user);

#endif
