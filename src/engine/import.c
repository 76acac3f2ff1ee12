/* import.c — parsing import records and feeding them to the writer in batches. */
#include "engine/import.h"

#include "core/csv.h"
#include "core/kindsjson.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    span_t item, user;
    kindset_t set;
    int voided;     /* a voided-user line: 1 void, 0 restore; -1 a reaction record */
    char error[96]; /* what is wrong with the reactions, when they are */
} record_t;

static int reject(import_report_t *rep, uint64_t line, const char *error)
{
    rep->rejected_count++;
    if (rep->nrejected == IMPORT_REJECTED_LIST_MAX)
        return 0;
    if (rep->nrejected % 64 == 0) {
        import_reject_t *r = realloc(rep->rejected, (rep->nrejected + 64) * sizeof *r);
        if (!r)
            return -1;
        rep->rejected = r;
    }
    import_reject_t *r = &rep->rejected[rep->nrejected++];
    r->line = line;
    snprintf(r->error, sizeof r->error, "%s", error);
    return 0;
}

/* Checks the ids of a record; returns NULL or what is wrong. */
static const char *record_check(record_t *rec)
{
    if (!id_valid(rec->item))
        return "invalid item id";
    if (!id_valid(rec->user))
        return "invalid user id";
    return NULL;
}

/* One reaction name (or none) as a set. */
static const char *record_kind(const kinds_t *kinds, record_t *rec, span_t reaction)
{
    int k = kinds_find(kinds, reaction, true);
    rec->set = k < 0 ? KINDSET_EMPTY : kindset_of(k);
    return k < 0 ? "unknown reaction" : NULL;
}

/* {"item":…,"user":…,"reaction":…}, or in many mode {"item":…,"user":…,"reactions":[…]}; the spans
 * point into doc. */
static const char *parse_ndjson(const kinds_t *kinds, span_t line, json_t **doc, record_t *rec)
{
    *doc = json_loadb(line.ptr, line.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *item = json_object_get(*doc, "item"), *user = json_object_get(*doc, "user"),
           *reaction = json_object_get(*doc, "reaction"), *reactions = json_object_get(*doc, "reactions");
    rec->voided = -1;
    if (!json_is_object(*doc))
        return "not a JSON object";
    json_t *voided = json_object_get(*doc, "voided");
    if (voided && !item) { /* {"user":"…","voided":true}: an export's line for a voided user */
        if (!json_is_string(user) || !json_is_boolean(voided) || json_object_size(*doc) != 2)
            return "a voided-user line is {\"user\":\"…\",\"voided\":true|false}";
        rec->user = (span_t){json_string_value(user), json_string_length(user)};
        rec->voided = json_is_true(voided);
        return id_valid(rec->user) ? NULL : "invalid user id";
    }
    if (!json_is_string(item) || !json_is_string(user))
        return "item and user must be strings";
    rec->item = (span_t){json_string_value(item), json_string_length(item)};
    rec->user = (span_t){json_string_value(user), json_string_length(user)};
    const char *error = record_check(rec);
    if (error)
        return error;
    if (reactions && kinds->mode == REACTION_MODE_ONE)
        return "reactions (a set) needs --reaction-mode many; give one reaction";
    if (!reaction == !reactions)
        return kinds->mode == REACTION_MODE_MANY ? "give either reaction (a string) or reactions (an array)"
                                                 : "reaction must be a string";
    if (reactions)
        return kindset_from_json(kinds, reactions, &rec->set, rec->error, sizeof rec->error) ? rec->error : NULL;
    if (!json_is_string(reaction))
        return "reaction must be a string";
    return record_kind(kinds, rec, (span_t){json_string_value(reaction), json_string_length(reaction)});
}

/* item,user,reaction (or, with a header naming reactions, kinds joined by |): one CSV record (its
 * lines joined), its fields unquoted into out (core/csv.h). */
static const char *parse_csv(const kinds_t *kinds, span_t text, bool sets, record_t *rec, char *out)
{
    span_t f[3];
    size_t n = 0;
    const char *error = csv_record(text, f, 3, &n, out);
    if (error && n == 3) /* a fourth field */
        return "expected 3 fields: item,user,reaction";
    if (error)
        return error;
    if (n != 3)
        return "expected 3 fields: item,user,reaction";
    rec->voided = -1;
    rec->item = f[0];
    rec->user = f[1];
    error = record_check(rec);
    if (error || !sets)
        return error ? error : record_kind(kinds, rec, f[2]);
    return kindset_from_text(kinds, f[2], '|', &rec->set, rec->error, sizeof rec->error) ? rec->error : NULL;
}

/* The CSV header: item,user,reaction (or item,user,reactions in many mode), its fields quoted or
 * not. Returns NULL (*sets: the reactions column), or what is wrong. */
static const char *csv_header(const kinds_t *kinds, span_t text, bool *sets, char *out)
{
    span_t f[3];
    size_t n = 0;
    bool many = kinds->mode == REACTION_MODE_MANY;
    *sets = false;
    if (!csv_record(text, f, 3, &n, out) && n == 3 && span_eq_str(f[0], "item") && span_eq_str(f[1], "user")) {
        *sets = many && span_eq_str(f[2], "reactions");
        if (*sets || span_eq_str(f[2], "reaction"))
            return NULL;
    }
    return many ? "the header must be item,user,reaction or item,user,reactions"
                : "the header must be item,user,reaction";
}

/* A CSV record being read (RFC 4180: a quoted field may hold line breaks, so a record may span
 * lines). The lines of one that does are joined in buf, at most IMPORT_LINE_MAX bytes. */
typedef struct {
    char *buf, *out; /* the joined lines; the unquoted fields (IMPORT_LINE_MAX + 1 bytes each) */
    size_t len;
    bool open, too_long; /* a record goes on with the next line; it grew past the limit */
    uint64_t line;       /* its first line */
    csv_scan_t scan;
} csv_reader_t;

/* Adds a line to the record under way (sep: a '\n' before it, between two of its lines). */
static void csv_append(csv_reader_t *c, span_t line, bool sep)
{
    if (c->too_long || c->len + sep + line.len > IMPORT_LINE_MAX) {
        c->too_long = true;
        return;
    }
    if (sep)
        c->buf[c->len++] = '\n';
    memcpy(c->buf + c->len, line.ptr, line.len);
    c->len += line.len;
}

/* A voided-user line sent to several shards: one record of the report once every part is final. */
typedef struct {
    atomic_size_t left;  /* parts not final yet */
    atomic_bool changed; /* some shard's flag changed */
    atomic_bool failed;  /* some part was not answered 200 (the import fails) */
} fanout_t;

static void record_count(import_report_t *rep, bool ok, bool changed)
{
    if (ok && changed)
        atomic_fetch_add(&rep->applied_live, 1);
    else if (ok)
        atomic_fetch_add(&rep->unchanged_live, 1);
}

/* Writer thread: one record's answer (or one part of a fanned-out one) is final. */
static void record_done(write_cmd_t *cmd, void *arg)
{
    import_report_t *rep = arg;
    bool changed = cmd->type == WRITE_VOID ? cmd->void_user.version != 0 : cmd->react.changed != 0;
    fanout_t *f = cmd->done_arg;
    if (!f) {
        record_count(rep, cmd->answer.status == 200, changed);
        return;
    }
    if (cmd->answer.status != 200)
        atomic_store(&f->failed, true);
    else if (changed)
        atomic_store(&f->changed, true);
    if (atomic_fetch_sub(&f->left, 1) != 1)
        return;
    record_count(rep, !atomic_load(&f->failed), atomic_load(&f->changed));
    free(f);
}

static void void_fill(write_cmd_t *cmd, const record_t *rec)
{
    cmd->type = WRITE_VOID;
    cmd->void_user.restore = !rec->voided;
    memcpy(cmd->void_user.user, rec->user.ptr, rec->user.len);
    cmd->void_user.user_len = rec->user.len;
}

/* A voided-user line on several shards: shard 0's part first, waited for (its transaction checks the
 * feature version, kept on shard 0 only and never lowered), then the others' in the group. The
 * writers take commands in order, so each shard sees it between the records before and after it. */
static int void_fanout(const import_route_t *route, writer_group_t *g, const record_t *rec)
{
    write_cmd_t first = {0};
    void_fill(&first, rec);
    bool ok = writer_call(route->writers[0], &first) == 0 && first.answer.status == 200;
    answer_free(&first.answer);
    if (!ok) { /* one failed record of the group, as with one shard: the import fails, the pass goes on */
        pthread_mutex_lock(&g->lock);
        g->failed++;
        pthread_mutex_unlock(&g->lock);
        return 0;
    }
    fanout_t *f = malloc(sizeof *f);
    if (!f)
        return -1;
    atomic_init(&f->left, route->n - 1);
    atomic_init(&f->changed, first.void_user.version != 0);
    atomic_init(&f->failed, false);
    for (size_t k = 1; k < route->n; k++) {
        write_cmd_t *cmd = calloc(1, sizeof *cmd);
        if (cmd) {
            void_fill(cmd, rec);
            cmd->void_user.feature_checked = true;
            cmd->done_arg = f;
        }
        if (!cmd || writer_group_submit(route->writers[k], g, cmd) != 0) {
            free(cmd);
            atomic_store(&f->failed, true); /* the parts not sent are final now */
            if (atomic_fetch_sub(&f->left, route->n - k) == route->n - k)
                free(f);
            return -1;
        }
    }
    return 0;
}

static int record_submit(const import_route_t *route, writer_group_t *g, const record_t *rec)
{
    if (rec->voided >= 0 && route->n > 1)
        return void_fanout(route, g, rec);
    writer_t *w = route->writers[route->n > 1 ? route->shard_of(route->arg, rec->item) : 0];
    write_cmd_t *cmd = calloc(1, sizeof *cmd);
    if (!cmd)
        return -1;
    if (rec->voided >= 0) { /* the user's flag: a void or a restore, as the line says */
        void_fill(cmd, rec);
        if (writer_group_submit(w, g, cmd) != 0) {
            free(cmd);
            return -1;
        }
        return 0;
    }
    cmd->type = WRITE_REACT;
    cmd->react.op = REACT_SET;
    cmd->react.arg = rec->set;
    cmd->react.no_policy = true; /* an import applies rows as they are */
    cmd->react.no_counts = true;
    memcpy(cmd->react.item, rec->item.ptr, rec->item.len);
    cmd->react.item_len = rec->item.len;
    memcpy(cmd->react.user, rec->user.ptr, rec->user.len);
    cmd->react.user_len = rec->user.len;
    if (writer_group_submit(w, g, cmd) != 0) {
        free(cmd);
        return -1;
    }
    return 0;
}

/* {"export":"complete","lines":N}: the last line of an export (engine/export.h), skipped; N is kept
 * to be checked against the records before it. */
static bool export_closing(span_t line, uint64_t *n)
{
    json_t *doc = json_loadb(line.ptr, line.len, 0, NULL);
    json_t *lines = json_object_get(doc, "lines");
    bool closing = json_is_object(doc) && json_object_get(doc, "export") && !json_object_get(doc, "item") &&
                   json_is_integer(lines) && json_integer_value(lines) >= 0;
    if (closing)
        *n = (uint64_t)json_integer_value(lines);
    json_decref(doc);
    return closing;
}

/* One record (text, from line lineno on): the header first, for CSV. Checked; applied when route is
 * not NULL. Returns 1 when the rest cannot be read right (a bad header), 0, or -1. */
static int import_record(const import_route_t *route, const kinds_t *kinds, const import_options_t *opt,
                         import_report_t *rep, writer_group_t *g, span_t text, uint64_t lineno, bool *header_pending,
                         bool *csv_sets, char *out)
{
    if (*header_pending) {
        *header_pending = false;
        const char *error = csv_header(kinds, text, csv_sets, out);
        if (error)
            return reject(rep, lineno, error) != 0 ? -1 : 1; /* nothing else can be read right */
        return 0;
    }
    rep->read++;
    record_t rec;
    json_t *doc = NULL;
    const char *error = opt->format == IMPORT_CSV ? parse_csv(kinds, text, *csv_sets, &rec, out)
                                                  : parse_ndjson(kinds, text, &doc, &rec);
    int rc = 0;
    if (error)
        rc = reject(rep, lineno, error);
    else if (route) {
        writer_group_wait(g, opt->batch);
        rc = record_submit(route, g, &rec);
    }
    json_decref(doc);
    return rc != 0 ? -1 : 0;
}

/* One pass over the source: checks every record; applies the good ones when route is not NULL. A CSV
 * record may span lines (a quoted field holding a line break): its lines are joined first. */
static int import_pass(const import_route_t *route, const kinds_t *kinds, const import_source_t *src,
                       const import_options_t *opt, import_report_t *rep, writer_group_t *g)
{
    span_t line;
    uint64_t lineno = 0;
    int got, rc = 0;
    bool csv = opt->format == IMPORT_CSV;
    bool header_pending = csv;
    bool csv_sets = false; /* the header names reactions: kinds joined by | */
    csv_reader_t c = {0};
    if (csv && (!(c.buf = malloc(IMPORT_LINE_MAX + 1)) || !(c.out = malloc(IMPORT_LINE_MAX + 1)))) {
        free(c.buf);
        return -1;
    }
    while (rc == 0 && (got = src->next(src->arg, &line)) != 0) {
        lineno++;
        if (got == 2 && c.open) { /* the record under way cannot be read whole: it ends here */
            c.open = false;
            rep->read++;
            rc = reject(rep, c.line, "record longer than 65536 bytes");
            continue;
        }
        if (got == 2) {
            rep->read++;
            rc = reject(rep, lineno, "line longer than 65536 bytes");
            continue;
        }
        if (csv && lineno == 1)
            line = csv_strip_bom(line); /* as Excel writes one */
        if (c.open) {                   /* more of a quoted field: the line break is the field's */
            csv_append(&c, line, true);
            csv_scan_line(&c.scan, line);
            if ((c.open = csv_scan_open(&c.scan)))
                continue;
            if (c.too_long) {
                rep->read++;
                rc = reject(rep, c.line, "record longer than 65536 bytes");
            } else {
                rc = import_record(route, kinds, opt, rep, g, (span_t){c.buf, c.len}, c.line, &header_pending,
                                   &csv_sets, c.out);
            }
            continue;
        }
        span_t bare = line;
        if (bare.len && bare.ptr[bare.len - 1] == '\r')
            bare.len--;
        if (bare.len == 0)
            continue;
        uint64_t closing_n;
        if (!csv && export_closing(bare, &closing_n)) { /* an export's closing line is not a record */
            if (rep->read != closing_n)
                rc = reject(rep, lineno, "the export's closing line counts other lines");
            continue;
        }
        if (csv) {
            c.scan = (csv_scan_t){0};
            csv_scan_line(&c.scan, line);
            if ((c.open = csv_scan_open(&c.scan))) {
                c.len = 0;
                c.too_long = false;
                c.line = lineno;
                csv_append(&c, line, false);
                continue;
            }
        }
        rc = import_record(route, kinds, opt, rep, g, bare, lineno, &header_pending, &csv_sets, c.out);
    }
    if (rc == 0 && c.open) /* the input ended inside a quoted field: refused as it is */
        rc = c.too_long ? (rep->read++, reject(rep, c.line, "record longer than 65536 bytes"))
                        : import_record(route, kinds, opt, rep, g, (span_t){c.buf, c.len}, c.line, &header_pending,
                                        &csv_sets, c.out);
    free(c.buf);
    free(c.out);
    return rc < 0 ? -1 : 0;
}

int import_run(const import_route_t *route, const kinds_t *kinds, const import_source_t *src,
               const import_options_t *opt, import_report_t *report)
{
    *report = (import_report_t){0};
    writer_group_t g;
    writer_group_init(&g, true, record_done, report);
    int rc = 0;
    if (opt->abort_on_error) {
        rc = import_pass(NULL, kinds, src, opt, report, &g);
        if (rc == 0 && report->rejected_count) {
            report->aborted = true;
        } else if (rc == 0) {
            uint64_t read = report->read;
            report->read = 0;
            rc = src->rewind(src->arg) == 0 ? import_pass(route, kinds, src, opt, report, &g) : -1;
            if (rc == 0 && report->read != read)
                rc = -1; /* the source changed between the passes */
        }
    } else {
        rc = import_pass(route, kinds, src, opt, report, &g);
    }
    writer_group_wait(&g, 0);
    if (g.failed)
        rc = -1;
    writer_group_destroy(&g);
    report->applied = atomic_load(&report->applied_live);
    report->unchanged = atomic_load(&report->unchanged_live);
    report->failed = rc != 0;
    return rc;
}

void import_report_free(import_report_t *report)
{
    free(report->rejected);
    *report = (import_report_t){0};
}

int import_buffer_next(void *arg, span_t *line)
{
    import_buffer_t *buf = arg;
    if (buf->pos >= buf->data.len)
        return 0;
    const char *start = buf->data.ptr + buf->pos;
    size_t rest = buf->data.len - buf->pos;
    const char *nl = memchr(start, '\n', rest);
    size_t len = nl ? (size_t)(nl - start) : rest;
    buf->pos += len + 1;
    if (len > IMPORT_LINE_MAX) {
        *line = (span_t){start, 0};
        return 2;
    }
    *line = (span_t){start, len};
    return 1;
}

int import_buffer_rewind(void *arg)
{
    ((import_buffer_t *)arg)->pos = 0;
    return 0;
}
