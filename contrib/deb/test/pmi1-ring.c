/* Built against the packaged libpmi.so (pkg-config kauri-pmi) by contrib/deb/test.sh: every
 * rank puts a key, commits, waits at the barrier and reads its right neighbour's. One line
 * per rank: pmi1 rank R of N got "from rank (R+1)%N". */
#include <pmi.h>
#include <stdio.h>

int main(void)
{
    int spawned, size, rank;
    char kvs[256], key[64], val[256];
    if (PMI_Init(&spawned) != PMI_SUCCESS) {
        fprintf(stderr, "pmi1-ring: PMI_Init failed\n");
        return 1;
    }
    if (PMI_Get_size(&size) != PMI_SUCCESS || PMI_Get_rank(&rank) != PMI_SUCCESS ||
        PMI_KVS_Get_my_name(kvs, sizeof kvs) != PMI_SUCCESS)
        return 2;
    snprintf(key, sizeof key, "ring-%d", rank);
    snprintf(val, sizeof val, "from rank %d", rank);
    if (PMI_KVS_Put(kvs, key, val) != PMI_SUCCESS || PMI_KVS_Commit(kvs) != PMI_SUCCESS ||
        PMI_Barrier() != PMI_SUCCESS)
        return 3;
    snprintf(key, sizeof key, "ring-%d", (rank + 1) % size);
    if (PMI_KVS_Get(kvs, key, val, sizeof val) != PMI_SUCCESS)
        return 4;
    printf("pmi1 rank %d of %d got \"%s\"\n", rank, size, val);
    return PMI_Finalize() == PMI_SUCCESS ? 0 : 5;
}
