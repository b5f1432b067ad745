/* A PMIx lookup that waits (PMIX_WAIT, no timeout) for a name nobody publishes: rank 0
 * leaves at once, every other rank looks the name up. Under a launcher that ends such a
 * lookup, each prints "lookup-ended <status>" and the program ends; one that does not, hangs.
 * Built and run by compat-tests/tests/pmix_examples.rs. */
#include <pmix.h>
#include <stdio.h>

int main(void)
{
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (PMIX_SUCCESS != rc) {
        fprintf(stderr, "PMIx_Init failed: %d\n", rc);
        return 1;
    }
    if (0 != me.rank) {
        pmix_pdata_t *pdata;
        pmix_info_t *info;
        int zero = 0;
        PMIX_PDATA_CREATE(pdata, 1);
        PMIX_LOAD_KEY(pdata[0].key, "NOBODY-PUBLISHES-THIS");
        PMIX_INFO_CREATE(info, 1);
        PMIX_INFO_LOAD(&info[0], PMIX_WAIT, &zero, PMIX_INT);
        rc = PMIx_Lookup(pdata, 1, info, 1);
        printf("lookup-ended %d\n", rc);
        fflush(stdout);
        PMIX_INFO_FREE(info, 1);
        PMIX_PDATA_FREE(pdata, 1);
    }
    PMIx_Finalize(NULL, 0);
    return 0;
}
