/* ompi5_ulfm MODE: a fault-tolerant (ULFM) program of Open MPI 5 whose last rank dies, and
 * whose survivors recover: revoke, shrink, agree.
 *
 * Build it with the mpicc of an Open MPI 5 (its mpi-ext.h has the MPIX_Comm_* functions);
 * run it with fault tolerance on: `mpirun --with-ft ulfm` or `kauri -with-ft ulfm`.
 *
 * Every rank sets MPI_ERRORS_RETURN on MPI_COMM_WORLD; then the last rank dies, by MODE:
 *
 *   signal  raise(SIGKILL)
 *   agent   SIGKILL to its parent (under kauri -launcher fork, its host's agent: the host
 *           is lost with every rank on it), then to itself
 *   two     the last two ranks raise(SIGKILL) (with -ppn 2: every rank of the last host)
 *
 * The others enter a barrier (it fails, or succeeds if it completed before the death was
 * known), revoke MPI_COMM_WORLD, shrink it and agree on the shrunk communicator, and print
 *
 *   ompi5_ulfm: rank R of N: shrunk size S rank NR agree rc=RC flag=F
 *
 * (R, N: the rank and size in MPI_COMM_WORLD; S, NR: in the shrunk communicator; RC: the
 * agreement's error class, 0 for MPI_SUCCESS; F: the agreed flag, 1). Then they free it and
 * finalize, and exit 0. A shrink that fails aborts with code 3.
 *
 * It ignores SIGPIPE, as a fault-tolerant program over TCP must: Open MPI's TCP transport
 * sends with writev, so a survivor that writes to a dead peer's socket is killed by SIGPIPE
 * otherwise (a launcher starts ranks with SIGPIPE at its default: PRRTE's daemons and kauri
 * alike). Python ignores SIGPIPE at start-up, so ulfm.py needs no such line. Without it, the
 * lost-host case lost rank 0 to SIGPIPE in about one run of four. */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, rc, cls, flag = 1, nsize = -1, nrank = -1;
    MPI_Comm shrunk;
    const char *mode = argc > 1 ? argv[1] : "signal";

    signal(SIGPIPE, SIG_IGN);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == size - 1 || (rank == size - 2 && 0 == strcmp(mode, "two"))) {
        if (0 == strcmp(mode, "agent"))
            kill(getppid(), SIGKILL);
        raise(SIGKILL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPIX_Comm_revoke(MPI_COMM_WORLD);
    if (MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk) != MPI_SUCCESS) {
        fprintf(stderr, "ompi5_ulfm: rank %d: MPIX_Comm_shrink failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    MPI_Comm_size(shrunk, &nsize);
    MPI_Comm_rank(shrunk, &nrank);
    rc = MPIX_Comm_agree(shrunk, &flag);
    MPI_Error_class(rc, &cls);
    printf("ompi5_ulfm: rank %d of %d: shrunk size %d rank %d agree rc=%d flag=%d\n", rank,
           size, nsize, nrank, cls, flag);
    fflush(stdout);
    MPI_Comm_free(&shrunk);
    MPI_Finalize();
    return 0;
}
