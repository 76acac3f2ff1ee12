/* metrics.h — the contract of metrics.c — GET /metrics. */
#ifndef TALLY_HTTP_METRICS_H
#define TALLY_HTTP_METRICS_H

#include "http/app.h"

void metrics_get(app_t *app, http_request_t *req);

#endif
