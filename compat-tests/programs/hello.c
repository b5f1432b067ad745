/* hello: every rank prints "hello rank R of N on PROCESSOR_NAME". */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, len;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(name, &len);
    printf("hello rank %d of %d on %s\n", rank, size, name);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
