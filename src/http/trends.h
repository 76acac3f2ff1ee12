/* trends.h — the contract of trends.c — GET /v1/trending and GET /v1/admin/hot. */
#ifndef TALLY_HTTP_TRENDS_H
#define TALLY_HTTP_TRENDS_H

#include "http/app.h"

void trending_get(app_t *app, http_request_t *req, span_t query);
void hot_get(app_t *app, http_request_t *req);

#endif
