/* test_trending.c — trending over a store whose reads fail where the test says: a wrapper of the
 * seam's table of operations around the LMDB store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/trending.h"
#include "engine/writer.h"
#include "store/store_impl.h"
#include "unit.h"

static const store_ops_t *real_ops;
static store_ops_t faulty_ops;
static const char *fail_aux_prefix; /* read_aux of exactly this prefix fails */
static bool fail_log_bounds;

static int faulty_read_begin(store_t *s, store_read_t **out)
{
    int rc = real_ops->read_begin(s, out);
    if (rc == STORE_OK)
        (*out)->ops = &faulty_ops; /* the snapshot's calls come through here */
    return rc;
}

static int faulty_read_aux(store_read_t *r, span_t prefix, store_aux_fn fn, void *arg)
{
    if (fail_aux_prefix && span_eq_str(prefix, fail_aux_prefix))
        return STORE_ERROR;
    return real_ops->read_aux(r, prefix, fn, arg);
}

static int faulty_read_log_bounds(store_read_t *r, uint64_t *first, uint64_t *last)
{
    return fail_log_bounds ? STORE_ERROR : real_ops->read_log_bounds(r, first, last);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The 1h gain of item x for like, once the follower has read the whole log (at most ~2 s). */
static int64_t gain_of_x(trending_t *t)
{
    trend_entry_t top[10];
    int64_t gain = -1;
    for (int i = 0; i < 200; i++) {
        size_t n = trending_top(t, 1, WINDOW_1H, 10, top);
        gain = n == 1 && strcmp(top[0].item, "x") == 0 ? top[0].gain : -1;
        if (trending_behind(t) == 0 && gain >= 0 && i > 20)
            break;
        trending_notify(t);
        sleep_ms(10);
    }
    return gain;
}

void test_trending(void)
{
    char dir[] = "/tmp/tally-unit-trending-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    kinds_t kinds;
    char err[256];
    store_t *s = NULL;
    kinds_parse(&kinds, "like,dislike", err, sizeof err);
    store_options_t sopt = {.map_size_bytes = 1ull << 30};
    CHECK(store_open(dir, &kinds, &sopt, &s, err, sizeof err) == STORE_OK);
    if (!s)
        return;
    writer_options_t wopt = {.queue_max = 64,
                             .batch_max = 64,
                             .fold_max = 1024,
                             .idem_ttl_ms = 60000,
                             .sweep_max = 16,
                             .log_retention_ms = 86400000};
    trending_options_t topt = {.capacity = 64, .hot_threshold = 50};
    writer_t *w;
    trending_t *t;
    CHECK(writer_start(s, store_kinds(s), &wopt, &w) == 0);
    CHECK(trending_start(s, w, store_kinds(s), &topt, &t) == 0);
    for (int i = 0; i < 3; i++) {
        write_cmd_t cmd = {.type = WRITE_REACT, .react = {.op = REACT_SET, .arg = 1u << 1, .item = "x", .item_len = 1}};
        cmd.react.user_len = (size_t)snprintf(cmd.react.user, sizeof cmd.react.user, "u%d", i);
        CHECK(writer_call(w, &cmd) == 0 && cmd.answer.status == 200);
        answer_free(&cmd.answer);
    }
    CHECK(gain_of_x(t) == 3);
    trending_stop(t); /* persists the open buckets with the cursor */

    /* Restarting with the cursor unreadable: the summaries read without it must go, else the
     * replay from an hour back counts the three likes twice. */
    real_ops = s->ops;
    faulty_ops = *real_ops;
    faulty_ops.read_begin = faulty_read_begin;
    faulty_ops.read_aux = faulty_read_aux;
    faulty_ops.read_log_bounds = faulty_read_log_bounds;
    s->ops = &faulty_ops;
    fail_aux_prefix = "trend/open";
    CHECK(trending_start(s, w, store_kinds(s), &topt, &t) == 0);
    CHECK(trending_errors(t) == 1);
    CHECK(gain_of_x(t) == 3);

    /* A failing read of the log is counted (and logged once), and following resumes after it. */
    fail_log_bounds = true;
    uint64_t before = trending_errors(t);
    for (int i = 0; i < 200 && trending_errors(t) < before + 2; i++) {
        trending_notify(t);
        sleep_ms(10);
    }
    CHECK(trending_errors(t) >= before + 2);
    fail_log_bounds = false;
    write_cmd_t cmd = {
        .type = WRITE_REACT,
        .react = {.op = REACT_SET, .arg = 1u << 1, .item = "x", .item_len = 1, .user = "u9", .user_len = 2}};
    CHECK(writer_call(w, &cmd) == 0 && cmd.answer.status == 200);
    answer_free(&cmd.answer);
    CHECK(gain_of_x(t) == 4);

    trending_stop(t);
    writer_stop(w);
    s->ops = real_ops;
    store_close(s);
    snprintf(err, sizeof err, "rm -rf '%s'", dir);
    if (system(err) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}
