/* import.h — bulk import: each record {item, user, reaction} becomes an ordinary write through the
 * writer, in large batches, so versions, the change feed and counts stay right; a re-run of the
 * same records changes nothing. Used online (POST /v1/admin/import) and offline (tally import). */
#ifndef TALLY_ENGINE_IMPORT_H
#define TALLY_ENGINE_IMPORT_H

#include <stdatomic.h>

#include "engine/writer.h"

#define IMPORT_LINE_MAX (64 * 1024)
#define IMPORT_BATCH_DEFAULT 2048
#define IMPORT_REJECTED_LIST_MAX 1000 /* rejected lines listed at most (all are counted) */

typedef enum { IMPORT_NDJSON, IMPORT_CSV } import_format_t;

typedef struct {
    import_format_t format;
    bool abort_on_error; /* a bad line rejects the whole import: nothing is applied */
    size_t batch;        /* commands in flight at once */
} import_options_t;

typedef struct {
    uint64_t line;
    char error[96];
} import_reject_t;

typedef struct {
    uint64_t read, applied, unchanged, rejected_count;
    import_reject_t *rejected; /* the first IMPORT_REJECTED_LIST_MAX */
    size_t nrejected;
    bool aborted; /* abort_on_error and something was rejected */
    bool failed;  /* the writer refused or a commit failed: the import stopped part-way */
    atomic_uint_fast64_t applied_live, unchanged_live; /* counted on the writer thread while running */
} import_report_t;

/* A source of lines. next returns 1 with a line (without its newline), 0 at the end, or 2 for a
 * line longer than IMPORT_LINE_MAX (skipped; line is empty). rewind starts over (for the checking
 * pass of abort_on_error); it may be NULL when abort_on_error is off. */
typedef struct {
    int (*next)(void *arg, span_t *line);
    int (*rewind)(void *arg);
    void *arg;
} import_source_t;

/* Where the records go: the writers of the shards, shard 0's first, and the shard of an item (NULL
 * with one writer). A reaction record goes to its item's shard's writer; a voided-user line to every
 * shard's, shard 0's first (where the feature version is checked; then the others at once), and it is
 * one record of the report however many shards it changed. */
typedef struct {
    writer_t *const *writers;
    size_t n;
    uint32_t (*shard_of)(void *arg, span_t item);
    void *arg;
} import_route_t;

/* Runs the import. Blocks (a thread of its own, never an HTTP thread). Returns 0, or -1 when it
 * could not run to the end (report->failed; what was applied before stays applied: a run again
 * finishes it, on every shard). */
int import_run(const import_route_t *route, const kinds_t *kinds, const import_source_t *src,
               const import_options_t *opt, import_report_t *report);

void import_report_free(import_report_t *report);

/* A source over a buffer in memory. */
typedef struct {
    span_t data;
    size_t pos;
} import_buffer_t;
int import_buffer_next(void *arg, span_t *line);
int import_buffer_rewind(void *arg);

#endif
