/* admin.h — the contract of admin.c — the long admin jobs: recount, import, erasing a user, deleting an item. */
#ifndef TALLY_HTTP_ADMIN_H
#define TALLY_HTTP_ADMIN_H

#include "http/app.h"

void admin_recount(app_t *app, http_request_t *req);
void admin_import(app_t *app, http_request_t *req, span_t query);
/* DELETE /v1/admin/users/{user} (user) or /v1/admin/items/{item}: every reaction becomes none. */
void admin_clear(app_t *app, http_request_t *req, span_t name, bool user);

#endif
