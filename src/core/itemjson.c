/* itemjson.c — rendering of item objects without a tree or stdio. */
#include "core/itemjson.h"

#include <string.h>

#include "core/kindsjson.h"

static void item_counts(textbuf_t *b, const kinds_t *kinds, const int64_t counts[KINDS_MAX + 1])
{
    textbuf_lit(b, ",\"counts\":{");
    for (int k = 1; k <= kinds->count; k++) {
        if (k > 1)
            textbuf_lit(b, ",");
        textbuf_safe(b, span_of(kinds_name(kinds, k)));
        textbuf_lit(b, ":");
        textbuf_int(b, counts[k]);
    }
    textbuf_lit(b, "}");
    if (kinds->mode == REACTION_MODE_MANY) {
        textbuf_lit(b, ",\"reactors\":");
        textbuf_int(b, counts[KIND_NONE]);
    }
}

void itemjson_append(textbuf_t *b, const kinds_t *kinds, span_t item, const int64_t counts[KINDS_MAX + 1],
                     const reaction_row_t *viewer)
{
    itemjson_append_policy(b, kinds, item, counts, viewer, NULL, true);
}

void itemjson_append_policy(textbuf_t *b, const kinds_t *kinds, span_t item, const int64_t counts[KINDS_MAX + 1],
                            const reaction_row_t *viewer, const policy_t *policy, bool reveal)
{
    textbuf_lit(b, "{\"item\":");
    textbuf_safe(b, item);
    if (policy && policy->hidden && !reveal) {
        if (kinds->mode == REACTION_MODE_MANY)
            textbuf_lit(b, ",\"counts\":null,\"reactors\":null");
        else
            textbuf_lit(b, ",\"counts\":null");
    } else {
        item_counts(b, kinds, counts);
    }
    if (policy) {
        textbuf_lit(b, ",\"policy\":");
        policy_append(b, kinds, policy);
    }
    if (viewer) {
        textbuf_lit(b, ",\"viewer\":{\"");
        textbuf_append(b, kindset_member(kinds), strlen(kindset_member(kinds)));
        textbuf_lit(b, "\":");
        kindset_append(b, kinds, viewer->set);
        textbuf_lit(b, ",\"version\":");
        textbuf_int(b, (int64_t)viewer->version);
        textbuf_lit(b, "}");
    }
    textbuf_lit(b, "}");
}

void itemjson_unavailable_append(textbuf_t *b, span_t item)
{
    textbuf_lit(b, "{\"item\":");
    textbuf_safe(b, item);
    textbuf_lit(b, ",\"unavailable\":true}");
}

void itemjson_viewer_append(textbuf_t *b, const kinds_t *kinds, span_t item, const reaction_row_t *row)
{
    textbuf_lit(b, "{\"item\":");
    textbuf_safe(b, item);
    textbuf_lit(b, ",\"");
    textbuf_append(b, kindset_member(kinds), strlen(kindset_member(kinds)));
    textbuf_lit(b, "\":");
    kindset_append(b, kinds, row->set);
    textbuf_lit(b, ",\"version\":");
    textbuf_int(b, (int64_t)row->version);
    textbuf_lit(b, "}");
}
