/* webhooks_admin.h — the contract of webhooks_admin.c — the webhook admin routes of docs/api.md
 * § "Webhooks (admin)". Admin only; HTTP threads. */
#ifndef TALLY_HTTP_WEBHOOKS_ADMIN_H
#define TALLY_HTTP_WEBHOOKS_ADMIN_H

#include "http/app.h"

typedef enum { WEBHOOKS_ADMIN_DELETE, WEBHOOKS_ADMIN_RESUME, WEBHOOKS_ADMIN_SECRET } webhooks_admin_action_t;

/* POST /v1/admin/webhooks (create) and GET /v1/admin/webhooks (list). */
void webhooks_admin_collection(app_t *app, http_request_t *req);

/* DELETE /v1/admin/webhooks/{id}, POST …/{id}/resume, POST …/{id}/secret. */
void webhooks_admin_one(app_t *app, http_request_t *req, span_t id, webhooks_admin_action_t action);

#endif
