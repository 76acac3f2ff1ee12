/* changes.h — the contract of changes.c — GET /v1/changes. */
#ifndef TALLY_HTTP_CHANGES_H
#define TALLY_HTTP_CHANGES_H

#include "http/app.h"

void changes_get(app_t *app, http_request_t *req, span_t query);

#endif
