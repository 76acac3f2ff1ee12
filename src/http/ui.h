/* ui.h — GET /ui/…: the embedded static files (ui_files.h); GET /v1/openapi.json. */
#ifndef TALLY_HTTP_UI_H
#define TALLY_HTTP_UI_H

#include "http/app.h"
#include "http/openapi.h"
#include "http/ui_files.h"

/* The file served at path (the path without its query), or NULL. */
const ui_file_t *ui_file_find(span_t path);

/* Answers GET/HEAD of a static file: 200 with its bytes, 304 to a matching If-None-Match, 404
 * not-found when there is no such file. HTML pages carry a Content-Security-Policy without inline
 * script. Any HTTP thread. */
void ui_get(app_t *app, http_request_t *req, span_t path);

/* GET /v1/openapi.json: app->openapi_json. Any HTTP thread. */
void ui_openapi_get(app_t *app, http_request_t *req);

/* Renders app->openapi_json from the configuration (at start-up). Returns 0, or -1 when out of
 * memory. */
int ui_openapi_render(app_t *app, const openapi_config_t *cfg);

#endif
