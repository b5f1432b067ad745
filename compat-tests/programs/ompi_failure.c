/* ompi_failure MODE [handler|nohandler [SECONDS]]: a PMIx failure event seen by the
 * survivors.
 *
 * Every rank calls MPI_Init, then PMIx_Init (the same connection: Open MPI 4.1 uses this
 * libpmix), registers one handler for the failure codes a launcher sends when a process
 * dies (unless "nohandler": then only Open MPI's own default handler is there), and enters
 * a barrier, so every handler is in place before anyone dies. Then the last rank dies:
 *
 *   kill   raise(SIGKILL)
 *   exit3  exit(3) without MPI_Finalize
 *   exit0  exit(0) without MPI_Finalize
 *   agent  SIGKILL to its parent (under kauri -launcher fork, its host's agent), then to
 *          itself: its host is lost
 *   abortproc  rank 0 calls PMIx_Abort(7, ..., {the last rank}) and the last rank waits to
 *          be killed; rank 0 prints "ompi_failure: rank 0 aborted the last rank: STATUS"
 *
 * and every other rank waits (polling, at most SECONDS, 60 by default) for the handler to run, then prints
 *
 *   ompi_failure: rank R saw CODE source=S affected=A exit=E
 *
 * (CODE: PMIx_Error_string of the status; S: the source's rank; A: PMIX_EVENT_AFFECTED_PROC
 * or each of PMIX_EVENT_AFFECTED_PROCS, '-' when absent; E: PMIX_EXIT_CODE, '-' when absent)
 * or "ompi_failure: rank R saw nothing", and calls PMIx_Finalize and MPI_Finalize (run it with
 * OMPI_MCA_mpi_async_mpi_finalize=1: Open MPI's finalize then has no fence, which would
 * wait for the dead rank forever). The handler completes the event
 * (PMIX_EVENT_ACTION_COMPLETE), so Open MPI's default handler, which aborts the process, is
 * not called after it. A SIGTERM (a launcher's teardown) is noted and otherwise ignored:
 * the rank still waits for the event, and prints "ompi_failure: rank R got SIGTERM" at the
 * end, so a run shows whether the event arrived although the job was being ended. */
#include <mpi.h>
#include <pmix.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got_term = 0;
static volatile int seen = 0;
static char line[512];

static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
}

static void handler(size_t id, pmix_status_t status, const pmix_proc_t *source,
                    pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    char affected[128] = "-", exitc[32] = "-";
    size_t n, k, used = 0;
    (void)id;
    (void)results;
    (void)nresults;
    for (n = 0; n < ninfo; n++) {
        if (0 == strcmp(info[n].key, PMIX_EVENT_AFFECTED_PROC) &&
            PMIX_PROC == info[n].value.type) {
            used += snprintf(affected + used, sizeof affected - used, "%s%u",
                             used ? "," : "", info[n].value.data.proc->rank);
        } else if (0 == strcmp(info[n].key, PMIX_EVENT_AFFECTED_PROCS) &&
                   PMIX_DATA_ARRAY == info[n].value.type) {
            pmix_data_array_t *d = info[n].value.data.darray;
            pmix_proc_t *p = (pmix_proc_t *)d->array;
            for (k = 0; k < d->size && used < sizeof affected; k++) {
                used += snprintf(affected + used, sizeof affected - used, "%s%u",
                                 used ? "," : "", p[k].rank);
            }
        } else if (0 == strcmp(info[n].key, PMIX_EXIT_CODE) && PMIX_INT == info[n].value.type) {
            snprintf(exitc, sizeof exitc, "%d", info[n].value.data.integer);
        }
    }
    if (!seen) {
        snprintf(line, sizeof line, "saw %s source=%u affected=%s exit=%s",
                 PMIx_Error_string(status), source ? source->rank : 99999, affected, exitc);
        __sync_synchronize();
        seen = 1;
    }
    if (NULL != cbfunc) {
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
    }
}

int main(int argc, char **argv)
{
    int rank, size, i;
    const char *mode = argc > 1 ? argv[1] : "kill";
    int own = !(argc > 2 && 0 == strcmp(argv[2], "nohandler"));
    int wait_s = argc > 3 ? atoi(argv[3]) : 60;
    pmix_proc_t me;
    pmix_status_t codes[] = {PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_ABORTED_BY_SIG,
                             PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_ERR_EXIT_NONZERO_TERM,
                             PMIX_ERR_LOST_CONNECTION, PMIX_ERR_PROC_REQUESTED_ABORT};
    signal(SIGTERM, on_term);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (PMIX_SUCCESS != PMIx_Init(&me, NULL, 0)) {
        printf("ompi_failure: rank %d: PMIx_Init failed\n", rank);
        return 1;
    }
    if (own) {
        /* No callback: the registration completes before the call returns. */
        int rc = PMIx_Register_event_handler(codes, sizeof codes / sizeof codes[0], NULL, 0,
                                             handler, NULL, NULL);
        if (rc < 0) {
            printf("ompi_failure: rank %d: registration failed: %s\n", rank,
                   PMIx_Error_string(rc));
            return 1;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (0 == strcmp(mode, "abortproc") && rank == 0) {
        pmix_proc_t last;
        PMIX_PROC_LOAD(&last, me.nspace, size - 1);
        pmix_status_t rc = PMIx_Abort(7, "ompi_failure: rank 0 aborts the last rank", &last, 1);
        printf("ompi_failure: rank 0 aborted the last rank: %s\n", PMIx_Error_string(rc));
        fflush(stdout);
    }
    if (0 == strcmp(mode, "abortproc") && rank == size - 1) {
        fflush(stdout);
        for (;;) pause();
    }
    if (rank == size - 1) {
        fflush(stdout);
        if (0 == strcmp(mode, "exit3")) {
            exit(3);
        } else if (0 == strcmp(mode, "exit0")) {
            exit(0);
        } else if (0 == strcmp(mode, "agent")) {
            /* Its parent: kauri's agent on a -launcher fork host, which is lost. */
            kill(getppid(), SIGKILL);
        }
        raise(SIGKILL);
    }
    for (i = 0; i < wait_s * 100 && !seen; i++) {
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    __sync_synchronize();
    if (seen) {
        printf("ompi_failure: rank %d %s\n", rank, line);
    } else {
        printf("ompi_failure: rank %d saw nothing\n", rank);
    }
    if (got_term) {
        printf("ompi_failure: rank %d got SIGTERM\n", rank);
    }
    fflush(stdout);
    /* Its own PMIx_Init's, then Open MPI's: the server hears of the finalize at the last. */
    PMIx_Finalize(NULL, 0);
    MPI_Finalize();
    return 0;
}
