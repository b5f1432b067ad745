/* ompi_names: the name service of the process manager, as Open MPI 4.1 reaches it through
 * PMIx. Needs 2 ranks or more.
 *
 * 1. Every rank looks the service up before anyone published it: MPI_ERR_NAME.
 * 2. Rank 0 publishes it late (after a second); every other rank asks first, with
 *    PMIx_Lookup and PMIX_WAIT (what Open MPI's connect/accept uses: MPI_Lookup_name itself
 *    does not wait), and gets the port once it is there.
 * 3. Every rank finds it with MPI_Lookup_name.
 * 4. The last rank tries to unpublish rank 0's name: the name stays (only its publisher may
 *    withdraw it).
 * 5. Rank 0 unpublishes it: every rank's lookup fails with MPI_ERR_NAME again.
 *
 * With the argument "strict", the answers that launchers word differently are printed too,
 * each line starting "strict:": a second publish of the name (refused), the status of the
 * stranger's unpublish (refused), and a PMIX_WAIT lookup with PMIX_TIMEOUT=1 of a name nobody
 * publishes (it times out). mpirun.openmpi 4.1 accepts the first two and waits for ever on
 * the third, so its runs leave "strict" out. Then rank 0 calls PMIx_Allocation_request twice,
 * which kauri does not implement: both fail (kauri says so once under -v); and, given a second argument
 * FILE, creates FILE and registers it for cleanup with PMIx_Job_control (PMIX_REGISTER_CLEANUP,
 * as Open MPI registers its session directory: the PMIx library removes it when the job
 * ends), then asks for a pause, which kauri does not implement.
 *
 * With the argument "bridge" (any number of ranks, rank 0 acts), to meet a PMI program of
 * another run through a name server: publishes "from-pmix" (port "port-of-pmix"), waits with
 * PMIX_WAIT for "from-pmi", unpublishes "from-pmix". */
#include <mpi.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *SVC = "ompi-names-svc";
static const char *PORT = "port-of-rank-0";

static const char *mpi_err(int rc)
{
    static char buf[32];
    int cls;
    MPI_Error_class(rc, &cls);
    switch (cls) {
    case MPI_SUCCESS: return "MPI_SUCCESS";
    case MPI_ERR_NAME: return "MPI_ERR_NAME";
    case MPI_ERR_SERVICE: return "MPI_ERR_SERVICE";
    case MPI_ERR_FILE_EXISTS: return "MPI_ERR_FILE_EXISTS";
    case MPI_ERR_ACCESS: return "MPI_ERR_ACCESS";
    case MPI_ERR_INTERN: return "MPI_ERR_INTERN";
    default: snprintf(buf, sizeof buf, "error class %d", cls); return buf;
    }
}

/* PMIx_Lookup of `key` with PMIX_WAIT, and PMIX_TIMEOUT when `timeout` > 0. */
static pmix_status_t wait_for(const char *key, int timeout, char *port, size_t len)
{
    pmix_pdata_t pd;
    pmix_info_t info[2];
    bool yes = true;
    size_t ninfo = 1;
    PMIX_PDATA_CONSTRUCT(&pd);
    snprintf(pd.key, sizeof pd.key, "%s", key);
    PMIX_INFO_LOAD(&info[0], PMIX_WAIT, &yes, PMIX_BOOL);
    if (timeout > 0) {
        PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
        ninfo = 2;
    }
    pmix_status_t st = PMIx_Lookup(&pd, 1, info, ninfo);
    if (st == PMIX_SUCCESS && pd.value.type == PMIX_STRING && pd.value.data.string)
        snprintf(port, len, "%s", pd.value.data.string);
    else
        snprintf(port, len, "-");
    PMIX_PDATA_DESTRUCT(&pd);
    return st;
}

int main(int argc, char **argv)
{
    int rank, size, rc;
    int strict = argc > 1 && strcmp(argv[1], "strict") == 0;
    char port[MPI_MAX_PORT_NAME];
    pmix_proc_t me;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* Open MPI is a PMIx client already: this only counts one more user of its library. */
    pmix_status_t st = PMIx_Init(&me, NULL, 0);
    if (st != PMIX_SUCCESS) {
        fprintf(stderr, "ompi_names: PMIx_Init: %s\n", PMIx_Error_string(st));
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (argc > 1 && strcmp(argv[1], "bridge") == 0) {
        if (rank == 0) {
            rc = MPI_Publish_name("from-pmix", MPI_INFO_NULL, "port-of-pmix");
            printf("bridge: publish from-pmix: %s\n", mpi_err(rc));
            fflush(stdout);
            st = wait_for("from-pmi", 0, port, sizeof port);
            printf("bridge: waited for from-pmi: %s %s\n", PMIx_Error_string(st), port);
            rc = MPI_Unpublish_name("from-pmix", MPI_INFO_NULL, "port-of-pmix");
            printf("bridge: unpublish from-pmix: %s\n", mpi_err(rc));
        }
        PMIx_Finalize(NULL, 0);
        MPI_Finalize();
        return 0;
    }
    if (size < 2) {
        fprintf(stderr, "ompi_names: needs 2 ranks or more\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    rc = MPI_Lookup_name(SVC, MPI_INFO_NULL, port);
    printf("ompi_names: rank %d: lookup before the publish: %s\n", rank, mpi_err(rc));
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) {
        sleep(1);
        rc = MPI_Publish_name(SVC, MPI_INFO_NULL, (char *)PORT);
        printf("ompi_names: rank 0: publish: %s\n", mpi_err(rc));
        if (strict) {
            rc = MPI_Publish_name(SVC, MPI_INFO_NULL, "another-port");
            printf("strict: rank 0: publish again: %s\n", mpi_err(rc));
        }
    } else {
        st = wait_for(SVC, 0, port, sizeof port);
        printf("ompi_names: rank %d: waited for the name: %s %s\n", rank,
               PMIx_Error_string(st), port);
    }
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);

    rc = MPI_Lookup_name(SVC, MPI_INFO_NULL, port);
    printf("ompi_names: rank %d: lookup: %s %s\n", rank, mpi_err(rc),
           rc == MPI_SUCCESS ? port : "-");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == size - 1) {
        rc = MPI_Unpublish_name(SVC, MPI_INFO_NULL, (char *)PORT);
        if (strict)
            printf("strict: rank %d: unpublish of rank 0's name: %s\n", rank, mpi_err(rc));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_Lookup_name(SVC, MPI_INFO_NULL, port);
    printf("ompi_names: rank %d: lookup after a stranger's unpublish: %s %s\n", rank,
           mpi_err(rc), rc == MPI_SUCCESS ? port : "-");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) {
        rc = MPI_Unpublish_name(SVC, MPI_INFO_NULL, (char *)PORT);
        printf("ompi_names: rank 0: unpublish: %s\n", mpi_err(rc));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_Lookup_name(SVC, MPI_INFO_NULL, port);
    printf("ompi_names: rank %d: lookup after the unpublish: %s\n", rank, mpi_err(rc));

    if (strict && rank == size - 1) {
        st = wait_for("ompi-names-nobody", 1, port, sizeof port);
        printf("strict: rank %d: wait for a name nobody publishes: %s\n", rank,
               PMIx_Error_string(st));
    }
    if (strict && rank == 0) {
        for (int i = 0; i < 2; i++) {
            pmix_info_t *results = NULL;
            size_t nresults = 0;
            st = PMIx_Allocation_request(PMIX_ALLOC_NEW, NULL, 0, &results, &nresults);
            printf("strict: rank 0: allocate %d: %s\n", i + 1, PMIx_Error_string(st));
        }
        if (argc > 2) {
            FILE *f = fopen(argv[2], "w");
            if (f)
                fclose(f);
            pmix_info_t info;
            bool yes = true;
            PMIX_INFO_LOAD(&info, PMIX_REGISTER_CLEANUP, argv[2], PMIX_STRING);
            st = PMIx_Job_control(&me, 1, &info, 1, NULL, NULL);
            printf("strict: rank 0: register a file for cleanup: %s\n", PMIx_Error_string(st));
            PMIX_INFO_DESTRUCT(&info);
            PMIX_INFO_LOAD(&info, PMIX_JOB_CTRL_PAUSE, &yes, PMIX_BOOL);
            st = PMIx_Job_control(&me, 1, &info, 1, NULL, NULL);
            printf("strict: rank 0: pause: %s\n", PMIx_Error_string(st));
            PMIX_INFO_DESTRUCT(&info);
        }
    }
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    PMIx_Finalize(NULL, 0);
    MPI_Finalize();
    return 0;
}
