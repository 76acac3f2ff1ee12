/* ui_files.h — the static files of /ui/ (the demo page, the operator's page, the JavaScript client
 * and its web component), embedded in the binary at build time by scripts/embed_files.sh. */
#ifndef TALLY_HTTP_UI_FILES_H
#define TALLY_HTTP_UI_FILES_H

#include <stddef.h>

typedef struct {
    const char *path;         /* the URL path it is served at ("/ui/", "/ui/tally.js") */
    const char *content_type; /* by the file's extension */
    const char *etag;         /* a strong ETag of the bytes, quoted */
    const unsigned char *bytes;
    size_t len;
} ui_file_t;

extern const ui_file_t ui_files[];
extern const size_t ui_files_count;

#endif
