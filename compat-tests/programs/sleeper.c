/* sleeper: MPI_Init, print "sleeper: rank R ready", then sleep forever (for MPIEXEC_TIMEOUT). */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("sleeper: rank %d ready\n", rank);
    fflush(stdout);
    for (;;)
        pause();
}
