/* ompi_hello: Open MPI hello. Every rank: MPI_Init, rank/size, an allreduce of 1, and the
 * number of ranks on its node (MPI_Comm_split_type SHARED, which Open MPI derives from the
 * process manager's locality information). Prints
 *   "ompi_hello: rank R of N allreduce=N local=L"
 * Under a PMI-1 launcher Open MPI needs FLUX_JOB_ID and FLUX_PMI_LIBRARY_PATH. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, one = 1, sum = 0, local = 0;
    MPI_Comm node;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    printf("ompi_hello: rank %d of %d allreduce=%d local=%d\n", rank, size, sum, local);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
