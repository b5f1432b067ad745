/* ompi_locality: what the launcher's PMIx server says about where each rank is, and what
 * Open MPI makes of it. Each rank prints one line:
 *   ompi_locality: rank R cpuset=S locality=L distances=D socket=N numa=M
 * S: its PMIX_CPUSET ("none": not given), L: its PMIX_LOCALITY_STRING ("none": not given,
 * "(type 3)": given as NULL, the server's word for an unbound rank), D: its
 * PMIX_DEVICE_DISTANCES, their number then (OSNAME/TYPE/MIN-MAX, ...), and N, M: the size
 * of its MPI_Comm_split_type(OMPI_COMM_TYPE_SOCKET / _NUMA), which Open MPI computes from
 * its peers' cpusets (4.1) or locality strings (5.0). Built with the MPI's mpicc and
 * OpenPMIx's headers. */
#include <mpi.h>
#include <pmix.h>
#include <stdio.h>
#include <string.h>

static void str_of(pmix_proc_t *p, const char *key, char *out, size_t n) {
    pmix_value_t *v = NULL;
    pmix_info_t opt;
    PMIX_INFO_LOAD(&opt, PMIX_OPTIONAL, NULL, PMIX_BOOL);
    snprintf(out, n, "none");
    if (PMIX_SUCCESS == PMIx_Get(p, key, &opt, 1, &v) && v) {
        if (v->type == PMIX_STRING && v->data.string) snprintf(out, n, "%s", v->data.string);
        else if (v->type == PMIX_DATA_ARRAY && v->data.darray &&
                 v->data.darray->type == PMIX_DEVICE_DIST) {
            pmix_device_distance_t *d = v->data.darray->array;
            size_t i, at = snprintf(out, n, "%zu", v->data.darray->size);
            for (i = 0; i < v->data.darray->size && at < n; i++)
                at += snprintf(out + at, n - at, "%s%s/%s/%u-%u", i ? "," : "(", d[i].osname,
                               PMIx_Device_type_string(d[i].type), d[i].mindist, d[i].maxdist);
            if (at < n && v->data.darray->size) snprintf(out + at, n - at, ")");
        }
        else snprintf(out, n, "(type %d)", v->type);
        PMIX_VALUE_RELEASE(v);
    }
}

static int split_size(int type) {
    MPI_Comm c;
    int n = -1;
    MPI_Comm_split_type(MPI_COMM_WORLD, type, 0, MPI_INFO_NULL, &c);
    if (c != MPI_COMM_NULL) { MPI_Comm_size(c, &n); MPI_Comm_free(&c); }
    return n;
}

int main(int argc, char **argv) {
    int rank;
    pmix_proc_t me;
    char cpuset[256], loc[256], dist[1024];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (PMIX_SUCCESS != PMIx_Init(&me, NULL, 0)) {
        printf("ompi_locality: rank %d: PMIx_Init failed\n", rank);
        return 1;
    }
    str_of(&me, PMIX_CPUSET, cpuset, sizeof cpuset);
    str_of(&me, PMIX_LOCALITY_STRING, loc, sizeof loc);
    str_of(&me, PMIX_DEVICE_DISTANCES, dist, sizeof dist);
    int sock = split_size(OMPI_COMM_TYPE_SOCKET), numa = split_size(OMPI_COMM_TYPE_NUMA);
    printf("ompi_locality: rank %d cpuset=%s locality=%s distances=%s socket=%d numa=%d\n",
           rank, cpuset, loc, dist, sock, numa);
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    MPI_Finalize();
    return 0;
}
