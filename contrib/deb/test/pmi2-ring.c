/* Built against the packaged libpmi2.so (pkg-config kauri-pmi2) by contrib/deb/test.sh: every
 * rank puts a key, fences and reads its right neighbour's. One line per rank:
 * pmi2 rank R of N got "from rank (R+1)%N". */
#include <pmi2.h>
#include <stdio.h>

int main(void)
{
    int spawned, size, rank, appnum, len;
    char jobid[256], key[PMI2_MAX_KEYLEN], val[PMI2_MAX_VALLEN];
    if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS) {
        fprintf(stderr, "pmi2-ring: PMI2_Init failed\n");
        return 1;
    }
    if (PMI2_Job_GetId(jobid, sizeof jobid) != PMI2_SUCCESS)
        return 2;
    snprintf(key, sizeof key, "ring-%d", rank);
    snprintf(val, sizeof val, "from rank %d", rank);
    if (PMI2_KVS_Put(key, val) != PMI2_SUCCESS || PMI2_KVS_Fence() != PMI2_SUCCESS)
        return 3;
    int next = (rank + 1) % size;
    snprintf(key, sizeof key, "ring-%d", next);
    if (PMI2_KVS_Get(jobid, next, key, val, sizeof val, &len) != PMI2_SUCCESS || len < 0)
        return 4;
    printf("pmi2 rank %d of %d got \"%s\"\n", rank, size, val);
    return PMI2_Finalize() == PMI2_SUCCESS ? 0 : 5;
}
