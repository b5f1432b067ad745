/* pmi1_check: a program linked with -lpmi (Kauri's libpmi.so, contrib/libpmi/include/pmi.h).
 * Every rank: PMI_Initialized/PMI_Init, size, rank (against PMI_RANK), appnum, universe size,
 * the KVS limits, the clique (size, ranks: ascending, containing the rank), two puts with
 * values holding spaces, '~' and '\' (one short, one of the longest length the library
 * allows), commit, barrier, every peer's two values read back and compared, the name service
 * (rank 0 publishes a port with spaces, the others look it up, rank 0 unpublishes and the
 * lookup then fails), finalize. Prints
 *   "pmi1_check: ok rank=R size=N appnum=A universe=U clique=a,b,.. peers=P lookup=ok"
 * or "pmi1_check: FAIL rank=R what detail" and exits 1. */
#include <pmi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(call)                                                                \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != PMI_SUCCESS) {                                                  \
            printf("pmi1_check: FAIL rank=%d %s returned %d\n", rank, #call, rc_); \
            fflush(stdout);                                                        \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static void fail(const char *what, const char *detail)
{
    printf("pmi1_check: FAIL rank=%d %s %s\n", rank, what, detail);
    fflush(stdout);
    exit(1);
}

static void short_value(char *buf, size_t len, int r)
{
    snprintf(buf, len, "~rank %d says:  hello world \\ ~ end ", r);
}

/* The longest value: vallen - 1 bytes, a space every third byte, starting with '~'. */
static void long_value(char *buf, int vallen, int r)
{
    for (int i = 0; i < vallen - 1; i++)
        buf[i] = i == 0 ? '~' : i % 3 == 0 ? ' ' : (char)('a' + (r + i) % 26);
    buf[vallen - 1] = 0;
}

int main(void)
{
    int initialized = -1, spawned = -1, size = -1, appnum = -1, universe = -1;
    int namelen = 0, keylen = 0, vallen = 0, csize = 0;

    CHECK(PMI_Initialized(&initialized));
    if (initialized != PMI_FALSE)
        fail("PMI_Initialized", "true before PMI_Init");
    CHECK(PMI_Init(&spawned));
    CHECK(PMI_Initialized(&initialized));
    if (initialized != PMI_TRUE)
        fail("PMI_Initialized", "false after PMI_Init");
    if (spawned != PMI_FALSE)
        fail("PMI_Init", "spawned");
    CHECK(PMI_Get_size(&size));
    CHECK(PMI_Get_rank(&rank));
    if (size < 1 || rank < 0 || rank >= size)
        fail("init", "bad rank/size");
    const char *env_rank = getenv("PMI_RANK");
    if (env_rank && atoi(env_rank) != rank)
        fail("init", "rank differs from PMI_RANK");
    CHECK(PMI_Get_appnum(&appnum));
    CHECK(PMI_Get_universe_size(&universe));

    CHECK(PMI_KVS_Get_name_length_max(&namelen));
    CHECK(PMI_KVS_Get_key_length_max(&keylen));
    CHECK(PMI_KVS_Get_value_length_max(&vallen));
    if (namelen < 16 || keylen < 16 || vallen < 256 || vallen > 1024)
        fail("maxes", "implausible");
    char *kvsname = calloc(namelen, 1), *key = calloc(keylen, 1);
    char *val = calloc(vallen, 1), *want = calloc(vallen, 1);
    CHECK(PMI_KVS_Get_my_name(kvsname, namelen));
    if (kvsname[0] == 0)
        fail("PMI_KVS_Get_my_name", "empty");
    char small[2];
    if (PMI_KVS_Get_my_name(small, sizeof small) == PMI_SUCCESS && strlen(kvsname) > 1)
        fail("PMI_KVS_Get_my_name", "accepted a buffer too small");

    CHECK(PMI_Get_clique_size(&csize));
    if (csize < 1 || csize > size)
        fail("PMI_Get_clique_size", "out of range");
    int *cranks = calloc(csize, sizeof(int));
    CHECK(PMI_Get_clique_ranks(cranks, csize));
    int mine = 0;
    for (int i = 0; i < csize; i++) {
        if (cranks[i] == rank)
            mine = 1;
        if (i > 0 && cranks[i] <= cranks[i - 1])
            fail("PMI_Get_clique_ranks", "not ascending");
    }
    if (!mine)
        fail("PMI_Get_clique_ranks", "rank missing");

    snprintf(key, keylen, "p1-short-%d", rank);
    short_value(val, vallen, rank);
    CHECK(PMI_KVS_Put(kvsname, key, val));
    snprintf(key, keylen, "p1-long-%d", rank);
    long_value(val, vallen, rank);
    CHECK(PMI_KVS_Put(kvsname, key, val));
    /* one byte more than the limit is refused, not sent */
    char *toolong = malloc(vallen + 1);
    memset(toolong, 'x', vallen);
    toolong[vallen] = 0;
    if (PMI_KVS_Put(kvsname, key, toolong) == PMI_SUCCESS)
        fail("PMI_KVS_Put", "accepted a value of value_length_max bytes");

    char service[300], port[256];
    snprintf(service, sizeof service, "p1-service-%s", kvsname);
    if (rank == 0)
        CHECK(PMI_Publish_name(service, "port of  rank 0"));

    CHECK(PMI_KVS_Commit(kvsname));
    CHECK(PMI_Barrier());

    int peers = 0;
    for (int p = 0; p < size; p++) {
        snprintf(key, keylen, "p1-short-%d", p);
        short_value(want, vallen, p);
        CHECK(PMI_KVS_Get(kvsname, key, val, vallen));
        if (strcmp(val, want) != 0)
            fail(key, val);
        snprintf(key, keylen, "p1-long-%d", p);
        long_value(want, vallen, p);
        CHECK(PMI_KVS_Get(kvsname, key, val, vallen));
        if (strcmp(val, want) != 0)
            fail(key, "differs");
        peers++;
    }
    if (PMI_KVS_Get(kvsname, "p1-nobody-put-this", val, vallen) == PMI_SUCCESS)
        fail("PMI_KVS_Get", "found a key nobody put");

    memset(port, 0, sizeof port);
    CHECK(PMI_Lookup_name(service, port));
    if (strcmp(port, "port of  rank 0") != 0)
        fail("PMI_Lookup_name", port);
    CHECK(PMI_Barrier());
    if (rank == 0)
        CHECK(PMI_Unpublish_name(service));
    CHECK(PMI_Barrier());
    if (PMI_Lookup_name(service, port) == PMI_SUCCESS)
        fail("PMI_Lookup_name", "found after unpublish");

    CHECK(PMI_Finalize());
    CHECK(PMI_Initialized(&initialized));
    if (initialized != PMI_FALSE)
        fail("PMI_Initialized", "true after PMI_Finalize");

    printf("pmi1_check: ok rank=%d size=%d appnum=%d universe=%d clique=", rank, size, appnum,
           universe);
    for (int i = 0; i < csize; i++)
        printf("%s%d", i ? "," : "", cranks[i]);
    printf(" peers=%d lookup=ok\n", peers);
    fflush(stdout);
    return 0;
}
