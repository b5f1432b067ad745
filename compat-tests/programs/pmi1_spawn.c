/* pmi1_spawn: PMI_Spawn_multiple through Kauri's libpmi.so. Started as one rank, it spawns
 * two copies of itself (argument "child") with the preput pair
 * p1-from-parent = "hello  from ~parent" and checks both error codes are 0, then prints
 * "pmi1_spawn: parent rank 0 spawned 2". Each child checks it was spawned, reads the preput
 * value from its own KVS, puts and reads its sibling's key across a barrier, and prints
 * "pmi1_spawn: child rank R of 2 preput=ok sibling=ok". Failures print
 * "pmi1_spawn: FAIL what" and exit 1. */
#include <pmi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREPUT "hello  from ~parent"

#define CHECK(call)                                                    \
    do {                                                               \
        int rc_ = (call);                                              \
        if (rc_ != PMI_SUCCESS) {                                      \
            printf("pmi1_spawn: FAIL %s returned %d\n", #call, rc_);   \
            fflush(stdout);                                            \
            exit(1);                                                   \
        }                                                              \
    } while (0)

static void fail(const char *what)
{
    printf("pmi1_spawn: FAIL %s\n", what);
    fflush(stdout);
    exit(1);
}

int main(int argc, char **argv)
{
    int spawned = -1, size = -1, rank = -1, vallen = 0, keylen = 0, namelen = 0;
    CHECK(PMI_Init(&spawned));
    CHECK(PMI_Get_size(&size));
    CHECK(PMI_Get_rank(&rank));
    CHECK(PMI_KVS_Get_value_length_max(&vallen));
    CHECK(PMI_KVS_Get_key_length_max(&keylen));
    CHECK(PMI_KVS_Get_name_length_max(&namelen));
    char *kvs = calloc(namelen, 1), *val = calloc(vallen, 1), *key = calloc(keylen, 1);
    CHECK(PMI_KVS_Get_my_name(kvs, namelen));

    if (argc < 2 || strcmp(argv[1], "child") != 0) {
        if (spawned)
            fail("parent reports spawned");
        const char *cmds[1] = {argv[0]};
        const char *child_args[2] = {"child", NULL};
        const char **argvs[1] = {child_args};
        int maxprocs[1] = {2}, info_sizes[1] = {0}, errors[2] = {-1, -1};
        const PMI_keyval_t *infos[1] = {NULL};
        PMI_keyval_t preput[1] = {{"p1-from-parent", (char *)PREPUT}};
        CHECK(PMI_Spawn_multiple(1, cmds, argvs, maxprocs, info_sizes, infos, 1, preput,
                                 errors));
        if (errors[0] != 0 || errors[1] != 0)
            fail("error codes");
        printf("pmi1_spawn: parent rank %d spawned 2\n", rank);
        fflush(stdout);
        CHECK(PMI_Finalize());
        return 0;
    }

    if (!spawned)
        fail("child does not report spawned");
    if (size != 2)
        fail("child job size is not 2");
    CHECK(PMI_KVS_Get(kvs, "p1-from-parent", val, vallen));
    if (strcmp(val, PREPUT) != 0)
        fail(val);
    snprintf(key, keylen, "p1-child-%d", rank);
    CHECK(PMI_KVS_Put(kvs, key, "sibling value"));
    CHECK(PMI_KVS_Commit(kvs));
    CHECK(PMI_Barrier());
    snprintf(key, keylen, "p1-child-%d", 1 - rank);
    CHECK(PMI_KVS_Get(kvs, key, val, vallen));
    if (strcmp(val, "sibling value") != 0)
        fail("sibling");
    printf("pmi1_spawn: child rank %d of %d preput=ok sibling=ok\n", rank, size);
    fflush(stdout);
    CHECK(PMI_Finalize());
    return 0;
}
