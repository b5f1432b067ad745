/* libpmi2_check: Slurm's PMI-2 client library (libpmi2) against the launcher.
 * Every rank: PMI2_Init, PMI2_Job_GetId, PMI2_KVS_Put, PMI2_KVS_Fence, PMI2_KVS_Get of every
 * peer's key (value checked), PMI2_Info_GetJobAttr("PMI_process_mapping") (non-empty),
 * node attribute: local rank 0 (MPI_LOCALRANKID) puts it, the others read it with wait=1,
 * PMI2_Finalize. Prints
 *   "libpmi2_check: ok rank=R size=N appnum=A peers=P mapping=M nodeattr=V"
 * or "libpmi2_check: FAIL rank=R what" on stdout and exits 1. */
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != PMI2_SUCCESS) {                                                   \
            printf("libpmi2_check: FAIL rank=%d %s returned %d\n", rank, #call, rc_); \
            fflush(stdout);                                                          \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static void fail(const char *what, const char *detail)
{
    printf("libpmi2_check: FAIL rank=%d %s %s\n", rank, what, detail);
    fflush(stdout);
    exit(1);
}

int main(void)
{
    int spawned = -1, size = -1, appnum = -1, found = 0, vallen = 0;
    char jobid[256], key[PMI2_MAX_KEYLEN], val[PMI2_MAX_VALLEN], want[PMI2_MAX_VALLEN];
    char mapping[PMI2_MAX_ATTRVALUE], nodeattr[PMI2_MAX_ATTRVALUE];

    CHECK(PMI2_Init(&spawned, &size, &rank, &appnum));
    if (size < 1 || rank < 0 || rank >= size)
        fail("init", "bad rank/size");
    if (spawned != 0)
        fail("init", "spawned is not 0");
    const char *env_rank = getenv("PMI_RANK");
    if (env_rank && atoi(env_rank) != rank)
        fail("init", "rank differs from PMI_RANK");

    CHECK(PMI2_Job_GetId(jobid, sizeof jobid));
    if (jobid[0] == 0)
        fail("job-getid", "empty jobid");

    snprintf(key, sizeof key, "lp2-key-%d", rank);
    snprintf(val, sizeof val, "value-of-rank-%d-in-%s", rank, jobid);
    CHECK(PMI2_KVS_Put(key, val));
    CHECK(PMI2_KVS_Fence());
    int peers = 0;
    for (int p = 0; p < size; p++) {
        snprintf(key, sizeof key, "lp2-key-%d", p);
        snprintf(want, sizeof want, "value-of-rank-%d-in-%s", p, jobid);
        memset(val, 0, sizeof val);
        CHECK(PMI2_KVS_Get(jobid, p, key, val, sizeof val, &vallen));
        if (strcmp(val, want) != 0)
            fail(key, val);
        peers++;
    }

    found = 0;
    CHECK(PMI2_Info_GetJobAttr("PMI_process_mapping", mapping, sizeof mapping, &found));
    if (!found || mapping[0] == 0)
        fail("PMI_process_mapping", "missing or empty");

    const char *lr = getenv("MPI_LOCALRANKID");
    int localrank = lr ? atoi(lr) : rank;
    snprintf(want, sizeof want, "node-attr-from-%s", jobid);
    if (localrank == 0) {
        CHECK(PMI2_Info_PutNodeAttr("lp2-nodeattr", want));
        strcpy(nodeattr, want);
    } else {
        found = 0;
        CHECK(PMI2_Info_GetNodeAttr("lp2-nodeattr", nodeattr, sizeof nodeattr, &found, 1));
        if (!found)
            fail("getnodeattr", "not found");
        if (strcmp(nodeattr, want) != 0)
            fail("getnodeattr", nodeattr);
    }

    /* nobody leaves (and the put side's data stays valid) before all have read */
    CHECK(PMI2_KVS_Fence());
    CHECK(PMI2_Finalize());
    printf("libpmi2_check: ok rank=%d size=%d appnum=%d peers=%d mapping=%s nodeattr=%s\n",
           rank, size, appnum, peers, mapping, strcmp(nodeattr, want) == 0 ? "ok" : "bad");
    fflush(stdout);
    return 0;
}
