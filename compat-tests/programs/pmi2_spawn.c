/* pmi2_spawn: PMI2_Job_Spawn through Kauri's libpmi2.so. Started as one rank, it spawns two
 * copies of itself (argument "child") with the preput pair p2-from-parent = "hello from parent"
 * and checks the new job id is not its own and both error codes are 0, then prints
 * "pmi2_spawn: parent rank 0 spawned 2". Each child checks it was spawned, reads the preput
 * value, and prints "pmi2_spawn: child rank R of 2 preput=ok". Failures print
 * "pmi2_spawn: FAIL what" and exit 1. */
#include <pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREPUT "hello from parent"

#define CHECK(call)                                                    \
    do {                                                               \
        int rc_ = (call);                                              \
        if (rc_ != PMI2_SUCCESS) {                                     \
            printf("pmi2_spawn: FAIL %s returned %d\n", #call, rc_);   \
            fflush(stdout);                                            \
            exit(1);                                                   \
        }                                                              \
    } while (0)

static void fail(const char *what)
{
    printf("pmi2_spawn: FAIL %s\n", what);
    fflush(stdout);
    exit(1);
}

int main(int argc, char **argv)
{
    int spawned = -1, size = -1, rank = -1, appnum = -1, vallen = 0;
    char jobid[256], child_job[256], val[PMI2_MAX_VALLEN];
    CHECK(PMI2_Init(&spawned, &size, &rank, &appnum));
    CHECK(PMI2_Job_GetId(jobid, sizeof jobid));

    if (argc < 2 || strcmp(argv[1], "child") != 0) {
        if (spawned)
            fail("parent reports spawned");
        const char *cmds[1] = {argv[0]};
        const char *child_args[1] = {"child"};
        const char **argvs[1] = {child_args};
        int argcs[1] = {1}, maxprocs[1] = {2}, info_sizes[1] = {0}, errors[2] = {-1, -1};
        const PMI2_Keyval_t *infos[1] = {NULL};
        PMI2_Keyval_t pair = {"p2-from-parent", PREPUT};
        const PMI2_Keyval_t *preput[1] = {&pair};
        child_job[0] = 0;
        CHECK(PMI2_Job_Spawn(1, cmds, argcs, argvs, maxprocs, info_sizes, infos, 1, preput,
                             child_job, sizeof child_job, errors));
        if (errors[0] != 0 || errors[1] != 0)
            fail("error codes");
        if (strcmp(child_job, jobid) == 0)
            fail("the children's job id is the parent's");
        printf("pmi2_spawn: parent rank %d spawned 2\n", rank);
        fflush(stdout);
        CHECK(PMI2_Finalize());
        return 0;
    }

    if (!spawned)
        fail("child does not report spawned");
    if (size != 2)
        fail("child job size is not 2");
    CHECK(PMI2_KVS_Get(NULL, PMI2_ID_NULL, "p2-from-parent", val, sizeof val, &vallen));
    if (strcmp(val, PREPUT) != 0)
        fail(val);
    printf("pmi2_spawn: child rank %d of %d preput=ok\n", rank, size);
    fflush(stdout);
    CHECK(PMI2_Finalize());
    return 0;
}
