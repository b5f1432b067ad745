/* pmi2_check: a program linked with -lpmi2 (Kauri's libpmi2.so, contrib/libpmi/include/pmi2.h).
 * Every rank: PMI2_Init (against PMI_RANK), PMI2_Initialized, PMI2_Job_GetId, GetRank,
 * GetSize, a put of a value with spaces, fence, every peer's value read back (with and
 * without the source hint and the job id), PMI_process_mapping, node attributes (local rank
 * 0 of each node puts a string and an integer list, the others read them, waiting),
 * the name service (rank 0 publishes, the others look up, rank 0 unpublishes, the lookup
 * then fails; each step announced by a KVS key, because Hydra's PMI-2 fence does not wait
 * for the other ranks while its gets of absent keys do), finalize. Prints
 *   "pmi2_check: ok rank=R size=N appnum=A peers=P mapping=M nodeattr=ok ints=1,2,3,N lookup=ok"
 * or "pmi2_check: FAIL rank=R what detail" and exits 1. */
#include <pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(call)                                                                 \
    do {                                                                            \
        int rc_ = (call);                                                           \
        if (rc_ != PMI2_SUCCESS) {                                                  \
            printf("pmi2_check: FAIL rank=%d %s returned %d\n", rank, #call, rc_);  \
            fflush(stdout);                                                         \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static void fail(const char *what, const char *detail)
{
    printf("pmi2_check: FAIL rank=%d %s %s\n", rank, what, detail);
    fflush(stdout);
    exit(1);
}

int main(void)
{
    int spawned = -1, size = -1, appnum = -1, found = 0, vallen = 0, r = -1, s = -1;
    char jobid[256], key[PMI2_MAX_KEYLEN], val[PMI2_MAX_VALLEN], want[PMI2_MAX_VALLEN];
    char mapping[PMI2_MAX_ATTRVALUE], attr[PMI2_MAX_ATTRVALUE];

    if (PMI2_Initialized())
        fail("PMI2_Initialized", "true before PMI2_Init");
    CHECK(PMI2_Init(&spawned, &size, &rank, &appnum));
    if (!PMI2_Initialized())
        fail("PMI2_Initialized", "false after PMI2_Init");
    if (size < 1 || rank < 0 || rank >= size || spawned != 0)
        fail("init", "bad rank/size/spawned");
    const char *env_rank = getenv("PMI_RANK");
    if (env_rank && atoi(env_rank) != rank)
        fail("init", "rank differs from PMI_RANK");
    CHECK(PMI2_Job_GetRank(&r));
    CHECK(PMI2_Info_GetSize(&s));
    if (r != rank || s != size)
        fail("GetRank/GetSize", "differ from PMI2_Init");
    CHECK(PMI2_Job_GetId(jobid, sizeof jobid));
    if (jobid[0] == 0)
        fail("PMI2_Job_GetId", "empty");

    snprintf(key, sizeof key, "p2-key-%d", rank);
    snprintf(val, sizeof val, "value of rank %d  in %s ", rank, jobid);
    CHECK(PMI2_KVS_Put(key, val));

    char service[300], port[256];
    snprintf(service, sizeof service, "p2-service-%s", jobid);
    if (rank == 0) {
        CHECK(PMI2_Nameserv_publish(service, NULL, "port of rank 0"));
        CHECK(PMI2_KVS_Put("p2-published", "yes"));
    }

    CHECK(PMI2_KVS_Fence());
    int peers = 0;
    for (int p = 0; p < size; p++) {
        snprintf(key, sizeof key, "p2-key-%d", p);
        snprintf(want, sizeof want, "value of rank %d  in %s ", p, jobid);
        memset(val, 0, sizeof val);
        CHECK(PMI2_KVS_Get(jobid, p, key, val, sizeof val, &vallen));
        if (strcmp(val, want) != 0 || vallen != (int)strlen(want))
            fail(key, val);
        memset(val, 0, sizeof val);
        CHECK(PMI2_KVS_Get(NULL, PMI2_ID_NULL, key, val, sizeof val, &vallen));
        if (strcmp(val, want) != 0)
            fail(key, val);
        /* a buffer too small: truncated, negative length */
        CHECK(PMI2_KVS_Get(NULL, p, key, val, 6, &vallen));
        if (strlen(val) != 5 || vallen != -(int)strlen(want))
            fail(key, "truncation");
        peers++;
    }

    found = 0;
    CHECK(PMI2_Info_GetJobAttr("PMI_process_mapping", mapping, sizeof mapping, &found));
    if (!found || mapping[0] == 0)
        fail("PMI_process_mapping", "missing or empty");

    const char *lr = getenv("MPI_LOCALRANKID");
    int localrank = lr ? atoi(lr) : rank;
    snprintf(want, sizeof want, "node attr of %s", jobid);
    char ints[64];
    snprintf(ints, sizeof ints, "1,2,3,%d", size);
    if (localrank == 0) {
        CHECK(PMI2_Info_PutNodeAttr("p2-ints", ints));
        CHECK(PMI2_Info_PutNodeAttr("p2-nodeattr", want));
    }
    found = 0;
    CHECK(PMI2_Info_GetNodeAttr("p2-nodeattr", attr, sizeof attr, &found, 1));
    if (!found || strcmp(attr, want) != 0)
        fail("getnodeattr", attr);
    int arr[8], outlen = 0;
    found = 0;
    CHECK(PMI2_Info_GetNodeAttrIntArray("p2-ints", arr, 8, &outlen, &found));
    if (!found || outlen != 4 || arr[0] != 1 || arr[1] != 2 || arr[2] != 3 || arr[3] != size)
        fail("getnodeattrintarray", "wrong");

    CHECK(PMI2_KVS_Get(NULL, 0, "p2-published", val, sizeof val, &vallen));
    memset(port, 0, sizeof port);
    CHECK(PMI2_Nameserv_lookup(service, NULL, port, sizeof port));
    if (strcmp(port, "port of rank 0") != 0)
        fail("PMI2_Nameserv_lookup", port);
    snprintf(key, sizeof key, "p2-looked-up-%d", rank);
    CHECK(PMI2_KVS_Put(key, "yes"));
    CHECK(PMI2_KVS_Fence());
    if (rank == 0) {
        for (int p = 0; p < size; p++) {
            snprintf(key, sizeof key, "p2-looked-up-%d", p);
            CHECK(PMI2_KVS_Get(NULL, p, key, val, sizeof val, &vallen));
        }
        CHECK(PMI2_Nameserv_unpublish(service, NULL));
        CHECK(PMI2_KVS_Put("p2-unpublished", "yes"));
    }
    CHECK(PMI2_KVS_Fence());
    CHECK(PMI2_KVS_Get(NULL, 0, "p2-unpublished", val, sizeof val, &vallen));
    if (PMI2_Nameserv_lookup(service, NULL, port, sizeof port) == PMI2_SUCCESS)
        fail("PMI2_Nameserv_lookup", "found after unpublish");

    CHECK(PMI2_Finalize());
    if (PMI2_Initialized())
        fail("PMI2_Initialized", "true after PMI2_Finalize");
    printf("pmi2_check: ok rank=%d size=%d appnum=%d peers=%d mapping=%s nodeattr=ok ints=%s "
           "lookup=ok\n",
           rank, size, appnum, peers, mapping, ints);
    fflush(stdout);
    return 0;
}
