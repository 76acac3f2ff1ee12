/* hold_env.c — test-only: keeps the LMDB environment in DIR open, read-only, with a snapshot, the way
 * a `tally` tool beside a running tallyd does, until its standard input closes; prints "ready" once
 * it holds it. usage: hold_env DIR */
#include <lmdb.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MDB_env *env;
    MDB_txn *txn;
    if (argc != 2 || mdb_env_create(&env) != 0 || mdb_env_set_maxdbs(env, 16) != 0 ||
        mdb_env_open(env, argv[1], MDB_RDONLY, 0640) != 0 || mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0) {
        fprintf(stderr, "usage: hold_env DIR (an LMDB environment)\n");
        return 2;
    }
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF)
        ;
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return 0;
}
