/* claims.c — an Idempotency-Key's claim on the user's shard: a WRITE_CLAIM command of that shard's
 * writer, allocated here and freed when the writer is done with it (claims.h). */
#include "engine/claims.h"

#include <stdlib.h>
#include <string.h>

#include "core/ids.h"
#include "core/parse.h"

typedef struct {
    write_cmd_t cmd; /* first: the writer's done hands back &cmd */
    claims_done_fn done;
    void *arg;
} claim_req_t;

/* Writer thread: the command is final. */
static void claim_done(write_cmd_t *cmd)
{
    claim_req_t *req = (claim_req_t *)cmd;
    int outcome = cmd->answer.status == 200 ? CLAIM_TAKEN : cmd->answer.status == 409 ? CLAIM_MISMATCH : CLAIM_FAILED;
    claims_done_fn done = req->done;
    void *arg = req->arg;
    answer_free(&cmd->answer);
    free(req);
    if (done)
        done(arg, outcome);
}

static int claim_submit(writer_t *w, bool release, span_t user, span_t key, const uint8_t fp[FINGERPRINT_LEN],
                        claims_done_fn done, void *arg)
{
    if (user.len == 0 || user.len > ID_MAX_LEN || key.len == 0 || key.len > IDEM_KEY_MAX)
        return -1;
    claim_req_t *req = calloc(1, sizeof *req);
    if (!req)
        return -1;
    req->done = done;
    req->arg = arg;
    write_cmd_t *cmd = &req->cmd;
    cmd->type = WRITE_CLAIM;
    cmd->done = claim_done;
    write_claim_t *cl = &cmd->claim;
    cl->release = release;
    memcpy(cl->user, user.ptr, user.len);
    cl->user_len = user.len;
    memcpy(cl->key, key.ptr, key.len);
    cl->key_len = key.len;
    memcpy(cl->fingerprint, fp, FINGERPRINT_LEN);
    if (writer_submit(w, cmd) != 0) {
        free(req);
        return -1;
    }
    return 0;
}

int claims_take(writer_t *w, span_t user, span_t key, const uint8_t fp[FINGERPRINT_LEN], claims_done_fn done, void *arg)
{
    return claim_submit(w, false, user, key, fp, done, arg);
}

int claims_release(writer_t *w, span_t user, span_t key, const uint8_t fp[FINGERPRINT_LEN])
{
    return claim_submit(w, true, user, key, fp, NULL, NULL);
}

bool claims_release_due(const write_cmd_t *cmd)
{
    const answer_t *a = &cmd->answer;
    /* applied; or the item's shard holds a record of the key for this request: a replay, or a 412,
     * which is stored under the key as a 2xx is (so that, as on one shard, the key stays bound) */
    if (a->status < 300 || a->status == 412 || a->replayed)
        return false;
    return !(a->status == 503 && cmd->maybe_applied);
}
