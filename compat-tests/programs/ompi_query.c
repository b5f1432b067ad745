/* ompi_query: rank 0 asks its launcher's PMIx server (PMIx_Query_info) for
 *   pmix.qry.ns       the namespaces of the run
 *   pmix.job.size     the size of its own namespace (qualifier PMIX_NSPACE)
 *   pmix.qry.psetnum  the number of process sets
 *   pmix.qry.psets    their names
 *   pmix.qry.nsinfo   (kauri does not answer it: NOT-FOUND)
 * and prints one line per query:
 *   ompi_query: KEY: STATUS [VALUE]
 * where a pmix.qry.ns answer is shown as "N namespace(s), mine listed|mine missing". */
#include <mpi.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pmix_proc_t me;

static void ask(const char *key, int qualified) {
    pmix_query_t q;
    pmix_info_t *res = NULL;
    size_t nres = 0, i;
    pmix_status_t rc;
    PMIX_QUERY_CONSTRUCT(&q);
    PMIX_ARGV_APPEND(rc, q.keys, key);
    if (qualified) {
        PMIX_INFO_CREATE(q.qualifiers, 1);
        q.nqual = 1;
        PMIX_INFO_LOAD(&q.qualifiers[0], PMIX_NSPACE, me.nspace, PMIX_STRING);
    }
    rc = PMIx_Query_info(&q, 1, &res, &nres);
    printf("ompi_query: %s: %s", key, PMIx_Error_string(rc));
    for (i = 0; i < nres; i++) {
        pmix_value_t *v = &res[i].value;
        if (0 == strcmp(res[i].key, PMIX_QUERY_NAMESPACES) && v->type == PMIX_STRING) {
            int n = 0;
            char *s = strdup(v->data.string), *tok, *save = NULL, *mine = "mine missing";
            for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                n++;
                if (0 == strcmp(tok, me.nspace)) mine = "mine listed";
            }
            printf(" %d namespace(s), %s", n, mine);
            free(s);
        } else if (v->type == PMIX_STRING) {
            printf(" '%s'", v->data.string);
        } else if (v->type == PMIX_UINT32) {
            printf(" %u", v->data.uint32);
        } else if (v->type == PMIX_SIZE) {
            printf(" %zu", v->data.size);
        } else {
            printf(" (type %d)", v->type);
        }
    }
    printf("\n");
    fflush(stdout);
    PMIX_QUERY_DESTRUCT(&q);
    if (res) PMIX_INFO_FREE(res, nres);
}

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (PMIX_SUCCESS != PMIx_Init(&me, NULL, 0)) {
        printf("ompi_query: rank %d: PMIx_Init failed\n", rank);
        return 1;
    }
    if (rank == 0) {
        ask(PMIX_QUERY_NAMESPACES, 0);
        ask(PMIX_JOB_SIZE, 1);
        ask(PMIX_QUERY_NUM_PSETS, 0);
        ask(PMIX_QUERY_PSET_NAMES, 0);
        ask(PMIX_QUERY_NAMESPACE_INFO, 0);
    }
    PMIx_Finalize(NULL, 0);
    MPI_Finalize();
    return 0;
}
