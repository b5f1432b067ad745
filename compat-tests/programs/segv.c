/* segv VICTIM: rank VICTIM (argv[1], default 1) raises SIGSEGV after MPI_Init; the others
 * block in a receive that is never matched. Each rank prints "segv: rank R ready" first. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, victim = argc > 1 ? atoi(argv[1]) : 1, x;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("segv: rank %d ready\n", rank);
    fflush(stdout);
    if (rank == victim) {
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    }
    MPI_Recv(&x, 1, MPI_INT, victim, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("segv: rank %d received (must not happen)\n", rank);
    MPI_Finalize();
    return 0;
}
